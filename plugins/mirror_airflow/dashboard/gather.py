"""What the dashboard shows, assembled from its inputs; every input comes through `Edges`, so the
assembly runs in unit tests with fakes and in the api-server with the real I/O of sources.py.

A mirror's state, worst first:
    halted    its worker reports halted partitions, schema conflicts or topics it cannot mirror (Prometheus metrics)
    stalled   its worker reports partitions whose records wait while none is copied, or a topic filter that
              selects no topic
    paused    its lifecycle DAG `mirror__NAME` is paused in Airflow
    lagging   the lag rules fail: over the dashboard's kept history once it covers the lag window, or
              the lag sensor's newest verdict (younger than the window) is a failing one
    running   none of the above (the DAG is unpaused)
    unknown   Airflow has not parsed the mirror's DAG, or the spec entry is invalid
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mirror_airflow.dag_ids import lag_dag_id, lifecycle_dag_id, verify_dag_id
from mirror_airflow.dashboard.sampler import Sampler
from mirror_airflow.dashboard.store import HistoryStore, Verdict
from mirror_airflow.lag.rules import Evaluation, Limits, PartitionKey, Sample, Status, covers, evaluate, merge_windows


@dataclass(frozen=True)
class MirrorSpec:
    """One mirror of the spec as the dashboard needs it."""

    name: str
    config: object | None  # mirror_worker.config.model.MirrorConfig; None when the entry is invalid
    error: str | None
    limits: Limits
    window_s: float
    metrics_port: int | None
    report_dir: str


@dataclass(frozen=True)
class WorkerStatus:
    """From the worker's Prometheus endpoint; `error` when it could not be read."""

    halted: tuple[tuple[str, str, int], ...] = ()  # (source, topic, partition)
    conflicts: tuple[tuple[str, str], ...] = ()  # (source, topic)
    records_produced: float | None = None
    error: str | None = None
    stalled: tuple[tuple[str, str, int], ...] = ()  # (source, topic, partition): records wait, none copied
    not_mirrored: tuple[tuple[str, str], ...] = ()  # (source, topic): its destination topic cannot be made
    selects_nothing: tuple[str, ...] = ()  # sources whose topics the filter selects none of
    # What the worker's clients see of the clusters now: cluster ("destination" or a source) -> count.
    brokers_down: tuple[tuple[str, int], ...] = ()
    partitions_without_leader: tuple[tuple[str, int], ...] = ()
    delivery_retries: float | None = None  # produce requests sent again since the worker started

    @property
    def problems(self) -> bool:
        return bool(self.halted or self.conflicts or self.not_mirrored)


def cluster_faults(worker: WorkerStatus) -> list[str]:
    """One line per cluster the worker sees faults on now (unreachable brokers, partitions without a reachable
    leader); nothing when all is well."""
    down, leaderless = dict(worker.brokers_down), dict(worker.partitions_without_leader)
    lines = []
    for cluster in sorted(set(down) | set(leaderless)):
        parts = []
        if down.get(cluster):
            parts.append(f"{down[cluster]} broker(s) the worker needs cannot be reached")
        if leaderless.get(cluster):
            parts.append(f"{leaderless[cluster]} partition(s) without a reachable leader")
        if parts:
            lines.append(f"{cluster}: " + "; ".join(parts))
    return lines


@dataclass(frozen=True)
class Report:
    """The newest verification report of a mirror."""

    json_path: str
    html_path: str | None
    status: str
    totals: dict
    created: float


@dataclass(frozen=True)
class Access:
    """What of a mirror's data the viewing user may see beyond its lifecycle DAG (which decides whether the
    mirror is shown at all): each part belongs to a DAG, and Airflow's permission on that DAG decides."""

    lag: bool = True  # read `mirror__NAME__lag`: the lag sensor's verdicts
    verify: bool = True  # read `mirror__NAME__verify`: the verification report
    logs: bool = True  # read the task logs of `mirror__NAME`: halt reasons come from run_worker's log


FULL_ACCESS = Access()


def hidden_notes(name: str, access: Access) -> list[str]:
    """One line per part of the page the user's permissions leave out, naming the permission."""
    notes = []
    if not access.lag:
        notes.append(f"lag sensor verdicts not shown: no read access to DAG {lag_dag_id(name)}")
    if not access.verify:
        notes.append(f"verification report not shown: no read access to DAG {verify_dag_id(name)}")
    if not access.logs:
        notes.append(f"halt reasons not shown: no access to the task logs of DAG {lifecycle_dag_id(name)}")
    return notes


@dataclass(frozen=True)
class LagRun:
    """Where the lag DAG is, from Airflow's metadata DB: why a mirror has no verdict yet."""

    paused: bool | None  # None: Airflow has not parsed the lag DAG
    state: str | None = None  # its newest run's state (queued, running, success, failed); None: never ran
    started: float | None = None  # that run's start (epoch seconds)


def no_verdict_why(name: str, run: LagRun | None, window_s: float) -> str:
    """One line saying why the lag sensor has left no verdict, from its DAG's state."""
    dag = lag_dag_id(name)
    if run is None or run.paused is None:
        return f"No verdict yet: Airflow has not parsed the lag DAG {dag}."
    if run.paused:
        return f"No verdict: the lag DAG {dag} is paused, so nothing judges the lag."
    if run.state is None:
        return f"No verdict yet: the lag DAG {dag} has not run yet (it runs on its schedule)."
    if run.state in ("queued", "running"):
        since = "" if run.started is None else " since " + time.strftime("%H:%M:%S UTC", time.gmtime(run.started))
        return (f"No verdict yet: the lag sensor of {dag} is measuring{since}; it gives its verdict once it has "
                f"watched the lag for its window ({window_s / 60:g} min).")
    return (f"No verdict here: the newest run of {dag} ended {run.state} without writing one to the dashboard's "
            f"store (see its task log; the dashboard and the sensor must share MIRROR_DASHBOARD_DB).")


@dataclass
class Edges:
    """The dashboard's I/O, each a plain callable (see sources.py for the real ones)."""

    mirrors: Callable[[], list[MirrorSpec]]
    paused: Callable[[list[str]], dict[str, bool]]  # dag_id -> is_paused; parsed DAGs only
    measure: Callable[[MirrorSpec], list[tuple[PartitionKey, Sample]]]
    worker: Callable[[MirrorSpec], WorkerStatus | None]  # None: the mirror has no metrics port
    halt_reasons: Callable[[MirrorSpec], dict[tuple[str, int], str]]  # (topic, partition) -> reason
    report: Callable[[MirrorSpec], Report | None]
    lag_run: Callable[[str], LagRun | None] = lambda dag_id: None  # lag DAG id -> its state


@dataclass
class MirrorView:
    name: str
    state: str
    state_reason: str
    total_lag: int | None = None
    records_per_s: float | None = None  # committed by the mirror group over the newest throughput step
    rate_interval_s: float | None = None  # the length of that step (the time between its two measurements)
    worker_produced: float | None = None  # the worker's mirror_records_produced counter (since it started)
    worker_retries: float | None = None  # its mirror_delivery_retries counter (since it started)
    partitions: list[dict] = field(default_factory=list)  # the newest sample per partition
    history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # "src/topic/p" -> (time, lag)
    throughput: list[tuple[float, float]] = field(default_factory=list)  # (time, records/s committed)
    halted: list[dict] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)
    stalled: list[dict] = field(default_factory=list)
    not_mirrored: list[dict] = field(default_factory=list)
    cluster_faults: list[str] = field(default_factory=list)  # what the worker sees of the clusters (cluster_faults)
    verdicts: list[Verdict] = field(default_factory=list)
    evaluation: str | None = None
    report: Report | None = None
    notes: list[str] = field(default_factory=list)
    measured_at: float | None = None
    hidden: list[str] = field(default_factory=list)  # what the user's permissions leave out (hidden_notes)
    no_verdict: str | None = None  # why there is no lag verdict (no_verdict_why), when there is none

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k not in ("verdicts", "report")}
        out["verdicts"] = [vars(v) for v in self.verdicts]
        out["report"] = None if self.report is None else vars(self.report)
        return out


# --- pure pieces --------------------------------------------------------------------------------
def position(sample: Sample) -> int:
    """Where the mirror resumes in a partition (as Sample.lag counts it)."""
    return sample.low if sample.committed is None else max(sample.committed, sample.low)


def partition_label(key: PartitionKey) -> str:
    return "/".join(str(part) for part in key)


def throughput_steps(history: Mapping[PartitionKey, Sequence[Sample]]) -> list[tuple[float, float, float]]:
    """(start, end, records/s committed) between consecutive measurements that sampled the same partitions: the
    counters' difference over the real interval between them, however long it was."""
    rounds: dict[float, dict[PartitionKey, int]] = {}
    for key, window in history.items():
        for sample in window:
            rounds.setdefault(round(sample.time, 1), {})[key] = position(sample)
    steps = []
    times = sorted(rounds)
    for before, after in zip(times, times[1:]):
        if rounds[before].keys() == rounds[after].keys() and after > before:
            moved = sum(rounds[after].values()) - sum(rounds[before].values())
            steps.append((before, after, max(0.0, moved / (after - before))))
    return steps


def step_points(steps: Sequence[tuple[float, float, float]]) -> list[tuple[float, float]]:
    """A chart's points for the steps: each rate held over its whole interval, so a rate averaged over minutes
    without a sample is drawn across those minutes, not as a spike at their end."""
    return [point for start, end, rate in steps for point in ((start, rate), (end, rate))]


def judge(history: Mapping[PartitionKey, Sequence[Sample]], spec: MirrorSpec,
          now: float) -> tuple[Evaluation | None, str | None]:
    """The lag rules over the kept history (once it covers the window), else None with why not."""
    windows = merge_windows(history, [], now, spec.window_s)
    if not windows:
        return None, "no lag samples in the window yet"
    if not covers(windows, now, spec.window_s):
        oldest = min(w[0].time for w in windows.values())
        return None, (f"the lag rules need {spec.window_s / 60:g} min of samples; "
                      f"the dashboard has {(now - oldest) / 60:.1f} min")
    # No heartbeats here: replication latency is the lag sensor's to judge (its verdicts are listed).
    return evaluate(windows, {}, now, spec.limits), None


def mirror_state(*, paused: bool | None, worker: WorkerStatus | None, evaluation: Evaluation | None,
                 latest_verdict: Verdict | None, window_s: float, now: float) -> tuple[str, str]:
    """(state, why), the worst first: halted, stalled, paused, lagging, running; unknown without a parsed DAG."""
    if worker is not None and worker.problems:
        parts = []
        if worker.halted:
            parts.append(f"{len(worker.halted)} halted partition(s)")
        if worker.conflicts:
            parts.append(f"{len(worker.conflicts)} topic(s) with schema conflicts")
        if worker.not_mirrored:
            parts.append(f"{len(worker.not_mirrored)} topic(s) not mirrored (destination topic cannot be created)")
        return "halted", "the worker reports " + " and ".join(parts)
    if worker is not None and (worker.stalled or worker.selects_nothing):
        parts = []
        if worker.stalled:
            parts.append(f"{len(worker.stalled)} stalled partition(s): records wait and none is copied")
        if worker.selects_nothing:
            parts.append(f"a topic filter that selects no topic on {', '.join(worker.selects_nothing)}")
        return "stalled", "the worker reports " + " and ".join(parts)
    if paused is None:
        return "unknown", "Airflow has not parsed this mirror's DAG"
    if paused:
        return "paused", "its lifecycle DAG is paused: no worker runs"
    if evaluation is not None and evaluation.status.failing:
        return "lagging", f"lag rules (dashboard history): {evaluation.summary()}"
    if (latest_verdict is not None and now - latest_verdict.time <= window_s
            and latest_verdict.status not in (Status.OK.value, Status.WARN.value)):
        return "lagging", f"lag sensor: {latest_verdict.summary}"
    return "running", "its lifecycle DAG is unpaused"


# --- assembly -----------------------------------------------------------------------------------
class Dashboard:
    """Builds the views; samples a mirror when its newest kept sample is older than `min_interval_s`."""

    def __init__(self, edges: Edges, store: HistoryStore, min_interval_s: float = 10.0,
                 chart_s: float = 3600.0, clock: Callable[[], float] = time.time, sample_threads: int = 8,
                 page_budget_s: float = 1.0, sampler: Sampler | None = None) -> None:
        self.edges = edges
        self.store = store
        self.min_interval_s = min_interval_s
        self.chart_s = chart_s
        self.clock = clock
        # How long the overview waits for lag measurements; the slower ones finish in the background (sampler.py).
        self.page_budget_s = page_budget_s
        self.sample_threads = sample_threads
        self.sampler = sampler or Sampler(lambda spec: edges.measure(spec), store, sample_threads)

    def mirror_names(self) -> list[str]:
        return [m.name for m in self.edges.mirrors()]

    def overview(self, names: set[str] | None = None,
                 access: Callable[[str], Access] = lambda name: FULL_ACCESS) -> list[MirrorView]:
        """Every mirror (of `names`), in the spec's order, each with what `access` lets the user see. Lag look-ups
        and worker look-ups run side by side."""
        specs = [m for m in self.edges.mirrors() if names is None or m.name in names]
        paused = self.edges.paused([lifecycle_dag_id(m.name) for m in specs])
        valid = [spec for spec in specs if spec.config is not None]
        with ThreadPoolExecutor(max(1, min(self.sample_threads, len(valid)))) as pool:
            workers = {spec.name: pool.submit(self.edges.worker, spec) for spec in valid}
            notes = self._sample(valid, self.page_budget_s)
            return [self._view(spec, paused.get(lifecycle_dag_id(spec.name)), detail=False,
                               sample_note=notes.get(spec.name), access=access(spec.name),
                               worker=workers[spec.name].result() if spec.name in workers else None)
                    for spec in specs]

    def mirror(self, name: str, access: Access = FULL_ACCESS) -> MirrorView | None:
        specs = [m for m in self.edges.mirrors() if m.name == name]
        if not specs:
            return None
        dag_id = lifecycle_dag_id(name)
        spec = specs[0]
        note = self._sample([spec], None).get(name) if spec.config is not None else None
        worker = self.edges.worker(spec) if spec.config is not None else None
        return self._view(spec, self.edges.paused([dag_id]).get(dag_id), detail=True, sample_note=note, worker=worker,
                          access=access)

    def _sample(self, specs: list[MirrorSpec], budget_s: float | None) -> dict[str, str]:
        """Measure the mirrors whose newest kept sample is older than `min_interval_s`; a note per mirror whose
        lag is not current (an unreachable cluster is shown, not raised)."""
        newest, now = self.store.newest_sample_times(), self.clock()
        stale = [spec for spec in specs if spec.name not in newest or now - newest[spec.name] >= self.min_interval_s]
        return self.sampler.sample(stale, budget_s) if stale else {}

    def _view(self, spec: MirrorSpec, paused: bool | None, detail: bool, sample_note: str | None,
              worker: WorkerStatus | None, access: Access = FULL_ACCESS) -> MirrorView:
        view = MirrorView(spec.name, "unknown", "", hidden=hidden_notes(spec.name, access))
        if spec.config is None:
            view.state_reason = f"invalid spec entry: {spec.error}"
            return view
        if sample_note:
            view.notes.append(sample_note)
        now = self.clock()
        history = self.store.samples(spec.name, since=now - max(self.chart_s, 2 * spec.window_s))
        # The lag DAG's verdicts neither show nor decide the state for a user who may not read that DAG.
        verdicts = self.store.verdicts(spec.name, limit=10) if access.lag else []
        if worker is None:
            view.notes.append("the mirror sets no metrics-port: halted partitions and schema conflicts "
                              "are not visible here (see the run_worker task log)")
        elif worker.error:
            view.notes.append(f"worker metrics not readable: {worker.error}")
        else:
            view.worker_produced = worker.records_produced
            view.worker_retries = worker.delivery_retries
            view.cluster_faults = cluster_faults(worker)
        evaluation, why_not = judge(history, spec, now)
        view.evaluation = evaluation.summary() if evaluation is not None else why_not
        view.state, view.state_reason = mirror_state(
            paused=paused, worker=worker, evaluation=evaluation, latest_verdict=verdicts[0] if verdicts else None,
            window_s=spec.window_s, now=now)
        if history:
            latest = {key: window[-1] for key, window in history.items()}
            view.measured_at = max(s.time for s in latest.values())
            # Partitions the newest measurement still saw (a deleted topic drops out).
            current = {k: s for k, s in latest.items() if s.time >= view.measured_at - 60}
            view.total_lag = sum(s.lag for s in current.values())
            view.partitions = [{"partition": partition_label(k), "lag": s.lag, "committed": s.committed,
                                "end": s.high, "start": s.low, "time": s.time} for k, s in sorted(current.items())]
        steps = throughput_steps(history)
        if steps:  # the header's rate is the throughput chart's newest step: they never disagree
            view.records_per_s, view.rate_interval_s = steps[-1][2], steps[-1][1] - steps[-1][0]
        if not detail:
            return view
        start = now - self.chart_s
        view.history = {partition_label(k): [(s.time, s.lag) for s in w if s.time >= start]
                        for k, w in sorted(history.items())}
        view.throughput = [p for p in step_points(steps) if p[0] >= start]
        view.verdicts = verdicts
        if access.lag and not verdicts:
            view.no_verdict = no_verdict_why(spec.name, self.edges.lag_run(lag_dag_id(spec.name)), spec.window_s)
        # Reasons are read from run_worker's task log: only for a user Airflow lets read the DAG's task logs.
        with_reasons = access.logs and worker is not None and worker.problems
        reasons = self.edges.halt_reasons(spec) if with_reasons else {}
        unknown = "not in the worker's metrics; see the run_worker task log" if access.logs else "not shown"
        untold = "see the run_worker task log" if access.logs else "not shown"
        view.halted = [{"source": s, "topic": t, "partition": p, "reason": reasons.get((t, p), unknown)}
                       for s, t, p in (worker.halted if worker else ())]
        view.conflicts = [{"source": s, "topic": t} for s, t in (worker.conflicts if worker else ())]
        view.stalled = [{"source": s, "topic": t, "partition": p} for s, t, p in (worker.stalled if worker else ())]
        view.not_mirrored = [{"source": s, "topic": t, "reason": reasons.get((t, -1), untold)}
                             for s, t in (worker.not_mirrored if worker else ())]
        view.report = self.edges.report(spec) if access.verify else None
        return view

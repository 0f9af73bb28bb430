"""The dashboard's I/O edges (gather.Edges): the spec, Airflow's metadata DB, the worker's metrics and
task logs, the verification reports on disk, and the lag sensor's own measuring code."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import requests

from mirror_airflow.dag_ids import lifecycle_dag_id
from mirror_airflow.dashboard.gather import Edges, LagRun, MirrorSpec, Report, WorkerStatus

HALT_MESSAGES = ("partition halted", "schema conflict: topic not mirrored", "topic not mirrored")
LOG_TAIL_BYTES = 2 * 1024 * 1024
# The worker's view of its clusters (mirror_worker/clients/health.py): gauge -> (what, cluster without a source label).
CLUSTER_GAUGES = {
    "mirror_destination_brokers_down": ("down", "destination"),
    "mirror_source_brokers_down": ("down", "source"),
    "mirror_destination_partitions_without_leader": ("leaderless", "destination"),
    "mirror_source_partitions_without_leader": ("leaderless", "source"),
}


def spec_mirrors(path: Path | None = None) -> list[MirrorSpec]:
    """Every enabled mirror of the spec Airflow reads ($KAFKA_MIRROR_SPEC), with its lag settings."""
    from mirror_airflow.dag_factory import spec_path
    from mirror_airflow.lag.dag import LagSettings
    from mirror_airflow.reports import report_dir_default
    from mirror_airflow.settings import parse_settings
    from mirror_worker.api import load_entries

    path = Path(path or spec_path())
    out = []
    for entry in load_entries(path):
        if not entry.enabled:
            continue
        error, lag, report_dir = entry.error, LagSettings(), str(report_dir_default())
        try:
            settings = parse_settings(entry.airflow, f"mirror {entry.name!r}")
            lag = LagSettings.parse(settings.lag, f"mirror {entry.name!r}: airflow.lag")
            report_dir = settings.verify_report_dir or report_dir
        except Exception as exc:  # shown on the page; the DAG file reports the same error
            error = error or str(exc)
        config = entry.config if error is None else None
        out.append(MirrorSpec(entry.name, config, error, lag.limits(), lag.window_minutes * 60,
                              getattr(config, "metrics_port", None), report_dir))
    return out


class SpecMirrors:
    """spec_mirrors of the spec Airflow reads, validated again only when the file changed (path, mtime, size):
    a view asks for the mirrors more than once, and a spec of 100 mirrors takes ~0.3 s to validate."""

    def __init__(self, read: Callable[[Path], list[MirrorSpec]] = spec_mirrors) -> None:
        self.read = read
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._mirrors: list[MirrorSpec] = []

    def __call__(self) -> list[MirrorSpec]:
        from mirror_airflow.dag_factory import spec_path

        path = Path(spec_path())
        try:
            stat = path.stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None  # read (and fail) as before, never cached
        with self._lock:
            if key is not None and key == self._key:
                return list(self._mirrors)
        mirrors = self.read(path)
        with self._lock:
            self._key, self._mirrors = key, mirrors
        return list(mirrors)


def paused_dags(dag_ids: list[str]) -> dict[str, bool]:
    """dag_id -> is_paused from Airflow's metadata DB; DAGs Airflow has not parsed are left out."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    if not dag_ids:
        return {}
    with create_session() as session:
        rows = session.execute(select(DagModel.dag_id, DagModel.is_paused).where(DagModel.dag_id.in_(dag_ids)))
        return {dag_id: bool(paused) for dag_id, paused in rows}


def lag_run(dag_id: str) -> LagRun:
    """The lag DAG's pause state and its newest run (state, start) from Airflow's metadata DB."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        paused = session.scalar(select(DagModel.is_paused).where(DagModel.dag_id == dag_id))
        if paused is None:
            return LagRun(None)
        newest = session.execute(select(DagRun.state, DagRun.start_date).where(DagRun.dag_id == dag_id)
                                 .order_by(DagRun.id.desc()).limit(1)).first()
    if newest is None:
        return LagRun(bool(paused))
    state, started = newest
    return LagRun(bool(paused), str(getattr(state, "value", state)), started.timestamp() if started else None)


def measure(spec: MirrorSpec, timeout: float = 10.0):
    """The lag sensor's measurement (lag_measure.measure_partitions), one sample per partition."""
    from mirror_airflow.lag.measure import measure_partitions

    return measure_partitions(spec.config, timeout)


def parse_metrics(text: str, mirror: str) -> WorkerStatus:
    """Halted partitions, schema conflicts and records produced of `mirror` from Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    halted, conflicts, produced, stalled, not_mirrored, nothing = set(), set(), None, set(), set(), set()
    clusters: dict[str, dict[str, int]] = {"down": {}, "leaderless": {}}
    retries = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("mirror") != mirror:
                continue
            if sample.name == "mirror_partition_halted" and sample.value >= 1:
                halted.add((labels["source"], labels["topic"], int(labels["partition"])))
            elif sample.name == "mirror_partition_stalled" and sample.value >= 1:
                stalled.add((labels["source"], labels["topic"], int(labels["partition"])))
            elif sample.name == "mirror_schema_conflict" and sample.value >= 1:
                conflicts.add((labels["source"], labels["topic"]))
            elif sample.name == "mirror_topic_not_mirrored" and sample.value >= 1:
                not_mirrored.add((labels["source"], labels["topic"]))
            elif sample.name == "mirror_selects_no_topic" and sample.value >= 1:
                nothing.add(labels["source"])
            elif sample.name == "mirror_records_produced_total":
                produced = (produced or 0.0) + sample.value
            elif sample.name in CLUSTER_GAUGES and sample.value >= 1:
                kind, side = CLUSTER_GAUGES[sample.name]
                clusters[kind][labels.get("source", side)] = int(sample.value)
            elif sample.name == "mirror_delivery_retries_total":
                retries = (retries or 0.0) + sample.value
    return WorkerStatus(tuple(sorted(halted)), tuple(sorted(conflicts)), produced, stalled=tuple(sorted(stalled)),
                        not_mirrored=tuple(sorted(not_mirrored)), selects_nothing=tuple(sorted(nothing)),
                        brokers_down=tuple(sorted(clusters["down"].items())),
                        partitions_without_leader=tuple(sorted(clusters["leaderless"].items())),
                        delivery_retries=retries)


def worker_status(spec: MirrorSpec, host: str = "127.0.0.1", timeout: float = 3.0) -> WorkerStatus | None:
    """The worker's Prometheus endpoint (it listens on 127.0.0.1: same host as the api-server only)."""
    if not spec.metrics_port:
        return None
    url = f"http://{host}:{spec.metrics_port}/metrics"
    try:
        response = requests.get(url, timeout=timeout)
        response.raise_for_status()
    except requests.RequestException as exc:
        return WorkerStatus(error=f"{url}: {exc.__class__.__name__} (is the worker running?)")
    return parse_metrics(response.text, spec.name)


def worker_log_files(logs_dir: Path, dag_id: str, limit: int = 3) -> list[Path]:
    """The newest run_worker task logs of a lifecycle DAG (Airflow's default log layout)."""
    root = logs_dir / f"dag_id={dag_id}"
    if not root.is_dir():
        return []
    files = [p for p in root.glob("run_id=*/task_id=run_worker/**/attempt=*.log") if p.is_file()]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)[:limit]


def halt_lines(text: str) -> dict[tuple[str, int], str]:
    """(topic, partition) -> reason from the worker's JSON log lines relayed into a task log."""
    reasons: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        if not any(m in line for m in HALT_MESSAGES):
            continue
        try:  # Airflow writes task logs as JSON lines ({"event": "worker: {...}"}), or as plain text
            line = json.loads(line).get("event", line)
        except (ValueError, AttributeError):
            pass
        start = line.find("{")
        try:
            entry = json.loads(line[start:]) if start >= 0 else None
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("msg") not in HALT_MESSAGES:
            continue
        reason = entry.get("reason") or entry.get("error") or "?"
        if "partition" in entry:
            reasons[(entry.get("topic"), int(entry["partition"]))] = reason
        else:
            reasons.setdefault((entry.get("topic"), -1), reason)
    return reasons


def halt_reasons(spec: MirrorSpec, logs_dir: Path | None = None) -> dict[tuple[str, int], str]:
    logs_dir = logs_dir or Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "logs"
    reasons: dict[tuple[str, int], str] = {}
    for file in reversed(worker_log_files(logs_dir, lifecycle_dag_id(spec.name))):  # newest wins
        with open(file, "rb") as handle:
            handle.seek(max(0, file.stat().st_size - LOG_TAIL_BYTES))
            reasons.update(halt_lines(handle.read().decode("utf-8", "replace")))
    # A topic-wide schema conflict explains each of its halted partitions; a topic not mirrored at all (its
    # destination topic cannot be created) keeps its reason under partition -1.
    for (topic, partition), reason in list(reasons.items()):
        if partition == -1 and any(k[0] == topic and k[1] != -1 for k in reasons):
            reasons.pop((topic, partition))
    return reasons


def latest_report(spec: MirrorSpec) -> Report | None:
    """The newest `check-*.json` (and its HTML) under <report dir>/<mirror>/ (ConsistencyCheckOperator)."""
    folder = Path(spec.report_dir) / spec.name
    reports = sorted(folder.glob("check-*.json")) if folder.is_dir() else []
    for path in reversed(reports):  # the names sort by time; a half-written one is skipped
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        html = path.with_suffix(".html")
        return Report(str(path), str(html) if html.is_file() else None, str(data.get("status", "?")),
                      dict(data.get("totals") or {}), path.stat().st_mtime)
    return None


def real_edges() -> Edges:
    return Edges(mirrors=SpecMirrors(), paused=paused_dags, measure=measure, worker=worker_status,
                 halt_reasons=halt_reasons, report=latest_report, lag_run=lag_run)

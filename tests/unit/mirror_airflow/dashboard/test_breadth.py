"""The overview at breadth (issue #42, "Breadth in Airflow"): with many mirrors, the page does not look each one
up after the other. Lag measurements run on a bounded pool of threads; one slower than the page's budget goes on
in the background and shows on the next view (never measured twice at once); the worker look-ups run side by side.
Fake edges, no servers; nothing here asserts a duration (bench/airflow_breadth.py measures them)."""

from __future__ import annotations

import threading

from mirror_airflow.dashboard.gather import Dashboard, WorkerStatus
from mirror_airflow.dashboard.store import HistoryStore

from tests.unit.mirror_airflow.dashboard.test_gather import Clock, FakeEdges, spec


class MeasuredAtOnce:
    """Wraps a measure edge: counts calls per mirror and the most calls in flight at once; `gate(name)` may block."""

    def __init__(self, inner, gate=lambda name: None) -> None:
        self.inner, self.gate = inner, gate
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.calls: dict[str, int] = {}

    def __call__(self, mirror):
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.calls[mirror.name] = self.calls.get(mirror.name, 0) + 1
        try:
            self.gate(mirror.name)
            return self.inner(mirror)
        finally:
            with self.lock:
                self.in_flight -= 1


def board_of(tmp_path, fake: FakeEdges, measure, clock: Clock, **kwargs) -> Dashboard:
    edges = fake.edges(clock)
    edges.measure = measure
    return Dashboard(edges, HistoryStore(tmp_path / "h.sqlite", clock=clock), clock=clock, **kwargs)


def test_the_overview_measures_mirrors_side_by_side(tmp_path):
    clock = Clock()
    names = [f"m{i}" for i in range(6)]
    fake = FakeEdges([spec(n) for n in names], paused={f"mirror__{n}": False for n in names})
    barrier = threading.Barrier(3, timeout=5)  # passes only while three mirrors are measured at once
    board = board_of(tmp_path, fake, MeasuredAtOnce(fake.measure, gate=lambda name: barrier.wait()), clock)
    views = board.overview()
    assert [v.total_lag for v in views] == [0] * 6, [v.notes for v in views]
    assert [v.name for v in views] == names  # in the spec's order, however the look-ups finished


def test_at_most_sample_threads_measurements_run_at_once(tmp_path):
    clock = Clock()
    names = [f"m{i}" for i in range(8)]
    fake = FakeEdges([spec(n) for n in names])
    wait = threading.Event()
    measure = MeasuredAtOnce(fake.measure, gate=lambda name: wait.wait(0.05))
    board = board_of(tmp_path, fake, measure, clock, sample_threads=2)
    assert all(v.total_lag == 0 for v in board.overview())
    assert measure.most == 2 and sum(measure.calls.values()) == 8


def test_a_measurement_slower_than_the_page_goes_on_and_shows_on_the_next_view(tmp_path):
    clock = Clock()
    fake = FakeEdges([spec("fast"), spec("slow")], paused={"mirror__fast": False, "mirror__slow": False})
    release = threading.Event()
    measure = MeasuredAtOnce(fake.measure, gate=lambda name: name == "slow" and release.wait(3))
    board = board_of(tmp_path, fake, measure, clock, page_budget_s=0.2)
    views = {v.name: v for v in board.overview()}
    assert views["fast"].total_lag == 0
    assert views["slow"].total_lag is None
    assert any("still being measured" in note for note in views["slow"].notes), views["slow"].notes
    # Viewed again while it is still measured: not measured a second time.
    assert board.overview()[1].total_lag is None
    release.set()
    assert board.sampler.wait_idle(5)
    views = {v.name: v for v in board.overview()}
    assert views["slow"].total_lag == 0 and views["slow"].notes == ["the mirror sets no metrics-port: halted "
                                                                    "partitions and schema conflicts are not visible "
                                                                    "here (see the run_worker task log)"]
    assert measure.calls == {"fast": 1, "slow": 1}


def test_a_failed_measurement_in_the_background_is_shown_on_the_next_view(tmp_path):
    clock = Clock()
    fake = FakeEdges([spec("orders")])
    release = threading.Event()

    def gate(name):
        release.wait(3)
        raise RuntimeError("source unreachable")

    board = board_of(tmp_path, fake, MeasuredAtOnce(fake.measure, gate=gate), clock, page_budget_s=0.1)
    assert any("still being measured" in n for n in board.overview()[0].notes)
    release.set()
    assert board.sampler.wait_idle(5)
    assert any("lag not measured now: source unreachable" in n for n in board.overview()[0].notes)


def test_the_overview_reads_the_workers_side_by_side(tmp_path):
    clock = Clock()
    names = [f"w{i}" for i in range(4)]
    fake = FakeEdges([spec(n, metrics_port=9400 + i) for i, n in enumerate(names)])
    barrier = threading.Barrier(4, timeout=5)

    def worker(mirror):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return WorkerStatus(error="read one after the other")
        return WorkerStatus(records_produced=1)

    board = board_of(tmp_path, fake, fake.measure, clock)
    board.edges.worker = worker
    assert [v.worker_produced for v in board.overview()] == [1] * 4


def test_the_real_edges_validate_the_spec_again_only_when_the_file_changed(tmp_path, monkeypatch):
    import json
    import os

    from mirror_airflow.dashboard.sources import real_edges

    import mirror_worker.api

    path = tmp_path / "mirrors.yaml"

    def write(names):
        path.write_text(json.dumps({"groups": [{
            "name": "g", "source": {"name": "east", "kafka": {"bootstrap.servers": "127.0.0.1:1"}},
            "destination": {"kafka": {"bootstrap.servers": "127.0.0.1:2"}},
            "mirrors": [{"name": n, "whitelist": n} for n in names]}]}))

    write(["a", "b"])
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
    reads = []
    load_entries = mirror_worker.api.load_entries
    monkeypatch.setattr(mirror_worker.api, "load_entries", lambda p: reads.append(p) or load_entries(p))
    edges = real_edges()
    assert [m.name for m in edges.mirrors()] == ["a", "b"]
    assert [m.name for m in edges.mirrors()] == ["a", "b"]
    assert len(reads) == 1  # the overview asks twice per view; a spec of 100 mirrors takes ~0.3 s to validate
    write(["a", "b", "c"])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert [m.name for m in edges.mirrors()] == ["a", "b", "c"]
    assert len(reads) == 2

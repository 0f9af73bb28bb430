"""Paging under broker faults: the lag DAG (run by `dag.test()`, as in test_lag_sensor.py) over a worker that
mirrors a steady stream on the three-node clusters behind Toxiproxy. A destination cut of a few seconds inside
the lag window does not page on-call; one that stalls the mirror for longer than the window does, naming the
stall, and the next run after the mirror caught up passes.

The fault is on the worker's path to the destination (its proxies); the sensor measures both clusters over a
path of its own (their direct listeners), as a monitor beside the clusters would.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from devstack.toxics import proxies
from mirror_airflow.dashboard.store import HistoryStore
from tests.integration.test_broker_faults import clusters  # noqa: F401  (fixture)
from tests.integration.test_lag_sensor import LAG, _window_variable, _write_mirror, receiver  # noqa: F401
from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic
from tests.worker_util import WorkerProcess, write_mirror_spec

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PARTITIONS = 2
RATE = 200


def _ends(bootstrap: str, topic: str) -> int | None:
    """The topic's high watermarks summed (None: a partition did not answer)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    try:
        return sum(f.result(10).offset for f in admin.list_offsets(requests, request_timeout=5).values())
    except Exception:
        return None


def _mirror(clusters, tmp_path, topic_name, receiver):
    """A steady stream, a worker mirroring it through the proxies, and the lag DAG watching past them."""
    name = f"lag-fault-{uuid.uuid4().hex[:8]}"
    topic = topic_name("lagfault")
    src, dst = clusters["source"], clusters["destination"]
    create_topic(src.bootstrap_servers, topic, PARTITIONS, replication_factor=3)
    worker_spec = write_mirror_spec(tmp_path / "worker.yaml", None, name, topic, prefix="lag.",
                                    source=src.bootstrap_servers, destination=dst.bootstrap_servers)
    _spec, dag = _write_mirror(tmp_path, None, name, topic, {"webhook-url": f"{receiver.url}/hook"},
                               source=src.direct_bootstrap_servers, destination=dst.direct_bootstrap_servers)
    live = LiveProducer(src.direct_bootstrap_servers, topic, total=10**9, rate=RATE)  # until stop()
    worker = WorkerProcess(["--config", str(worker_spec), "--mirror", name], tmp_path, name)
    return name, f"lag.{topic}", live, worker, dag


def _cut(clusters, seconds: float) -> None:
    for proxy in proxies(clusters["destination"]):
        proxy.cut()
    time.sleep(seconds)
    for proxy in proxies(clusters["destination"]):
        proxy.restore()


def _wait_growing(bootstrap: str, topic: str, worker: WorkerProcess, timeout: float = 90.0) -> None:
    """Until the mirrored topic grows between two looks a second apart (the worker mirrors)."""
    deadline = time.monotonic() + timeout
    before = _ends(bootstrap, topic)
    while True:
        assert worker.proc.poll() is None, worker.stderr[-1500:]
        assert time.monotonic() < deadline, f"{topic} not growing within {timeout:.0f}s"
        time.sleep(1)
        now = _ends(bootstrap, topic)
        if before is not None and now is not None and now > before:
            return
        before = now


def test_destination_cut_of_seconds_does_not_page(clusters, tmp_path, topic_name, airflow_db, receiver):
    """Every destination proxy cut for 8 s in the middle of the 30 s lag window: the mirror stalls and catches
    up, the DAG passes and posts nothing."""
    name, remote, live, worker, dag = _mirror(clusters, tmp_path, topic_name, receiver)
    dst = clusters["destination"].direct_bootstrap_servers
    stalled: list[tuple[int | None, int | None]] = []

    def fault() -> None:
        # Relative to the sensor's first sample (dag.test() took 17 s to take it on the loaded machine): the 30 s
        # window it fills then spans the cut.
        store, deadline = HistoryStore(), time.monotonic() + 120
        while store.newest_sample_time(name) is None:
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)
        time.sleep(5)
        cut_at[0] = time.time()
        for proxy in proxies(clusters["destination"]):
            proxy.cut()
        time.sleep(1)
        first = _ends(dst, remote)
        time.sleep(6)
        stalled.append((first, _ends(dst, remote)))  # equal: nothing reached the destination meanwhile
        time.sleep(1)
        for proxy in proxies(clusters["destination"]):
            proxy.restore()
        cut_at[1] = time.time()

    cut_at = [0.0, 0.0]
    injector = threading.Thread(target=fault, daemon=True)
    try:
        live.start()
        worker.wait_started(90)
        _wait_growing(dst, remote, worker)
        injector.start()
        run = dag.test()
        injector.join(30)
        assert worker.proc.poll() is None, worker.stderr[-1500:]
    finally:
        injector.join(60)
        for proxy in proxies(clusters["destination"]):
            proxy.restore()
        live.stop()
        assert worker.terminate() == 0, worker.stderr[-1500:]
    times = [s[3] for s in _window_variable(name)["samples"]]
    print(f"\nshort cut {cut_at[1] - cut_at[0]:.1f}s, window {min(times) - cut_at[0]:.1f}..{max(times) - cut_at[0]:.1f}s "
          f"from the cut, destination during the cut {stalled}")
    assert stalled and stalled[0][0] is not None and stalled[0][0] == stalled[0][1], \
        f"the mirror did not stall during the cut: {stalled}"
    assert min(times) < cut_at[0] and max(times) > cut_at[1], "the lag window did not span the fault"
    assert run.state == "success"
    assert receiver.posts == []


def test_destination_cut_past_the_lag_window_pages_and_the_next_run_passes(clusters, tmp_path, topic_name,
                                                                           airflow_db, receiver):
    """Every destination proxy cut for the whole 30 s window (and the time to judge it): the DAG fails and the
    webhook pages, naming the stalled offsets. After the restore the worker catches up by itself and the next
    run passes without a page."""
    name, remote, live, worker, dag = _mirror(clusters, tmp_path, topic_name, receiver)
    dst = clusters["destination"].direct_bootstrap_servers
    cut = False
    try:
        live.start()
        worker.wait_started(90)
        _wait_growing(dst, remote, worker)
        for proxy in proxies(clusters["destination"]):
            proxy.cut()
        cut, cut_at = True, time.monotonic()
        time.sleep(3)  # a commit in flight lands
        stalled = dag.test()
        paged_after = time.monotonic() - cut_at
        for proxy in proxies(clusters["destination"]):
            proxy.restore()
        cut = False
        assert worker.proc.poll() is None, worker.stderr[-1500:]
        _wait_growing(dst, remote, worker)
        time.sleep(8)  # a commit after the catch-up (the worker commits every 5 s)
        recovered = dag.test()
        assert worker.proc.poll() is None, worker.stderr[-1500:]
    finally:
        if cut:
            for proxy in proxies(clusters["destination"]):
                proxy.restore()
        live.stop()
        assert worker.terminate() == 0, worker.stderr[-1500:]
    [(path, hook, _at)] = receiver.posts
    print(f"\nlong cut paged {paged_after:.1f}s after the cut: {hook['status']}: {hook['detail']}")
    assert stalled.state == "failed" and path.startswith("/hook")
    assert hook["mirror"] == name and hook["status"] in ("STALL", "STOP")
    assert "no commit for" in hook["detail"] or "committed offset stayed" in hook["detail"], hook["detail"]
    assert recovered.state == "success"

"""The source unreachable for minutes (a WAN link drop between the worker and the source), on the three-node
clusters behind Toxiproxy (see test_broker_faults.py for the pattern).

Chosen behaviour: the worker keeps running and keeps retrying (nothing to deliver, nothing committed past what
the destination acknowledged), says so while it lasts (a `source unreachable` warning naming the source, at
most one a minute, and `mirror_errors{kind="source_unreachable"}`), and resumes by itself when the link is back.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from devstack.toxics import proxies
from tests.integration.test_broker_faults import (
    PARTITIONS, Watch, _assert_running, _converged, _wait_for_total, clusters,  # noqa: F401  (fixture)
)
from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic
from tests.worker_util import WorkerProcess, loss_and_duplicates, read_topic, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.faults]

RATE = 300
# Longer than every timeout the worker's consumer meets with its defaults (client_config.py keeps librdkafka's):
# session.timeout.ms 45 s (the coordinator evicts the member: a rebalance when it is back), socket.timeout.ms 60 s
# (requests swallowed by the black hole time out, twice over), the 10 s metadata refresh (many times over).
# max.poll.interval.ms (300 s) is not crossed: the worker's loop keeps polling.
OUTAGE_S = 120.0


def _logged_at(entry: dict) -> float:
    return datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def test_source_unreachable_for_two_minutes(clusters, tmp_path, topic_name, record_property):
    """Every source proxy black-holed (connections stay open, nothing passes, new ones are swallowed too: a WAN
    link that drops packets) for 2 minutes while an at-least-once worker mirrors a stream produced straight to
    the brokers (past the proxies, so it goes on during the outage). The worker never exits, says the source is
    unreachable while it is, and afterwards mirrors every record, in order per partition."""
    topic = topic_name("src-outage")
    src, dst = clusters["source"], clusters["destination"]
    create_topic(src.bootstrap_servers, topic, PARTITIONS, replication_factor=3)
    live = LiveProducer(src.direct_bootstrap_servers, topic, total=10**9, rate=RATE)  # until stop()
    # The worker's own consumer defaults (no session or poll timeouts set here): what production runs.
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src.bootstrap_servers, "group.id": f"g-{topic}"})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst.bootstrap_servers})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--name", topic, "--preserve.partitions", "--offset.commit.interval.ms", "1000"],
                           tmp_path, "source-outage")
    watch = Watch(clusters, topic, worker)
    cut = False
    try:
        live.start()
        worker.wait_started(90)
        watch.start()
        _wait_for_total(watch, 3 * RATE)
        fault_at, cut_wall = time.monotonic(), time.time()
        for proxy in proxies(src):
            proxy.black_hole()
        cut = True
        while time.monotonic() < fault_at + OUTAGE_S:
            _assert_running(worker, watch, fault_at)
            time.sleep(1)
        for proxy in proxies(src):
            proxy.restore()
        cut = False
        restored_at, restored_wall = time.monotonic(), time.time()
        time.sleep(10)  # records produced after the link is back too (the catch-up figure includes these 10 s)
        live.stop()
        live.finish()
        source = read_topic(src.direct_bootstrap_servers, topic, timeout=60)
        mirrored = _converged(source, dst.bootstrap_servers, topic, worker, watch, fault_at, timeout=240)
        converged_s = time.monotonic() - restored_at
        time.sleep(2)  # anything sent twice still in flight shows up now
        mirrored = read_topic(dst.bootstrap_servers, topic, timeout=60)
        _assert_running(worker, watch, fault_at)
        logs = worker.logs()
        status = worker.terminate()
    finally:
        if cut:
            for proxy in proxies(src):
                proxy.restore()
        live.stop()
        watch.stop()
        worker.stop_quietly()
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    during = [e for e in logs if e.get("level") in ("warning", "error") and cut_wall <= _logged_at(e) <= restored_wall]
    said = [e for e in during if e.get("source") == "source" and "unreachable" in e["msg"]]
    produced_during = sum(1 for m in source if cut_wall * 1000 <= m.timestamp()[1] <= restored_wall * 1000)
    stall = watch.stall_after(fault_at)
    back = [e for e in logs if e["msg"] == "source reachable again" and e.get("source") == "source"]
    figures = {"outage_s": round(restored_at - fault_at, 1), "converged_after_restore_s": round(converged_s, 1),
               "flowing_again_after_restore_s": stall and round(stall[1] - (restored_at - fault_at), 1),
               "records": len(source), "produced_during_outage": produced_during, "duplicates": duplicates,
               "destination_stall_s": stall and f"{stall[0]}-{stall[1]}", "warnings_during": len(during),
               "source_unreachable_lines": len(said), "exit_status": status}
    for name, value in figures.items():
        record_property(name, value)
    print(f"\nsource outage: {figures}\nwarnings during the outage: {[(e['msg'], e.get('error')) for e in during][:20]}")
    assert status == 0, worker.stderr[-1500:]
    assert (missing, ordered) == ([], True)
    assert produced_during > 0
    assert said, f"nothing logged naming the unreachable source during the {OUTAGE_S:.0f}s outage; warnings: " \
                 f"{[(e['msg'], e.get('error')) for e in during][:10]}"
    assert len(said) <= OUTAGE_S / 60 + 2, "the outage warning is not rate-limited"
    assert back, "no `source reachable again` after the outage"

"""On the real stack: an exactly-once worker that caught up a backlog goes back to committing every interval
at an ordinary rate (engine/cadence.py Backlog), and what it mirrored is whole.

The defect: "behind" was "a batch came full since the last cycle". The loop consumes nothing during a
cycle, so the first batch after a cycle comes full whenever the cycle lasted longer than a batch takes to
arrive, and a cycle counted as behind spaced the next one at ten times its duration: after a backlog most
cycles at 500 msgs/s were still spaced for catch-up here (36 of 53), records waiting for them. Counted,
not timed: the worker's mirror_transaction_cycles_total by spacing while a steady live rate arrives."""

from __future__ import annotations

import re
import urllib.request

import pytest

from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, loss_and_duplicates, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration

PARTITIONS = 3
BACKLOG = 2_000
LIVE, RATE = 3_000, 500  # six seconds; batches of 10 fill in 20 ms


def _cycles(url: str) -> tuple[dict[str, float], dict[str, float]]:
    """One scrape: mirror_transaction_cycles_total by spacing, and mirror_transaction_cycle_seconds' count,
    sum and +Inf bucket."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    counted = {spacing: float(value) for spacing, value in
               re.findall(r'^mirror_transaction_cycles_total\{[^}]*spacing="(\w+)"[^}]*\} (\S+)$', text, re.M)}
    timed = {name: float(value) for name, value in re.findall(
        r'^mirror_transaction_cycle_seconds_(count|sum)\{[^}]*\} (\S+)$', text, re.M)}
    inf = re.search(r'^mirror_transaction_cycle_seconds_bucket\{[^}]*le="\+Inf"[^}]*\} (\S+)$', text, re.M)
    timed["inf"] = float(inf.group(1)) if inf else 0.0
    return counted, timed


def test_after_a_backlog_cycles_go_back_to_the_interval_at_an_ordinary_rate(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-cadence")
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"backlog-{i}".encode(), "partition": i % PARTITIONS}
                         for i in range(BACKLOG)])
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    destination = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    # queue.size 40: batches of 10, so that an ordinary rate fills one within a cycle or two.
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", destination, "--whitelist", topic,
                            "--preserve.partitions", "--exactly.once", "--queue.size", "40",
                            "--metrics.port", "0"], tmp_path)
    try:
        worker.wait_started()
        url = worker.wait_for_log("metrics endpoint")["url"]
        wait_for_count(dst, topic, BACKLOG, timeout=120)
        after_backlog, _ = _cycles(url)
        live = LiveProducer(src, topic, total=LIVE, rate=RATE, tag="live")
        live.start()
        live.finish()
        during_live, durations = _cycles(url)
        wait_for_count(dst, topic, BACKLOG + LIVE, timeout=120)
        assert worker.proc.poll() is None, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    # The backlog was caught up with catch-up spacing (every batch came full, or the producers were full).
    assert after_backlog.get("catch_up", 0) >= 1, after_backlog
    interval = during_live.get("interval", 0) - after_backlog.get("interval", 0)
    catch_up = during_live.get("catch_up", 0) - after_backlog.get("catch_up", 0)
    # At ~500 msgs/s the worker is not behind: nearly every cycle keeps the interval (30 ms: ~200 in 6 s).
    # Before the fix most were spaced for catch-up (17 interval, 36 catch-up). On a loaded machine (a full make
    # test) cycles take longer, so fewer fit in the 6 s, and a worker does fall behind now and then: 29 interval
    # and 8 catch-up at load 20, 18 and 3 in a CI run. The ratio tells the defect; the floor only makes it mean
    # something.
    assert interval >= 10 and interval >= 2 * catch_up, (after_backlog, during_live)
    # Each counted cycle is timed (observed just before it is counted: a scrape in between finds one more).
    cycles = sum(during_live.values())
    assert cycles <= durations.get("count", 0) <= cycles + 1 and durations["inf"] == durations.get("count"), (
        during_live, durations)
    assert 0 < durations["sum"] < durations["count"] * 5.0, durations
    committed = read_topic(dst, topic, timeout=60, isolation="read_committed")
    missing, duplicates, ordered = loss_and_duplicates(read_topic(src, topic, timeout=30), committed)
    assert (len(missing), duplicates, ordered) == (0, 0, True)

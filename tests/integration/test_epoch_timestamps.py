"""Issue 43 defect 9: records stamped at the epoch (CreateTime 0) keep their place in time when mirrored.

librdkafka reads a produce timestamp of 0 as "now", so the worker used to restamp such records with the time
they were copied: retention and `offsetsForTimes` then saw them decades later than the source does. They now
go out 1 ms after the epoch (the nearest librdkafka can write), counted in `mirror_records_restamped` and
logged once per partition.
"""

from __future__ import annotations

import time

import pytest

from tests.kafka_util import create_topic, produce_at
from tests.worker_util import WorkerProcess, scrape_metric, wait_for_count, write_properties

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("delivery", [[], ["--exactly.once"]], ids=["at-least-once", "exactly-once"])
def test_records_stamped_at_the_epoch_are_mirrored_at_the_epoch(stack, tmp_path, topic_name, delivery):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("epoch")
    # Kept whatever their time (config sync copies it): a record stamped at the epoch is past any time retention at
    # once, on the source as on the destination, and the test stack checks retention every 5 s.
    create_topic(src, topic, partitions=1, config={"retention.ms": "-1"})
    now_ms = int(time.time() * 1000)
    produce_at(src, topic, 0, [("first", 0), ("second", now_ms), ("third", 0)])
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--prefix", "dc.", "--offset.commit.interval.ms", "500", "--metrics.port", "0", *delivery],
                           tmp_path)
    try:
        worker.wait_started()
        url = worker.wait_for_log("metrics endpoint")["url"]
        mirrored = wait_for_count(dst, f"dc.{topic}", 3, timeout=60)
        assert [(m.value(), m.timestamp()[1]) for m in mirrored] == [
            (b"first", 1), (b"second", now_ms), (b"third", 1)]
        restamped = scrape_metric(url, "mirror_records_restamped_total", topic=topic)
        # Counted as produced: exactly-once sends a record again after an aborted transaction, and counts it again.
        assert restamped == 2 if not delivery else restamped >= 2
        logged = [e for e in worker.logs() if e.get("msg", "").startswith("record stamped at the epoch")]
        assert [(e["topic"], e["partition"], e["offset"]) for e in logged] == [(topic, 0, 0)]  # once per partition
        assert worker.proc.poll() is None, worker.stderr
    finally:
        worker.stop_quietly()

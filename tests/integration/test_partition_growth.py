"""Issue #17 f: a source topic that gains partitions, mirrored with preserve-partitions.

The records of the new source partitions reach the same-numbered new destination partitions within the
worker's topic-refresh window: no partition halts and nothing is dead-lettered.
"""

from __future__ import annotations

import time

import pytest

from tests.kafka_util import create_topic, grow_partitions, produce
from tests.worker_util import WorkerProcess, by_partition, read_topic, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

REFRESH_S = 2
# Topic refresh, the consumer's metadata refresh (10 s by default) and a rebalance, with room for a busy machine.
WINDOW_S = 60


def _records(tag: str, partitions: range, per_partition: int) -> list[dict]:
    return [{"value": f"{tag}-{p}-{i}".encode(), "partition": p} for p in partitions for i in range(per_partition)]


@pytest.mark.parametrize("dead_letter", [False, True], ids=["halt-on-refusal", "dead-letter-topic"])
def test_new_source_partitions_reach_the_new_destination_partitions(stack, topic_name, tmp_path, dead_letter):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("grow-pp")
    create_topic(src, topic, partitions=2)
    settings = {"preserve-partitions": "true", "topic-refresh-interval-s": REFRESH_S, "commit-interval-s": 1}
    dead = f"{topic}.dead"
    if dead_letter:
        create_topic(dst, dead, partitions=1)
        settings["dead-letter-topic"] = dead
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "grow", topic, prefix="pp.", **settings)
    remote = f"pp.{topic}"
    produce(src, topic, _records("before", range(2), 20))
    worker = WorkerProcess(["--config", str(spec), "--mirror", "grow"], tmp_path)
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, remote, 40, timeout=60)) == 40

        grow_partitions(src, topic, 4)
        produce(src, topic, _records("after", range(2, 4), 20))
        produce(src, topic, _records("later", range(4), 5))

        mirrored = wait_for_count(dst, remote, 40 + 40 + 20, timeout=WINDOW_S)
        time.sleep(1)
        mirrored = read_topic(dst, remote)
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        halted = [(e["msg"], e.get("partition"), e.get("reason")) for e in worker.logs()
                  if e.get("msg") in ("partition halted", "record dead-lettered")]
        assert halted == []
        source = by_partition(read_topic(src, topic))
        destination = by_partition(mirrored)
        assert {p: [m.value() for m in destination[p]] for p in range(4)} == \
               {p: [m.value() for m in source[p]] for p in range(4)}
        if dead_letter:
            assert read_topic(dst, dead) == []
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()

"""On the three-node clusters behind Toxiproxy: the worker's own topics survive a broker (replicated like the
cluster's), and what an operator sees while a destination broker is unreachable (metrics, dashboard)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.test_broker_faults import clusters  # noqa: F401  (fixture)
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _worker(clusters, tmp_path, topic: str, *extra: str) -> WorkerProcess:
    consumer = write_properties(tmp_path / f"{topic}.source.properties", {
        "bootstrap.servers": clusters["source"].bootstrap_servers, "group.id": f"g-{topic}",
        "auto.offset.reset": "earliest",
    })
    producer = write_properties(tmp_path / f"{topic}.destination.properties",
                                {"bootstrap.servers": clusters["destination"].bootstrap_servers})
    return WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                          "--name", topic, "--preserve.partitions", "--offset.commit.interval.ms", "1000", *extra],
                         tmp_path, topic)


def _replicas(bootstrap: str, topics: list[str]) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {t: min(len(p.replicas) for p in metadata.topics[t].partitions.values()) for t in topics}


def test_the_workers_own_topics_get_the_clusters_replication_factor(clusters, tmp_path):
    """Offset syncs, exactly-once positions, heartbeats and the dead-letter topic: replication factor 3 on a
    three-node destination (MirrorMaker 2's default for its internal topics), so one broker's death loses
    none of them."""
    src, dst = clusters["source"].bootstrap_servers, clusters["destination"].bootstrap_servers
    plain, eos = f"rf-{uuid.uuid4().hex[:8]}", f"rf-eos-{uuid.uuid4().hex[:8]}"
    workers = []
    try:
        for topic in (plain, eos):
            create_topic(src, topic, partitions=2, replication_factor=3)
            produce(src, topic, [{"value": f"{topic}-{i}".encode()} for i in range(10)])
        workers = [_worker(clusters, tmp_path, plain, "--dead.letter.topic", f"{plain}.dlq"),
                   _worker(clusters, tmp_path, eos, "--exactly.once")]
        for worker, topic in zip(workers, (plain, eos)):
            worker.wait_started(90)
            deadline = time.monotonic() + 60
            while len(read_topic(dst, topic, idle=1)) < 10:
                assert worker.proc.poll() is None, worker.stderr[-1500:]
                assert time.monotonic() < deadline, f"{topic} not mirrored within 60 s"
        own = [f"{plain}.mirror.offset-syncs", f"{plain}.dlq", "mirror.heartbeats",
               f"{eos}.mirror.offset-syncs", f"{eos}.mirror.eos-positions"]
        assert _replicas(dst, own) == dict.fromkeys(own, 3)
    finally:
        for worker in workers:
            worker.stop_quietly()

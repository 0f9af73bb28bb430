"""On the real stack: DestinationTopics returns new partitions once their leader serves them.

The defect (issue 42): `ensure` returned once the new topics were in the destination's metadata, and metadata
names a leader before that broker serves the partition. At 5,000 partitions on one node the worker's first
records and offset syncs came back "Not leader for partition" for 20-30 s and an exactly-once worker's first
transaction waited on them all. Here 600 partitions are made at once and every one is asked at once, through a
ListOffsets request its leader answers, the moment `ensure` returns."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirror_worker.config.model import TopicCreation
from mirror_worker.topics.admin import DestinationTopics, TopicInfo

pytestmark = pytest.mark.integration

TOPICS, PARTITIONS = 30, 20


def test_every_new_partition_is_served_when_ensure_returns(stack, topic_name):
    dst = stack["destination"].kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": dst})
    prefix = topic_name("served")
    mapping = {f"{prefix}-{i}": TopicInfo(f"src-{i}", PARTITIONS, 1) for i in range(TOPICS)}
    try:
        counts = DestinationTopics(admin, TopicCreation(), True, 30.0).ensure(mapping)
        assert counts == {t: PARTITIONS for t in mapping}
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()
                                      for t in mapping for p in range(PARTITIONS)}, request_timeout=30)
        refused = []
        for tp, future in futures.items():
            try:
                future.result(30)
            except KafkaException as exc:
                refused.append(f"{tp.topic}[{tp.partition}]: {exc.args[0].str()}")
        assert refused == [], f"{len(refused)} of {len(futures)} not served yet, e.g. {refused[:3]}"
    finally:
        for future in admin.delete_topics(list(mapping), operation_timeout=30).values():
            try:
                future.result(60)
            except KafkaException:
                pass

"""Consumer-group look-ups shared by the worker's tools, the Spark catch-up and the Airflow operators."""

from __future__ import annotations

import time

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from mirror_worker.clients import factory

# A young cluster (or one whose coordinator moved) answers these until its group coordinator is ready.
_COORDINATOR_NOT_READY = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                          KafkaError.COORDINATOR_LOAD_IN_PROGRESS}


def describe_group(admin, group: str, timeout: float = 30.0):
    """Describe `group`, waiting up to `timeout` while its coordinator is not ready."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = max(1.0, deadline - time.monotonic())
        try:
            return admin.describe_consumer_groups([group], request_timeout=remaining)[group].result(remaining + 5)
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def group_ids(admin, timeout: float = 30.0) -> list[str]:
    """Every consumer group id the cluster knows, in every state (an idle group is what failover and the
    group offset sync are about), sorted."""
    listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout)
    return sorted(g.group_id for g in listing.valid or [])


def active_members(admin, group: str, timeout: float = 30.0) -> int:
    """Members of `group` that hold it (0 when it is empty, dead or unknown)."""
    description = describe_group(admin, group, timeout)
    if description.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
        return 0
    return len(description.members or [])


def held_partitions(admin, group: str, timeout: float = 30.0) -> set[tuple[str, int]]:
    """The partitions `group`'s members hold once it is stable: a member that joined is not yet copying while
    the group rebalances (its assignment comes with the end of the rebalance)."""
    description = describe_group(admin, group, timeout)
    if description.state != ConsumerGroupState.STABLE:
        return set()
    return {(tp.topic, tp.partition) for member in description.members or []
            for tp in (member.assignment.topic_partitions if member.assignment else [])}


def committed_offsets(consumer, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
    """`consumer.committed(partitions)`, asked again while the group's coordinator is not ready (a young cluster,
    or one whose coordinator moves: a broker restarted), until `timeout` has passed: librdkafka hands that error
    to the caller (a young one-node cluster answered it for several seconds, test_lag_measure.py)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(partitions, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def committed_positions(consumer, partitions: list[TopicPartition], timeout: float) -> dict[tuple[str, int], tuple[int, str]]:
    """The group's committed offset of each partition that has one, with the commit's metadata (the
    source topic's id, as the mirror writes it)."""
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata)
            for tp in committed_offsets(consumer, partitions, timeout) if tp.offset >= 0}


def group_commits(settings: dict, group: str, partitions: list[tuple[str, int]] | None,
                  timeout: float = 30.0) -> list[TopicPartition]:
    """`group`'s commits of `partitions` (None: of every partition of the cluster's topics), an offset below 0
    where it has none, read as the group's own consumer reads them: a consumer of that group id that never
    joins it and never commits. Not AdminClient.list_consumer_group_offsets: that call crashes the process
    (SIGSEGV) when the broker answers "not the coordinator" or "coordinator not available", as a young cluster
    does before its first group commits and any cluster does while the coordinator moves (a broker restart;
    confluent-kafka-python issue 1982, confluent-kafka-javascript issue 374: an admin client has no consumer
    group to hand that error to). A consumer raises that error instead: it is asked again, as in
    `describe_group`, until the coordinator is ready or `timeout` has passed."""
    deadline = time.monotonic() + timeout
    consumer = factory.side_consumer(settings, group)
    try:
        if partitions is None:
            metadata = consumer.list_topics(timeout=timeout)
            partitions = sorted((name, p) for name, topic in metadata.topics.items() if topic.error is None
                                for p in topic.partitions)
        wanted = [TopicPartition(t, p) for t, p in partitions]
        return committed_offsets(consumer, wanted, max(1.0, deadline - time.monotonic())) if wanted else []
    finally:
        consumer.close()

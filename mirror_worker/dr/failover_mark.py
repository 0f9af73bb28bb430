"""A failed-over mirror's mark: once a failover has stopped a mirror, nothing copies from its old source again.

After a failover the destination's topics are the primary copy and consumers commit there; a worker or a
Spark catch-up that copied the old source into them would mix two histories. So the failover's stop
creates the topic `<group>.failed-over` on the destination (the mirror's consumer group id, made a legal
topic name) before it looks for a running catch-up and waits for the mirror's group to empty, and
- a worker checks the mark when its partitions are assigned (a member of the mirror's group by then, so a
  failover marking later waits for it), and exits without copying;
- a catch-up checks it after joining its lease group (engine/catchup_lease.py), and refuses;
- the catch-up's resume never unpauses a marked mirror, nor does its stop start a catch-up.
Each side announces itself before it checks the other: one of the two always sees the other. The mark
stays until a person deletes the topic (to mirror again, e.g. from a new source).
"""

from __future__ import annotations

import re
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from mirror_worker.config.model import TopicCreation
from mirror_worker.exceptions import MirrorError
from mirror_worker.topics.admin import internal_replication_factor

SUFFIX = ".failed-over"


class FailedOver(MirrorError):
    """The mirror was failed over: copying from its source is refused."""


def mark_topic(group: str) -> str:
    legal = re.sub(r"[^A-Za-z0-9._-]", "_", group)
    return legal[:249 - len(SUFFIX)] + SUFFIX


def failed_over(destination_admin, group: str, timeout: float = 30.0) -> bool:
    topic = mark_topic(group)
    metadata = destination_admin.list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is None:
        return metadata is not None
    if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    raise KafkaException(metadata.error)


def refuse_if_failed_over(destination_admin, group: str, what: str, timeout: float = 30.0) -> None:
    if failed_over(destination_admin, group, timeout):
        raise FailedOver(f"mirror group {group!r} was failed over (topic {mark_topic(group)!r} on the destination): "
                         f"{what} refused; delete that topic to mirror from the source again")


def mark_failed_over(destination_admin, group: str, creation: TopicCreation, timeout: float = 30.0) -> None:
    """`creation`: the mirror's topic creation settings (the mark is replicated as the worker's own topics)."""
    topic = mark_topic(group)
    replicas = internal_replication_factor(destination_admin, creation, timeout)
    future = destination_admin.create_topics([NewTopic(topic, 1, replicas)], request_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout
    while not failed_over(destination_admin, group, timeout):  # the others see it in their metadata from now on
        if time.monotonic() > deadline:
            raise MirrorError(f"topic {topic!r} created but not in the destination's metadata after {timeout:.0f} s")
        time.sleep(0.2)


def unmark(destination_admin, group: str, timeout: float = 30.0) -> None:
    """Removes a mark this run set, when its failover stopped nothing (the stop refused)."""
    topic = mark_topic(group)
    try:
        destination_admin.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise

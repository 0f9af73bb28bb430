"""Consumer failover: the destination offsets a source consumer group resumes from (I/O edge).

    python -m mirror_worker translate-offsets --config mirrors.yaml --mirror NAME --group G [--source ALIAS] [--apply]

Reads G's committed offsets on the source cluster and the mirror's offset syncs on the destination, and
translates with `offset_syncs.translate_positions` (the arithmetic and its guarantees are documented
there). Prints one JSON document. `--apply` writes the offsets to group G on the destination, only when
G has no active member there (as MirrorMaker 2's sync.group.offsets): a running consumer would
overwrite them. The command itself lives in commands/translate_offsets.py.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_worker.config import MirrorConfig, SourceCluster
from mirror_worker.exceptions import ConfigError, MirrorError
from mirror_worker.offset_syncs import OffsetSync, PartitionTranslation, translate_positions
from mirror_worker.client_config import connection_settings
from mirror_worker.groups import describe_group
from mirror_worker.topics import topic_ids


class TranslationError(MirrorError):
    """Offsets cannot be read, translated or written (a runtime condition, not bad input)."""


class GroupActiveError(TranslationError):
    """The destination group has members: writing its offsets under them would be lost or harmful."""


def source_cluster(config: MirrorConfig, alias: str | None) -> SourceCluster:
    if not config.preserve_partitions:
        raise ConfigError(
            f"mirror {config.name!r}: offset translation needs preserve-partitions (destination partition = "
            "source partition); with other routings a source partition spreads over several destination partitions"
        )
    if alias is None:
        if len(config.sources) > 1:
            names = ", ".join(s.name for s in config.sources)
            raise ConfigError(f"mirror {config.name!r} has several source clusters: pass --source ({names})")
        return config.sources[0]
    for source in config.sources:
        if source.name == alias:
            return source
    raise ConfigError(f"mirror {config.name!r} has no source cluster {alias!r}")


def _admin(settings: dict) -> AdminClient:
    return AdminClient(connection_settings(settings))


def committed_source_offsets(config: MirrorConfig, source: SourceCluster, group: str,
                             timeout: float = 30.0) -> dict[tuple[str, int], int]:
    """The group's committed positions on the source, for the topics this mirror replicates."""
    admin = _admin(source.consumer)
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    try:
        partitions = future.result(timeout).topic_partitions or []
    except KafkaException as exc:
        raise TranslationError(f"cannot read group {group!r} on source {source.name!r}: {exc.args[0].str()}") from None
    topic_filter = config.topic_filter()
    return {
        (tp.topic, tp.partition): tp.offset for tp in partitions
        if tp.offset >= 0 and tp.error is None and topic_filter.should_replicate(tp.topic)
    }


def source_topic_ids(source: SourceCluster, topics: list[str], timeout: float = 30.0) -> dict[str, str]:
    # A deleted topic has no id: its syncs still translate, nothing to compare them with.
    return topic_ids(_admin(source.consumer), topics, timeout)


def read_offset_syncs(config: MirrorConfig, timeout: float = 30.0) -> list[OffsetSync]:
    """Every sync record of the mirror's offset-syncs topic on the destination, oldest first."""
    topic = config.offset_syncs_topic
    consumer = Consumer({**connection_settings(config.producer), "group.id": f"{config.name}.translate-offsets",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise TranslationError(f"no offset-syncs topic {topic} on the destination: has mirror {config.name!r} "
                                   "run with preserve-partitions?")
        ends = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends] or [])
        syncs, done = [], set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise TranslationError(f"reading {topic} on the destination timed out")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                        continue
                    raise TranslationError(f"reading {topic}: {msg.error().str()}")
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
                sync = OffsetSync.decode(msg.key(), msg.value())
                if sync is not None:
                    syncs.append(sync)
        return syncs
    except KafkaException as exc:
        raise TranslationError(f"cannot read {topic} on the destination: {exc.args[0].str()}") from None
    finally:
        consumer.close()


def translate_group(config: MirrorConfig, group: str, source_alias: str | None = None) -> list[PartitionTranslation]:
    """Every committed partition of `group` (topics this mirror replicates), translated or with a reason."""
    source = source_cluster(config, source_alias)
    committed = committed_source_offsets(config, source, group)
    syncs = read_offset_syncs(config)
    ids = source_topic_ids(source, sorted({t for t, _ in committed}))
    return translate_positions(committed, syncs, source.name, config.naming_policy().remote_topic, ids)


def translate_group_offsets(config: MirrorConfig, group: str, source_alias: str | None = None) -> dict[tuple[str, int], int]:
    """{(destination topic, partition): offset} for every partition of `group` that translates."""
    return translated_offsets(translate_group(config, group, source_alias))


def translated_offsets(translations: list[PartitionTranslation]) -> dict[tuple[str, int], int]:
    return {(t.destination_topic, t.partition): t.result.destination_offset for t in translations if t.result is not None}


def apply_group_offsets(config: MirrorConfig, group: str, offsets: dict[tuple[str, int], int], timeout: float = 30.0) -> None:
    """Write `offsets` to `group` on the destination; refused while the group has active members."""
    admin = _admin(config.producer)
    try:
        description = describe_group(admin, group, timeout)
    except KafkaException as exc:
        raise TranslationError(f"cannot describe group {group!r} on the destination: {exc.args[0].str()}") from None
    if description.members:
        raise GroupActiveError(
            f"destination group {group!r} has {len(description.members)} active member(s): stop its consumers "
            "before applying translated offsets"
        )
    if not offsets:
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
    try:
        result = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[group].result(timeout)
    except KafkaException as exc:
        # A consumer that joined between the describe and the write makes the broker refuse it.
        raise TranslationError(f"cannot write offsets of group {group!r} on the destination: {exc.args[0].str()}") from None
    failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in result.topic_partitions or [] if tp.error]
    if failed:
        raise TranslationError(f"offsets of group {group!r} not written: {'; '.join(failed)}")


def report(config: MirrorConfig, group: str, translations: list[PartitionTranslation], applied: bool) -> dict:
    return {
        "mirror": config.name,
        "group": group,
        "applied": applied,
        "offsets": [
            {"topic": t.destination_topic, "partition": t.partition, "offset": t.result.destination_offset,
             "source_topic": t.source_topic, "source_offset": t.committed,
             "sync": {"source_offset": t.result.sync.source_offset,
                      "destination_offset": t.result.sync.destination_offset}}
            for t in translations if t.result is not None
        ],
        "untranslated": [
            {"source_topic": t.source_topic, "partition": t.partition, "source_offset": t.committed, "reason": t.reason}
            for t in translations if t.result is None
        ],
    }

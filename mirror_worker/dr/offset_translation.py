"""Consumer failover: the destination offsets a source consumer group resumes from (I/O edge).

    python -m mirror_worker translate-offsets --config mirrors.yaml --mirror NAME --group G [--source ALIAS] [--apply]

Reads G's committed offsets on the source cluster and the mirror's offset syncs on the destination,
translates with `offset_syncs.translate_positions`, then reads each destination partition and places
G exactly with the provenance headers it holds (`resume_search`: the method, its guarantees, why the
read starts at the low watermark and the re-read bound are documented there); without headers the
sync's offset stands.
Prints one JSON document. `--apply` writes the offsets to group G on the destination, only when
G has no active member there (as MirrorMaker 2's sync.group.offsets): a running consumer would
overwrite them. The command itself lives in commands/translate_offsets.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import (
    Consumer, ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException, TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from mirror_worker.clients import factory
from mirror_worker.clients.coordinator_admin import IsolatingAdmin
from mirror_worker.clients.groups import describe_group
from mirror_worker.clients.headers import UnreadableHeaders, read_headers
from mirror_worker.config.model import MirrorConfig, SourceCluster
from mirror_worker.dr.failback_translation import failback_resume_point
from mirror_worker.dr.group_rules import moves_back
from mirror_worker.dr.offset_syncs import OffsetSync, PartitionTranslation, translate_positions
from mirror_worker.dr.resume_search import ResumeFinder, ResumePoint, SourcePartition, siblings
from mirror_worker.exceptions import ConfigError, MirrorError
from mirror_worker.policy.provenance import PROVENANCE_HEADER
from mirror_worker.topics.admin import topic_ids


class TranslationError(MirrorError):
    """Offsets cannot be read, translated or written (a runtime condition, not bad input)."""


class MissingPartitionError(TranslationError):
    """A committed partition has no destination partition (not mirrored yet): that partition is untranslated."""


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


def _admin(settings: dict, what: str = "the cluster") -> IsolatingAdmin:
    """Its consumer-group calls run in a child process and read commits through a consumer: the admin
    client's own calls crash or abort the process on a young cluster, a moving coordinator or a dropped
    connection (clients/groups.py group_commits, clients/coordinator_admin.py)."""
    return factory.group_admin_client(settings, what)


def committed_source_offsets(config: MirrorConfig, source: SourceCluster, group: str,
                             timeout: float = 30.0) -> dict[tuple[str, int], int]:
    """The group's committed positions on the source, for the topics this mirror replicates."""
    where = f"source {source.name!r}"
    admin = _admin(source.consumer, where)
    try:
        partitions = mirrored_partitions(admin, config.topic_filter().should_replicate, repr(group), where, timeout)
        return group_offsets(admin, group, where, timeout, partitions) if partitions else {}
    finally:
        admin.close_coordinator_process()


def mirrored_partitions(admin, mirrored, group: str, where: str, timeout: float = 30.0) -> list[tuple[str, int]]:
    """The partitions of the cluster's topics that `mirrored(topic)` selects (one metadata read): a group's
    commits are read for these only, not for every partition of the cluster (clients/groups.group_commits).
    `group` names what was to be read in the error, as group_offsets does."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise TranslationError(f"cannot read group {group} on {where}: {exc.args[0].str()}") from None
    return sorted((name, p) for name, topic in metadata.topics.items() if topic.error is None and mirrored(name)
                  for p in topic.partitions)


def group_offsets(admin, group: str, where: str, timeout: float = 30.0,
                  partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
    """{(topic, partition): committed offset} of `group` through `admin` (only `partitions` when given);
    partitions without a commit are left out."""
    request = ConsumerGroupTopicPartitions(
        group, None if partitions is None else [TopicPartition(t, p) for t, p in partitions])
    future = admin.list_consumer_group_offsets([request], request_timeout=timeout)[group]
    try:
        committed = future.result(timeout).topic_partitions or []
    except KafkaException as exc:
        raise TranslationError(f"cannot read group {group!r} on {where}: {exc.args[0].str()}") from None
    except TimeoutError:  # the future's own wait (concurrent.futures.TimeoutError is the builtin since 3.11)
        raise TranslationError(f"cannot read group {group!r} on {where}: no answer within {timeout:g}s") from None
    return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0 and tp.error is None}


def source_topic_ids(source: SourceCluster, topics: list[str], timeout: float = 30.0) -> dict[str, str]:
    # A deleted topic has no id: its syncs still translate, nothing to compare them with.
    return topic_ids(_admin(source.consumer), topics, timeout)


def read_offset_syncs(config: MirrorConfig, timeout: float = 30.0) -> list[OffsetSync]:
    """Every sync record of the mirror's offset-syncs topic on the destination, oldest first."""
    topic = config.offset_syncs_topic
    consumer = factory.side_consumer(config.producer, f"{config.name}.translate-offsets",
                                     {"enable.partition.eof": True})
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


@dataclass(frozen=True)
class PartitionFailover:
    """One committed partition of the group: its offset-sync translation and, when it translates, where
    the group resumes on the destination (`resume`; None with the `reason`)."""

    sync: PartitionTranslation
    resume: ResumePoint | None
    reason: str = ""


def place(finder: ResumeFinder, source: SourcePartition, translation: PartitionTranslation) -> PartitionFailover:
    sync_offset = translation.result.destination_offset if translation.result else None
    try:
        resume = finder.find(source, translation.destination_topic, translation.committed, sync_offset)
    except MissingPartitionError as exc:
        return PartitionFailover(translation, None, str(exc))
    if resume is None:
        reason = f"{translation.reason or 'offset sync unusable'}, and no provenance header on the destination"
        return PartitionFailover(translation, None, reason)
    return PartitionFailover(translation, resume)


class PartitionReader:
    """resume_search.DestinationReader over a destination cluster: the bounds a read_committed consumer
    sees (records of open or aborted transactions are never counted) and each record's provenance header."""

    def __init__(self, consumer, admin, timeout: float = 30.0, where: str = "the destination") -> None:
        self.consumer = consumer
        self.admin = admin
        self.timeout = timeout
        self.where = where  # the cluster read, as errors name it

    def close(self) -> None:
        self.consumer.close()

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        try:
            low, end = (self.admin.list_offsets({tp: spec}, isolation_level=IsolationLevel.READ_COMMITTED,
                                                request_timeout=self.timeout)[tp].result(self.timeout).offset
                        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))
        except KafkaException as exc:
            if exc.args[0].code() in _MISSING:
                raise MissingPartitionError(f"{topic}[{partition}] does not exist on {self.where}") from None
            raise TranslationError(f"cannot read the offsets of {topic}[{partition}] on {self.where}: "
                                   f"{exc.args[0].str()}") from None
        return low, end

    def records(self, topic: str, partition: int, start: int, end: int):
        if start >= end:
            return
        self.consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                messages = self.consumer.consume(1000, 0.5)
                if not messages and time.monotonic() > deadline:
                    raise TranslationError(f"reading {topic}[{partition}] on {self.where} timed out at "
                                           f"{start}..{end}")
                for msg in messages:
                    if msg.error() is not None:
                        if msg.error().code() == -191:  # _PARTITION_EOF: nothing readable up to `end`
                            return
                        raise TranslationError(f"reading {topic}[{partition}]: {msg.error().str()}")
                    deadline = time.monotonic() + self.timeout  # a timeout without progress only
                    if msg.offset() >= end:
                        return
                    try:
                        provenance = _provenance(read_headers(msg))
                    except UnreadableHeaders:
                        # A header name the client cannot read (clients/headers.py): its provenance cannot
                        # be read either, so it is placed as a record without one (the worker never writes
                        # such a record: it halts at one).
                        provenance = None
                    yield msg.offset(), provenance
                    if msg.offset() + 1 >= end:
                        return
        finally:
            self.consumer.unassign()


_MISSING = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}


def _provenance(headers) -> bytes | None:
    for name, value in headers or ():
        if name == PROVENANCE_HEADER:
            return value
    return None


def committed_reader(settings: dict, admin, group_id: str, timeout: float = 30.0,
                     where: str = "the destination") -> PartitionReader:
    """A PartitionReader of the cluster `settings` connect to: read_committed, no group membership, no commits."""
    consumer = factory.side_consumer(settings, group_id, {
        "enable.partition.eof": True, "isolation.level": "read_committed", "auto.offset.reset": "error"})
    return PartitionReader(consumer, admin, timeout, where)


def destination_finder(config: MirrorConfig, timeout: float = 30.0) -> tuple[ResumeFinder, Consumer]:
    """A ResumeFinder reading the mirror's destination, and its consumer (the caller closes it)."""
    reader = committed_reader(config.producer, _admin(config.producer), f"{config.name}.translate-offsets", timeout)
    return ResumeFinder(reader), reader.consumer


def source_cluster_id(source: SourceCluster, timeout: float = 30.0) -> str:
    try:
        return _admin(source.consumer).list_topics(timeout=timeout).cluster_id or ""
    except KafkaException as exc:
        raise TranslationError(f"cannot reach source {source.name!r}: {exc.args[0].str()}") from None


def other_cluster_ids(config: MirrorConfig, source: SourceCluster, timeout: float = 10.0) -> dict[str, str]:
    """{alias: cluster id} of the mirror's other sources. One that cannot be reached is left out: its copies then
    count as records without a header (never skipped: safe, more may be re-read)."""
    ids = {}
    for other in config.sources:
        if other.name != source.name:
            try:
                ids[other.name] = source_cluster_id(other, timeout)
            except TranslationError:
                pass
    return ids


def translate_group(config: MirrorConfig, group: str, source_alias: str | None = None) -> list[PartitionFailover]:
    """Every committed partition of `group` (topics this mirror replicates), placed or with a reason. Each call
    to a cluster waits at most the mirror's startup-timeout-s (a fixed 30 s before)."""
    timeout = config.startup_timeout_s
    source = source_cluster(config, source_alias)
    committed = committed_source_offsets(config, source, group, timeout)
    if not committed:
        return []  # nothing to place; the mirror's syncs are not read
    syncs = read_offset_syncs(config, timeout)
    ids = source_topic_ids(source, sorted({t for t, _ in committed}), timeout)
    translations = translate_positions(committed, syncs, source.name, config.naming_policy().remote_topic, ids)
    cluster_id = source_cluster_id(source, timeout)
    others = siblings(other_cluster_ids(config, source, min(10.0, timeout)), source.name)
    finder, consumer = destination_finder(config, timeout)
    try:
        if config.reverse_of is not None:
            return failback_placements(config, source, cluster_id, finder.reader, translations, timeout)
        return [place(finder, SourcePartition(source.name, t.source_topic, t.partition, cluster_id, others), t)
                for t in translations]
    finally:
        consumer.close()


def failback_placements(config: MirrorConfig, source: SourceCluster, cluster_id: str, home: PartitionReader,
                        translations: list[PartitionTranslation], timeout: float = 30.0) -> list[PartitionFailover]:
    """A reverse mirror's group moving back to the old source (its destination), placed by both mirrors'
    provenance headers (dr/failback_translation.py): the promoted partition is read too."""
    home_cluster_id = _admin(config.producer).list_topics(timeout=timeout).cluster_id or ""
    promoted = committed_reader(source.consumer, _admin(source.consumer), f"{config.name}.translate-offsets",
                                timeout, where=f"source {source.name!r}")
    try:
        placed = []
        for t in translations:
            sync_offset = t.result.destination_offset if t.result else None
            try:
                p_low, p_end = promoted.bounds(t.source_topic, t.partition)
                low, end = home.bounds(t.destination_topic, t.partition)
            except MissingPartitionError as exc:
                placed.append(PartitionFailover(t, None, str(exc)))
                continue
            resume = failback_resume_point(
                t.committed, promoted.records(t.source_topic, t.partition, p_low, p_end),
                home.records(t.destination_topic, t.partition, low, end), end, home_cluster_id, t.destination_topic,
                SourcePartition(source.name, t.source_topic, t.partition, cluster_id), sync_offset)
            placed.append(PartitionFailover(t, resume, "" if resume else "no provenance header on either cluster"))
        return placed
    finally:
        promoted.close()


def translate_group_offsets(config: MirrorConfig, group: str, source_alias: str | None = None) -> dict[tuple[str, int], int]:
    """{(destination topic, partition): offset} for every partition of `group` that translates."""
    return translated_offsets(translate_group(config, group, source_alias))


def translated_offsets(failovers: list[PartitionFailover]) -> dict[tuple[str, int], int]:
    return {(f.sync.destination_topic, f.sync.partition): f.resume.destination_offset
            for f in failovers if f.resume is not None}


def apply_group_offsets(config: MirrorConfig, group: str, offsets: dict[tuple[str, int], int], timeout: float = 30.0,
                        rewind: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
    """Write `offsets` to `group` on the destination; refused while the group has active members.

    A partition the group already committed past its translation there (it consumed on after an earlier
    failover: the source's commits are frozen since) is left where it is unless `rewind`. Returns those
    partitions, {(topic, partition): (the group's offset there, the translation)}: left, or moved back."""
    admin = _admin(config.producer, "the destination")
    try:
        try:
            description = describe_group(admin, group, timeout)
        except KafkaException as exc:
            raise TranslationError(f"cannot describe group {group!r} on the destination: {exc.args[0].str()}") from None
        if description.members:
            raise GroupActiveError(
                f"destination group {group!r} has {len(description.members)} active member(s): stop its consumers "
                "before applying translated offsets"
            )
        current = group_offsets(admin, group, "the destination", timeout, sorted(offsets)) if offsets else {}
        behind = {key: (current[key], offset) for key, offset in offsets.items()
                  if moves_back(current.get(key), offset)}
        write_group_offsets(admin, group, offsets if rewind else {k: o for k, o in offsets.items() if k not in behind},
                            timeout)
        return behind
    finally:
        admin.close_coordinator_process()


def write_group_offsets(admin, group: str, offsets: dict[tuple[str, int], int], timeout: float = 30.0) -> None:
    """alter_consumer_group_offsets on the destination; the caller made sure the group has no member."""
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


def report(config: MirrorConfig, group: str, failovers: list[PartitionFailover], applied: bool,
           behind: dict[tuple[str, int], tuple[int, int]] | None = None, rewound: bool = False) -> dict:
    """`method`: how the offset was found (resume_search: provenance, provenance-end, offset-sync);
    `may_reread`: at most that many records from `offset` to `end_offset` were already read on the source.
    `behind`: apply_group_offsets's partitions whose translation is behind the group's destination offset,
    listed under `ahead_on_destination` as kept there, or (`rewound`) moved back: the records it reads again."""
    return {
        "mirror": config.name,
        "group": group,
        "applied": applied,
        "offsets": [
            {"topic": f.sync.destination_topic, "partition": f.sync.partition, "offset": f.resume.destination_offset,
             "source_topic": f.sync.source_topic, "source_offset": f.sync.committed, "method": f.resume.method,
             "may_reread": f.resume.may_reread, "end_offset": f.resume.end_offset,
             "last_mirrored_source_offset": f.resume.last_mirrored,
             "sync": None if f.sync.result is None else {"source_offset": f.sync.result.sync.source_offset,
                                                          "destination_offset": f.sync.result.sync.destination_offset}}
            for f in failovers if f.resume is not None
        ],
        "untranslated": [
            {"source_topic": f.sync.source_topic, "partition": f.sync.partition, "source_offset": f.sync.committed,
             "reason": f.reason}
            for f in failovers if f.resume is None
        ],
        "ahead_on_destination": [
            {"topic": topic, "partition": partition, "destination_offset": current, "translation": offset,
             "action": "rewound" if rewound else "kept", "records_read_again": current - offset if rewound else 0}
            for (topic, partition), (current, offset) in sorted((behind or {}).items())
        ],
    }

"""Group offset sync, the admin edge: read the chosen groups' commits on a source cluster, translate them,
write them forward to the destination groups with no member (which groups and offsets: dr/group_rules.py).

The translation is translate-offsets' own (offset_translation.place over resume_search's answer), read
through a resume_index.IncrementalFinder: the worker holds one across its `group-offset-sync-interval-ms`
intervals, so each sync reads only the destination records appended since the last one. The
`sync-group-offsets` command runs one sync (`sync_mirror_group_offsets`).

Between the describe (no member) and the write a consumer may join: the broker then refuses the write
(the group has members), which is reported as a failed write, never forced. The destination's state and
commits are read after the translation, right before the write. Of a mirror's worker processes only one
writes (`SoleWriter`, group_sync.not_writer_reason): Kafka has no compare-and-set of group offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from mirror_worker.clients import factory
from mirror_worker.clients.groups import describe_group, group_ids
from mirror_worker.config.model import MirrorConfig
from mirror_worker.dr.group_rules import (
    GroupFilter, GroupPlan, GroupSyncReport, Translation, Untranslated, blocking_state, failed, not_writer_reason,
    plan_group,
)
from mirror_worker.dr.offset_syncs import OffsetSync, translate_positions
from mirror_worker.dr.offset_translation import (
    PartitionReader, TranslationError, group_offsets, mirrored_partitions, place, read_offset_syncs, source_cluster,
    source_cluster_id, source_topic_ids, write_group_offsets,
)
from mirror_worker.dr.resume_index import IncrementalFinder
from mirror_worker.dr.resume_search import SourcePartition, siblings

log = logging.getLogger("mirror_worker")


class GroupOffsetSync:
    """Syncs one source cluster's chosen groups to the destination. Collaborators:

    `source_admin`/`destination_admin`: AdminClients; `finder`: an IncrementalFinder (or ResumeFinder) over
    the destination; `offset_syncs()`: the mirror's offset syncs (the fallback without headers);
    `topic_ids(topics)`: the source topics' ids; `mirrored(topic)`: the mirror's topic filter;
    `remote_topic`: its naming policy; `siblings`: the mirror's other sources (resume_search.SourcePartition);
    `not_writer()`: why this process must not write now (None: it may; a SoleWriter in the worker, always None
    for the one-shot command).
    """

    def __init__(self, alias: str, cluster_id: str, source_admin, destination_admin, finder, groups: GroupFilter,
                 mirrored: Callable[[str], bool], remote_topic: Callable[[str], str],
                 offset_syncs: Callable[[], list[OffsetSync]], topic_ids: Callable[[list[str]], dict[str, str]],
                 timeout: float = 30.0, siblings: frozenset[tuple[str, str]] = frozenset(),
                 not_writer: Callable[[], str | None] = lambda: None) -> None:
        self.alias = alias
        self.cluster_id = cluster_id
        self.siblings = siblings
        self.source_admin = source_admin
        self.destination_admin = destination_admin
        self.finder = finder
        self.groups = groups
        self.mirrored = mirrored
        self.remote_topic = remote_topic
        self.offset_syncs = offset_syncs
        self.topic_ids = topic_ids
        self.timeout = timeout
        self.not_writer = not_writer

    def sync(self, dry_run: bool = False) -> GroupSyncReport:
        report = GroupSyncReport(self.alias, dry_run)
        try:
            report.not_writer = self.not_writer()
            if report.not_writer is not None:
                return report
            groups = self.source_groups()
            # One metadata read per sync; each group's commits are read for the mirrored partitions only.
            partitions = mirrored_partitions(self.source_admin, self.mirrored, "offsets", f"source {self.alias!r}",
                                             self.timeout)
        except TranslationError as exc:
            report.errors["*"] = str(exc)
            return report
        syncs: list[OffsetSync] | None = None
        for group in groups if partitions else []:
            try:
                committed = group_offsets(self.source_admin, group, f"source {self.alias!r}", self.timeout, partitions)
                if not committed:
                    continue
                if syncs is None:  # read once per sync, and only when a group has something to translate
                    syncs = self.offset_syncs()
                report.groups.append(self.sync_group(group, committed, syncs, dry_run))
            except (TranslationError, KafkaException) as exc:
                report.errors[group] = _error_text(exc)
        return report

    def source_groups(self) -> list[str]:
        """The source's consumer groups the filter selects (every state: an idle group is the point)."""
        try:
            listed = group_ids(self.source_admin, self.timeout)
        except KafkaException as exc:
            raise TranslationError(f"cannot list the groups of source {self.alias!r}: {_error_text(exc)}") from None
        return [group for group in listed if self.groups.selects(group)]

    def sync_group(self, group: str, committed: dict[tuple[str, int], int], syncs: list[OffsetSync],
                   dry_run: bool) -> GroupPlan:
        ids = self.topic_ids(sorted({t for t, _ in committed}))
        translations, untranslated = [], []
        for t in translate_positions(committed, syncs, self.alias, self.remote_topic, ids):
            source = SourcePartition(self.alias, t.source_topic, t.partition, self.cluster_id, self.siblings)
            failover = place(self.finder, source, t)
            if failover.resume is None:
                untranslated.append(Untranslated(t.source_topic, t.partition, t.committed, failover.reason))
            else:
                translations.append(Translation(t.destination_topic, t.partition, failover.resume.destination_offset,
                                                t.source_topic, t.committed, failover.resume.method,
                                                failover.resume.may_reread))
        description = describe_group(self.destination_admin, group, self.timeout)
        blocked = blocking_state(description.state.name, len(description.members or []))
        current = {}
        if translations and not blocked:
            current = group_offsets(self.destination_admin, group, "the destination", self.timeout,
                                    [(t.topic, t.partition) for t in translations])
        plan = plan_group(group, translations, untranslated, current, blocked)
        if plan.write and not dry_run:
            try:
                write_group_offsets(self.destination_admin, group, plan.offsets(), self.timeout)
            except TranslationError as exc:
                failed(plan, str(exc))
        return plan


class SoleWriter:
    """`not_writer()` of one worker process's source stream: describes the mirror's group on the source and
    compares the holder of its first partition with this process's member id (`member_id()`)."""

    def __init__(self, source_admin, group: str, member_id: Callable[[], str | None], timeout: float = 30.0) -> None:
        self.source_admin = source_admin
        self.group = group
        self.member_id = member_id
        self.timeout = timeout

    def __call__(self) -> str | None:
        try:
            description = describe_group(self.source_admin, self.group, self.timeout)
        except KafkaException as exc:
            raise TranslationError(f"cannot describe the mirror's group {self.group!r}: {_error_text(exc)}") from None
        assignments = {m.member_id: [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])]
                       for m in description.members or []}
        return not_writer_reason(description.state.name, assignments, self.member_id())


def _error_text(exc: Exception) -> str:
    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "str"):
        return exc.args[0].str()
    return str(exc)


def log_report(report: GroupSyncReport, label: dict) -> None:
    """One line per written or skipped partition, one per failed group, and a summary."""
    labels = {**label, "source": report.source}
    for plan in report.groups:
        for outcome in plan.write:
            log.info("group offset would be written" if report.dry_run else "group offset written",
                     extra={**labels, "group": plan.group, **outcome.to_dict()})
        for outcome in plan.skipped:
            log.info("group offset skipped", extra={**labels, "group": plan.group, **outcome.to_dict()})
        for item in plan.untranslated:
            log.info("group offset untranslated", extra={
                **labels, "group": plan.group, "source_topic": item.source_topic, "partition": item.partition,
                "source_offset": item.source_offset, "reason": item.reason})
        if plan.error:
            log.warning("group offsets not written", extra={**labels, "group": plan.group, "error": plan.error})
    for group, error in report.errors.items():
        log.warning("group offset sync failed", extra={**labels, "group": group, "error": error})
    log.info("group offsets synced", extra={
        **labels, "dry_run": report.dry_run, "groups": len(report.groups),
        **({"not_writer": report.not_writer} if report.not_writer else {}),
        "offsets_written": sum(len(g.write) for g in report.groups),
        "offsets_unchanged": sum(len(g.unchanged) for g in report.groups),
        "offsets_skipped": _sum_counts(g.skipped_by_reason() for g in report.groups),
    })


def _sum_counts(counts) -> dict[str, int]:
    total: dict[str, int] = {}
    for count in counts:
        for reason, n in count.items():
            total[reason] = total.get(reason, 0) + n
    return total


def group_filter(config: MirrorConfig) -> GroupFilter:
    """The mirror's group choice; its own consumer group is never synced."""
    return GroupFilter.from_expressions(config.group_offset_sync_groups, config.group_offset_sync_exclude_groups,
                                        own=[config.group_id])


def _admin(settings: dict) -> AdminClient:
    return factory.admin_client(settings)


def destination_reader(config: MirrorConfig) -> tuple[PartitionReader, Consumer]:
    """A PartitionReader over the destination, and its consumer (the caller closes it)."""
    consumer = factory.side_consumer(config.producer, f"{config.name}.group-offset-sync", {
        "enable.partition.eof": True, "isolation.level": "read_committed", "auto.offset.reset": "error"})
    return PartitionReader(consumer, _admin(config.producer), config.startup_timeout_s), consumer


def offset_syncs_of(config: MirrorConfig) -> Callable[[], list[OffsetSync]]:
    """The mirror's offset syncs, read anew at each call; none when the mirror writes none."""
    if not config.writes_offset_syncs:
        return list
    return lambda: read_offset_syncs(config, config.startup_timeout_s)


def worker_group_syncs(config: MirrorConfig, streams, destination_admin) -> list[GroupOffsetSync]:
    """One GroupOffsetSync per source stream of a worker, sharing one incremental finder (and its consumer,
    open for the worker's life); none when group-offset-sync-interval-ms is 0."""
    if not config.group_offset_sync_interval_ms:
        return []
    reader, _consumer = destination_reader(config)
    finder = IncrementalFinder(reader)
    groups = group_filter(config)
    syncs = offset_syncs_of(config)
    cluster_ids = {stream.alias: stream.cluster_id for stream in streams}
    return [GroupOffsetSync(stream.alias, stream.cluster_id, stream.admin, destination_admin, finder, groups,
                            config.topic_filter().should_replicate, config.naming_policy().remote_topic, syncs,
                            lambda topics, s=stream: {t: s.topic_ids[t] for t in topics if t in s.topic_ids},
                            config.startup_timeout_s, siblings(cluster_ids, stream.alias),
                            SoleWriter(stream.admin, config.group_id, lambda s=stream: s.consumer.memberid(),
                                       config.startup_timeout_s))
            for stream in streams if stream.admin is not None]


def sync_mirror_group_offsets(config: MirrorConfig, dry_run: bool = False) -> list[GroupSyncReport]:
    """One sync of every source of the mirror (the `sync-group-offsets` command)."""
    source_cluster(config, config.sources[0].name)  # preserve-partitions, or a ConfigError
    reader, consumer = destination_reader(config)
    finder = IncrementalFinder(reader)  # one call: as a full read from the low watermark
    # Group calls through a child process that reads commits with a consumer, as the worker's (group_commits).
    destination = factory.group_admin_client(config.producer, "the destination")
    admins = [destination]
    reports = []
    try:
        cluster_ids = {source.name: source_cluster_id(source, config.startup_timeout_s) for source in config.sources}
        for source in config.sources:
            admin = factory.group_admin_client(source.consumer, f"source {source.name!r}")
            admins.append(admin)
            sync = GroupOffsetSync(source.name, cluster_ids[source.name], admin,
                                   destination, finder, group_filter(config), config.topic_filter().should_replicate,
                                   config.naming_policy().remote_topic, offset_syncs_of(config),
                                   lambda topics, s=source: source_topic_ids(s, topics, config.startup_timeout_s),
                                   config.startup_timeout_s, siblings(cluster_ids, source.name))
            report = sync.sync(dry_run)
            log_report(report, {"mirror": config.name})
            reports.append(report)
    finally:
        consumer.close()
        for admin in admins:
            admin.close_coordinator_process()
    return reports

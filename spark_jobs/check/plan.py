"""The consistency check's plan: every Kafka question the job needs answered before Spark starts (driver, no
Spark). Bad input fails here, fast, with a JobInputError."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from mirror_worker.batch_api import SchemaRegistryUnavailable
from spark_jobs.check.digests import DIGEST_WINDOW
from spark_jobs.check.modes import AUTO, TopicMode, topic_modes
from spark_jobs.check.schemas import SchemaCheck, schema_check
from spark_jobs.check.window import CheckWindow, Ranges, source_ranges
from spark_jobs.common.job_config import JobInputError, JobTarget, target_from_args
from spark_jobs.common.kafka_meta import KafkaMeta, resolve_topics
from spark_jobs.common.stable_offsets import OpenTransaction, open_transactions, reachable

METADATA_TIMEOUT_S = 8.0

log = logging.getLogger("spark_jobs.consistency_check")


@dataclass
class CheckPlan:
    target: JobTarget
    window: CheckWindow
    topics: list[str]                                   # source topics
    topic_map: dict[str, str]                           # destination topic -> source topic
    source_ranges: Ranges
    destination_ranges: Ranges
    committed: dict[tuple[str, int], int | None]
    source_cluster_id: str | None
    report: Path
    open_transactions: list[OpenTransaction] = field(default_factory=list)   # source partitions stopped at their LSO
    digest_window: int = DIGEST_WINDOW                  # source offsets per digest window
    mode: str = AUTO                                    # as asked: auto, records or compacted (modes.py)
    digest_reader: str = "jvm"                          # or "librdkafka", "spark" (consistency_check --digest-reader)
    modes: dict[str, TopicMode] = field(default_factory=dict)   # source topic -> how it is compared
    schemas: SchemaCheck | None = None                  # registries and framed fields; None: ids not proven

    def mode_of(self, topic: str) -> str:
        return self.modes[topic].mode if topic in self.modes else self.mode

    def only(self, topics: list[str]) -> CheckPlan:
        """This plan narrowed to some of its source topics (and their destination topics)."""
        wanted = set(topics)
        topic_map = {d: s for d, s in self.topic_map.items() if s in wanted}
        return replace(self, topics=[t for t in self.topics if t in wanted], topic_map=topic_map,
                       source_ranges={k: r for k, r in self.source_ranges.items() if k[0] in wanted},
                       destination_ranges={k: r for k, r in self.destination_ranges.items() if k[0] in topic_map},
                       committed={k: c for k, c in self.committed.items() if k[0] in wanted},
                       open_transactions=[o for o in self.open_transactions if o.topic in wanted],
                       modes={t: m for t, m in self.modes.items() if t in wanted},
                       schemas=self.schemas.only(wanted) if self.schemas is not None else None)


def plan_check(args: argparse.Namespace) -> CheckPlan:
    """Every Kafka question the job needs answered before Spark starts; bad input fails here, fast."""
    target = target_from_args(args)
    window: CheckWindow = args.window
    source = KafkaMeta(target.source_bootstrap, "source", target.source_settings, timeout=METADATA_TIMEOUT_S)
    try:
        destination = KafkaMeta(target.destination_bootstrap, "destination", target.destination_settings,
                                timeout=METADATA_TIMEOUT_S)
    except JobInputError:
        source.close()
        raise
    try:
        topics = resolve_topics(target, source)
        topic_map = {target.destination_topic(t): t for t in topics}
        for destination_topic in topic_map:
            destination.partitions(destination_topic)
        log_ends = source.log_ends(topics)
        watermarks = reachable(log_ends)
        time_offsets = None
        if window.kind == "timestamps":
            def at(ms: int | None) -> dict[str, dict[int, int]]:
                return {t: source.offsets_for_time(t, ms) for t in topics} if ms is not None else {}

            starts, ends = at(window.from_ms), at(window.to_ms)
            time_offsets = {(t, p): (starts.get(t, {}).get(p), ends.get(t, {}).get(p))
                            for t in topics for p in watermarks[t]}
        ranges = source_ranges(window, topics, watermarks, time_offsets)
        stopped = open_transactions({k: end for k, (_, end) in ranges.items()}, log_ends)
        committed: dict[tuple[str, int], int | None] = {tp: None for tp in ranges}
        if target.group_id:
            for topic in topics:
                for partition, offset in source.committed(target.group_id, topic).items():
                    if (topic, partition) in committed:
                        committed[(topic, partition)] = offset
        # Destination watermarks are taken after the committed offsets: every record the group had
        # committed was on the destination by then, so none of them falls past the snapshot.
        destination_ranges = {key: (e.low, e.stable) for key, e in sorted(destination.log_ends(topic_map).items())}
        cluster_id = source.consumer.list_topics(timeout=METADATA_TIMEOUT_S).cluster_id or None
        modes = topic_modes(source.admin, args.mode, topics, METADATA_TIMEOUT_S)
        try:
            schemas = schema_check(target.mirror, topics)
        except SchemaRegistryUnavailable as exc:
            raise JobInputError(str(exc)) from None
    finally:
        source.close()
        destination.close()
    for (topic, partition), (start, end) in sorted(ranges.items()):
        log.info("partition planned", extra={
            "topic": topic, "partition": partition, "from": start, "to": end,
            "committed": committed[(topic, partition)]})
    for topic, mode in modes.items():
        log.info("topic mode", extra={"topic": topic, **mode.summary()})
    for transaction in stopped:
        log.warning(transaction.line(), extra=transaction.summary())
    return CheckPlan(target, window, topics, topic_map, ranges, destination_ranges, committed, cluster_id,
                     Path(args.report), stopped, args.digest_window, args.mode, args.digest_reader, modes, schemas)



"""The worker's periodic passes beside the copy and the topics: copy the mirrored topics' read ACLs
(`dr.acl_admin`), move chosen consumer groups' destination offsets forward (`dr.group_admin`), and send a
heartbeat per source cluster. The worker's loop schedules them (`MirrorWorker.run`); each pass reports to the
logs and metrics and never stops the copy.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from mirror_worker.config.model import MirrorConfig
from mirror_worker.dr.acl_admin import AclSync, AclSyncError, log_report
from mirror_worker.dr.group_admin import GroupOffsetSync, log_report as log_group_report
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class Housekeeping:
    """ACL sync, group offset sync and heartbeats of a worker's source streams."""

    def __init__(self, config: MirrorConfig, streams: list[SourceStream], metrics: MirrorMetrics, label: dict,
                 acl_sync: AclSync | None = None, group_syncs: list[GroupOffsetSync] = ()) -> None:
        self.config = config
        self.streams = streams
        self.metrics = metrics
        self.label = label
        self.acl_sync = acl_sync  # None when ACL sync is off
        self.group_syncs = list(group_syncs)  # one per source; they hold their destination index across syncs

    def close(self) -> None:
        """Close the group offset sync's destination reader (one, shared by the streams' syncs)."""
        for reader in {id(g.finder.reader): g.finder.reader for g in self.group_syncs}.values():
            close = getattr(reader, "close", None)
            if close is not None:
                close()

    def sync_acls(self) -> None:
        """Copy the read-side ACLs of the mirrored topics to their destination topics (dr/acl_rules.py)."""
        if self.acl_sync is None:
            return
        for stream in self.streams:
            if not stream.topics or stream.admin is None:
                continue
            try:
                report = self.acl_sync.sync(stream.alias, stream.admin, sorted(stream.topics))
            except AclSyncError as exc:
                self.metrics.errors.labels(kind="acl_sync", **self.label).inc()
                log.warning("topic ACL sync failed", extra={**self.label, "source": stream.alias, "error": str(exc)})
                continue
            log_report(report, self.label)
            for acl in report.created:
                self.metrics.acls_synced.labels(**self.label, source=stream.alias, topic=acl.topic).inc()
            if report.errors:
                self.metrics.errors.labels(kind="acl_sync", **self.label).inc(len(report.errors))

    def sync_group_offsets(self) -> None:
        """Move the chosen groups' destination offsets forward to their translated source commits (dr/group_rules.py)."""
        for group_sync in self.group_syncs:
            report = group_sync.sync()
            log_group_report(report, self.label)
            labels = {**self.label, "source": report.source}
            for plan in report.groups:
                if plan.write:
                    self.metrics.group_offsets_synced.labels(**labels, group=plan.group).inc(len(plan.write))
                for reason, count in plan.skipped_by_reason().items():
                    self.metrics.group_offsets_skipped.labels(**labels, group=plan.group, reason=reason).inc(count)
            if not report.ok:
                self.metrics.errors.labels(kind="group_offset_sync", **self.label).inc()

    def send_heartbeats(self, producer, destination_cluster_id: str) -> None:
        now_ms = int(time.time() * 1000)
        for stream in self.streams:
            value = {
                "mirror": self.config.name,
                "source": stream.alias,
                "source_cluster_id": stream.cluster_id,
                "destination_cluster_id": destination_cluster_id,
                "worker": f"{socket.gethostname()}:{os.getpid()}",
                "timestamp_ms": now_ms,
                "assigned_partitions": len(stream.assigned),
            }
            try:
                producer.produce(
                    self.config.heartbeat_topic, json.dumps(value).encode(), f"{self.config.name}/{stream.alias}".encode(),
                    timestamp=now_ms,
                )
            except (BufferError, KafkaException) as exc:
                log.warning("heartbeat not sent", extra={**self.label, "error": str(exc)})
        producer.poll(0)

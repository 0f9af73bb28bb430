"""MirrorOffsetsHook: the failover's I/O on a mirror's two clusters, through the worker's library
(mirror_worker.dr.offset_translation, groups, log_ends): consumer groups on the source, a group's
translation, the source log ends, active members on the destination, and the translated offsets written.

Clients come from the mirror spec (the translation reads both clusters as the worker sees them).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from airflow.sdk import BaseHook


class MirrorOffsetsHook(BaseHook):
    hook_name = "Kafka mirror offsets (from the mirror spec)"

    def __init__(self, spec_path: str, mirror_name: str, source_alias: str | None = None, timeout_s: float = 30.0,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec_path, self.mirror_name = str(spec_path), mirror_name
        self.source_alias = source_alias or None
        self.timeout_s = timeout_s

    @cached_property
    def config(self):
        from mirror_worker.api import select_mirror

        return select_mirror(Path(self.spec_path), self.mirror_name)

    @cached_property
    def source(self):
        """The source cluster whose groups fail over (ConfigError without preserve-partitions)."""
        from mirror_worker.api import source_cluster

        return source_cluster(self.config, self.source_alias)

    def _admin(self, settings: dict):
        from mirror_worker.api import admin_client

        return admin_client(settings)

    def source_groups(self) -> list[str]:
        """Every consumer group id known to the source cluster."""
        from mirror_worker.api import group_ids

        return group_ids(self._admin(self.source.consumer), self.timeout_s)

    def translation(self, group: str, apply: bool = False) -> dict:
        """offset_translation.report of `group`; with `apply` the offsets are written first (GroupActiveError
        while the destination group has members: nothing is written then), never moving the group back from
        where it consumed on the destination since an earlier failover (the report's `ahead_on_destination`)."""
        from mirror_worker.api import (
            apply_group_offsets, translate_group, translated_offsets, translation_report as report,
        )

        failovers = translate_group(self.config, group, self.source.name)
        behind = apply_group_offsets(self.config, group, translated_offsets(failovers), self.timeout_s) if apply else {}
        return report(self.config, group, failovers, apply, behind)

    def source_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """{(source topic, partition): log end as the mirror's consumer reads it (the LSO when read_committed)}."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        from mirror_worker.api import list_offsets, reads_committed

        wanted = [TopicPartition(t, p) for t, p in sorted(set(partitions))]
        return list_offsets(self._admin(self.source.consumer), wanted, OffsetSpec.latest(),
                            reads_committed(self.source.consumer), self.timeout_s)

    def destination_members(self, group: str) -> int:
        """Members of `group` on the destination, described through a child process as the worker's group calls
        are (clients/coordinator_admin.py): the failover preview asks just when the destination's coordinator
        may be moving or not yet ready."""
        from mirror_worker.api import active_members, group_admin_client

        admin = group_admin_client(self.config.producer, "the destination")
        try:
            return active_members(admin, group, self.timeout_s)
        finally:
            admin.close_coordinator_process()

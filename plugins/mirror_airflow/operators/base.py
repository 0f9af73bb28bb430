"""What every mirror operator shares: which spec, which mirror, where the Kafka clients come from.

Clients come from the mirror spec by default; a mirror's `airflow: {source-conn-id, destination-conn-id}`
makes the discover/ensure/hand-over tasks use those Kafka connections instead (the worker always uses
the spec).
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import BaseOperator

from mirror_airflow.hooks.kafka import KafkaHook
from mirror_worker.api import admin_client


class MirrorOperator(BaseOperator):
    """Base of the lifecycle operators: validates in __init__, loads the mirror's config when it runs."""

    template_fields = ("spec_path", "mirror_name")
    ui_color = "#e8f1fb"

    def __init__(self, *, spec_path: str, mirror_name: str, source_conn_id: str | None = None,
                 destination_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not spec_path or not mirror_name:
            raise ValueError(f"{self.task_id}: spec_path and mirror_name are required")
        self.spec_path = str(spec_path)
        self.mirror_name = mirror_name
        self.source_conn_id = source_conn_id
        self.destination_conn_id = destination_conn_id
        self._mirror = None

    @property
    def mirror(self):
        """The mirror's validated config, loaded when the task runs (never at parse time)."""
        if self._mirror is None:
            from mirror_worker.api import select_mirror

            self._mirror = select_mirror(Path(self.spec_path), self.mirror_name)
        return self._mirror

    def source_admins(self) -> list[tuple[str, object]]:
        """(source name, admin client) per source cluster of the mirror."""
        if self.source_conn_id:
            return [(self.mirror.sources[0].name, KafkaHook(self.source_conn_id).get_admin_client())]
        return [(s.name, admin_client(s.consumer)) for s in self.mirror.sources]

    def destination_admin(self):
        if self.destination_conn_id:
            return KafkaHook(self.destination_conn_id).get_admin_client()
        return admin_client(self.mirror.producer)

    def selected_source_topics(self) -> dict:
        """Source topic -> TopicInfo (largest across the mirror's sources) for what the filter selects."""
        from mirror_worker.api import describe_topics

        wanted = self.mirror.topic_filter()
        selected: dict = {}
        self.selected_from = {}  # source topic -> the admin client of the source its info came from
        for source, admin in self.source_admins():
            topics = describe_topics(admin)
            for name in wanted.select(topics):
                info = topics[name]
                if name not in selected or info.partitions > selected[name].partitions:
                    selected[name] = info
                    self.selected_from[name] = admin
            self.log.info("source %s: %d topic(s), %d selected", source, len(topics), len(wanted.select(topics)))
        return selected

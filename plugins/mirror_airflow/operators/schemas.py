"""Schema sync of the mirrored topics (mirror_worker.schemas.sync, imported only when registries are set)."""

from __future__ import annotations

from mirror_airflow.operators.base import MirrorOperator


class SyncSchemasOperator(MirrorOperator):
    """Copies the schemas of the mirrored topics to the destination registry (mirror_worker.schemas.sync)."""

    def __init__(self, *, discover_task_id: str = "discover", **kwargs) -> None:
        super().__init__(**kwargs)
        self.discover_task_id = discover_task_id

    def execute(self, context):
        if not self.mirror.syncs_schemas:
            self.log.info("mirror %s has no schema registries configured: nothing to sync", self.mirror_name)
            return None
        from mirror_worker.api import sync_mirror_schemas

        topics = sorted(context["ti"].xcom_pull(task_ids=self.discover_task_id) or {})
        report = sync_mirror_schemas(self.mirror, topics)
        self.log.info("schema sync of %d topic(s): %s", len(topics), report.to_dict())
        if report.conflicts and self.mirror.schema_sync == "strict":
            topic, error = next(iter(report.conflicts.items()))
            raise RuntimeError(f"mirror {self.mirror_name!r}: schema conflicts on {len(report.conflicts)} topic(s), "
                               f"first {topic}: {error}")
        return report.to_dict()

"""Topic discovery and destination topic creation, through the worker's topic filter, naming policy,
describe_topics and DestinationTopics (idempotent)."""

from __future__ import annotations

from mirror_airflow.operators.base import MirrorOperator


class DiscoverTopicsOperator(MirrorOperator):
    """XCom: {source topic: destination topic} for every source topic the mirror selects now."""

    def execute(self, context) -> dict[str, str]:
        policy = self.mirror.naming_policy()
        mapping = {name: policy.remote_topic(name) for name in sorted(self.selected_source_topics())}
        self.log.info("mirror %s selects %d topic(s): %s", self.mirror_name, len(mapping), mapping)
        return mapping


class EnsureDestinationTopicsOperator(MirrorOperator):
    """Creates missing destination topics and grows too-small ones (DestinationTopics, idempotent)."""

    def __init__(self, *, discover_task_id: str = "discover", **kwargs) -> None:
        super().__init__(**kwargs)
        self.discover_task_id = discover_task_id

    def execute(self, context) -> dict[str, int]:
        from mirror_worker.api import DestinationTopics, creation_configs, exclusion_pattern

        mapping = context["ti"].xcom_pull(task_ids=self.discover_task_id) or {}
        if not mapping:
            self.log.info("no source topic selected yet: nothing to create (the worker picks new topics up)")
            return {}
        infos = self.selected_source_topics()
        wanted = {mapping[name]: infos[name] for name in mapping if name in infos}
        cfg = self.mirror
        admin = self.destination_admin()
        destination = DestinationTopics(admin, cfg.topic_creation, cfg.preserve_partitions or cfg.exactly_once)
        # Created as the worker creates them (its configs, the timestamp limits raised to the source's), each
        # topic described on the source its info came from.
        configs: dict = {}
        for source_admin in {id(a): a for a in self.selected_from.values()}.values():
            made, why = creation_configs(
                source_admin, admin,
                {n: mapping[n] for n in mapping if n in infos and self.selected_from[n] is source_admin},
                bool(cfg.config_sync_interval_ms), exclusion_pattern(cfg.config_sync_exclude))
            configs.update(made)
            if why is not None:
                self.log.warning("destination timestamp limits not raised at topic creation: %s", why)
        counts = destination.ensure(wanted, configs)
        self.log.info("destination topics ready: %s", counts)
        return counts

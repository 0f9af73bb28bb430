"""The worker's public library surface: what the Airflow provider (`plugins/mirror_airflow`) and the DAGs use.

The Airflow side and the local stack (`devstack/`) import from here only (`tests/unit/test_import_graph.py`
checks it), so the worker's packages can be re-cut without touching the provider. Each name is loaded from its
home module when first asked for (`mirror_worker.surface`). The Spark jobs and the benchmarks, which run pieces
of the copy themselves, have their own surface: `mirror_worker.batch_api`.

- spec: `load_entries` (`SpecEntry`s: each mirror's config and `airflow:` mapping), `select_mirror`,
  `MirrorConfig`, `SLOT_FLAG` (the worker's slot flag)
- Kafka clients and their settings: `admin_client`, `group_admin_client` (its consumer-group calls in a child
  process), `consumer`, `side_consumer`, `producer` (the one place that builds them); `connection_settings`,
  `consumer_settings`, `producer_settings`, `settings_from_connection`
- security posture (config/posture.py, config/placeholders.py): `PlaceholderRule` (what a connection's
  placeholders may read; `SECRETS_DIRS_VARIABLE` names the allowlist's variable), `allowed_insecure` and
  `check_url` (an `allow-insecure` opt-in, an http:// URL)
- schema registries (config/registry.py): `registry_from_connection` (a registry client's config: URL, auth, TLS)
- topics and schemas: `describe_topics`, `DestinationTopics`, `creation_configs`, `exclusion_pattern`,
  `sync_mirror_schemas`
- consumer groups and log ends: `group_ids`, `active_members`, `held_partitions`, `committed_offsets`, `list_offsets`,
  `log_bounds`, `reads_committed`
- failover: `source_cluster`, `translate_group`, `translated_offsets`, `apply_group_offsets`,
  `translation_report`, `failed_over`, `mark_failed_over`, `refuse_if_failed_over`, `unmark`, `mark_topic`
- hand-over to the Spark catch-up: `lease_group`; exactly-once positions: `POSITIONS_GROUP`,
  `legacy_positions_group`
- errors: `ConfigError` (bad input), `MirrorError` (runtime); logs: `configure_logging` (the worker's JSON lines)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirror_worker.surface import lazy_names

if TYPE_CHECKING:  # the same names, for readers and type checkers (the import graph counts these edges)
    from mirror_worker.clients.factory import admin_client, consumer, group_admin_client, producer, side_consumer
    from mirror_worker.clients.groups import active_members, committed_offsets, group_ids, held_partitions
    from mirror_worker.clients.log_ends import list_offsets, log_bounds, reads_committed
    from mirror_worker.config.librdkafka import (
        connection_settings, consumer_settings, producer_settings, settings_from_connection,
    )
    from mirror_worker.config.membership import SLOT_FLAG
    from mirror_worker.config.model import MirrorConfig
    from mirror_worker.config.placeholders import SECRETS_DIRS_VARIABLE, PlaceholderRule
    from mirror_worker.config.posture import allowed_insecure, check_url
    from mirror_worker.config.registry import registry_from_connection
    from mirror_worker.config.spec import SpecEntry, load_entries, select_mirror
    from mirror_worker.dr.failover_mark import failed_over, mark_failed_over, mark_topic, refuse_if_failed_over, unmark
    from mirror_worker.dr.offset_translation import apply_group_offsets, source_cluster, translate_group
    from mirror_worker.dr.offset_translation import report as translation_report
    from mirror_worker.dr.offset_translation import translated_offsets
    from mirror_worker.engine.catchup_lease import lease_group
    from mirror_worker.exactly_once.positions import POSITIONS_GROUP, legacy_positions_group
    from mirror_worker.exceptions import ConfigError, MirrorError
    from mirror_worker.logs import configure_logging
    from mirror_worker.schemas.sync import sync_mirror_schemas
    from mirror_worker.topics.admin import DestinationTopics, describe_topics
    from mirror_worker.topics.configs import creation_configs, exclusion_pattern

# name -> (home module, its name there)
_HOME = {
    "SpecEntry": ("mirror_worker.config.spec", "SpecEntry"),
    "load_entries": ("mirror_worker.config.spec", "load_entries"),
    "select_mirror": ("mirror_worker.config.spec", "select_mirror"),
    "MirrorConfig": ("mirror_worker.config.model", "MirrorConfig"),
    "SLOT_FLAG": ("mirror_worker.config.membership", "SLOT_FLAG"),
    "admin_client": ("mirror_worker.clients.factory", "admin_client"),
    "group_admin_client": ("mirror_worker.clients.factory", "group_admin_client"),
    "consumer": ("mirror_worker.clients.factory", "consumer"),
    "side_consumer": ("mirror_worker.clients.factory", "side_consumer"),
    "producer": ("mirror_worker.clients.factory", "producer"),
    "connection_settings": ("mirror_worker.config.librdkafka", "connection_settings"),
    "consumer_settings": ("mirror_worker.config.librdkafka", "consumer_settings"),
    "producer_settings": ("mirror_worker.config.librdkafka", "producer_settings"),
    "settings_from_connection": ("mirror_worker.config.librdkafka", "settings_from_connection"),
    "PlaceholderRule": ("mirror_worker.config.placeholders", "PlaceholderRule"),
    "SECRETS_DIRS_VARIABLE": ("mirror_worker.config.placeholders", "SECRETS_DIRS_VARIABLE"),
    "allowed_insecure": ("mirror_worker.config.posture", "allowed_insecure"),
    "check_url": ("mirror_worker.config.posture", "check_url"),
    "registry_from_connection": ("mirror_worker.config.registry", "registry_from_connection"),
    "describe_topics": ("mirror_worker.topics.admin", "describe_topics"),
    "DestinationTopics": ("mirror_worker.topics.admin", "DestinationTopics"),
    "creation_configs": ("mirror_worker.topics.configs", "creation_configs"),
    "exclusion_pattern": ("mirror_worker.topics.configs", "exclusion_pattern"),
    "sync_mirror_schemas": ("mirror_worker.schemas.sync", "sync_mirror_schemas"),
    "group_ids": ("mirror_worker.clients.groups", "group_ids"),
    "active_members": ("mirror_worker.clients.groups", "active_members"),
    "held_partitions": ("mirror_worker.clients.groups", "held_partitions"),
    "committed_offsets": ("mirror_worker.clients.groups", "committed_offsets"),
    "list_offsets": ("mirror_worker.clients.log_ends", "list_offsets"),
    "log_bounds": ("mirror_worker.clients.log_ends", "log_bounds"),
    "reads_committed": ("mirror_worker.clients.log_ends", "reads_committed"),
    "source_cluster": ("mirror_worker.dr.offset_translation", "source_cluster"),
    "translate_group": ("mirror_worker.dr.offset_translation", "translate_group"),
    "translated_offsets": ("mirror_worker.dr.offset_translation", "translated_offsets"),
    "apply_group_offsets": ("mirror_worker.dr.offset_translation", "apply_group_offsets"),
    "translation_report": ("mirror_worker.dr.offset_translation", "report"),
    "failed_over": ("mirror_worker.dr.failover_mark", "failed_over"),
    "mark_failed_over": ("mirror_worker.dr.failover_mark", "mark_failed_over"),
    "refuse_if_failed_over": ("mirror_worker.dr.failover_mark", "refuse_if_failed_over"),
    "unmark": ("mirror_worker.dr.failover_mark", "unmark"),
    "mark_topic": ("mirror_worker.dr.failover_mark", "mark_topic"),
    "lease_group": ("mirror_worker.engine.catchup_lease", "lease_group"),
    "POSITIONS_GROUP": ("mirror_worker.exactly_once.positions", "POSITIONS_GROUP"),
    "legacy_positions_group": ("mirror_worker.exactly_once.positions", "legacy_positions_group"),
    "ConfigError": ("mirror_worker.exceptions", "ConfigError"),
    "MirrorError": ("mirror_worker.exceptions", "MirrorError"),
    "configure_logging": ("mirror_worker.logs", "configure_logging"),
}

__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_names(__name__, _HOME)

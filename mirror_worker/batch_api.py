"""The worker's second public surface: the pieces of the copy that the batch plane (`spark_jobs/`) and the
benchmarks (`bench/`) run themselves, so that a Spark task copies, routes, rewrites schema ids and decides on data
loss with the worker's own code. Those two import the worker from here only (and `mirror_worker.api` where they
need an operator's call); `tests/unit/test_import_graph.py` checks it. Each name is loaded from its home module
when first asked for (`mirror_worker.surface`): an executor that only checks records does not import the
transactions.

- Kafka clients (the one place that builds them) and look-ups made with them: `admin_client`, `consumer`,
  `producer`, `active_members`, `committed_positions`, `list_offsets`, `log_bounds`, `reads_committed`; a
  record's headers, read once (`read_headers`, `UnreadableHeaders`); the timestamp a copy is produced with
  (`produced_timestamp`, `expected_destination_timestamp`, `EPOCH_ZERO_STAMP_MS`)
- client settings, as the worker resolves them: `KAFKA_MAX_MESSAGE_BYTES`, `batch_size_for`, `connection_settings`,
  `consumer_settings`, `fitted_to_topics`, `producer_settings`, `CONSUMER_DEFAULTS`, `PRODUCER_DEFAULTS`,
  `WAN_PARTITION_FETCH_BYTES`,
  `java_security_settings`, `TopicCreation`, `select_mirror`
- routing, naming and provenance (policy): `IdentityPolicy`, `NamingPolicy`, `PrefixPolicy`, `Router`,
  `PROVENANCE_HEADER`, `mirrored_headers`, `provenance_value`
- topics and schemas: destination topics, schema-id rewriting: `DestinationTopics`, `describe_topics`, `topic_ids`,
  `creation_configs`, `exclusion_pattern`,
  `TopicConfigs`, `describe_explicit_configs`, `wire_format`, `HEADER_SIZE`, `MAGIC_BYTE`, `rewritten_fields`,
  `TopicFraming`, `SUBJECT_SUFFIXES`, `syncers_for`; what schema ids name, by content (the consistency check):
  `Registry`, `schema_meanings`
- exactly-once transactions and positions: `POSITIONS_GROUP`, `Owner`, `PartitionTransactions`, `ProducerFenced`,
  `TransactionAborted`
- the copy's decisions: where a partition starts (data loss), taking what a consumer holds, the hand-over:
  `StartDecision`, `Verdict`, `decide_start`, `resets_to_earliest`, `take_available`, `CatchupLease`
- failover and failback: `FailedOver`, `refuse_if_failed_over`, `committed_reader`, `failback_start`
- what is a credential (the Spark jobs keep them protected and redacted): `is_secret_key`, `SECRET_KEY_PATTERN`,
  `redact_url`
- errors and logs: `ConfigError`, `SchemaConflict`, `SchemaRegistryUnavailable`, `UnknownSchemaId`,
  `configure_logging`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirror_worker.surface import lazy_names

if TYPE_CHECKING:  # the same names, for readers and type checkers (the import graph counts these edges)
    from mirror_worker.clients.factory import admin_client, consumer, producer
    from mirror_worker.clients.groups import active_members, committed_positions
    from mirror_worker.clients.headers import UnreadableHeaders, read_headers
    from mirror_worker.clients.log_ends import list_offsets, log_bounds, reads_committed
    from mirror_worker.clients.timestamps import (
        EPOCH_ZERO_STAMP_MS, expected_destination_timestamp, produced_timestamp,
    )
    from mirror_worker.config.fetch_sizes import WAN_PARTITION_FETCH_BYTES
    from mirror_worker.config.librdkafka import (
        CONSUMER_DEFAULTS, KAFKA_MAX_MESSAGE_BYTES, PRODUCER_DEFAULTS, batch_size_for,
        connection_settings, consumer_settings, fitted_to_topics, producer_settings,
    )
    from mirror_worker.config.model import TopicCreation
    from mirror_worker.config.security import java_security_settings
    from mirror_worker.config.spec import select_mirror
    from mirror_worker.dr.failback import failback_start
    from mirror_worker.dr.failover_mark import FailedOver, refuse_if_failed_over
    from mirror_worker.dr.offset_translation import committed_reader
    from mirror_worker.engine.catchup_lease import CatchupLease
    from mirror_worker.engine.consume import take_available
    from mirror_worker.engine.data_loss import StartDecision, Verdict, decide_start, resets_to_earliest
    from mirror_worker.exactly_once.positions import POSITIONS_GROUP, Owner
    from mirror_worker.exactly_once.transactions import PartitionTransactions, ProducerFenced, TransactionAborted
    from mirror_worker.exceptions import ConfigError, SchemaConflict, SchemaRegistryUnavailable, UnknownSchemaId
    from mirror_worker.logs import configure_logging
    from mirror_worker.redaction import SECRET_KEY_PATTERN, is_secret_key, redact_url
    from mirror_worker.policy.naming import IdentityPolicy, NamingPolicy, PrefixPolicy
    from mirror_worker.policy.provenance import PROVENANCE_HEADER, mirrored_headers, provenance_value
    from mirror_worker.policy.routing import Router
    from mirror_worker.schemas import wire_format
    from mirror_worker.schemas.framing import TopicFraming, rewritten_fields
    from mirror_worker.schemas.meaning import schema_meanings
    from mirror_worker.schemas.registry import Registry
    from mirror_worker.schemas.wire_format import HEADER_SIZE, MAGIC_BYTE
    from mirror_worker.schemas.sync import SUBJECT_SUFFIXES, syncers_for
    from mirror_worker.topics.admin import DestinationTopics, describe_topics, topic_ids
    from mirror_worker.topics.configs import TopicConfigs, creation_configs, describe_explicit_configs, exclusion_pattern

# name -> (home module, its name there)
_HOME = {
    "admin_client": ("mirror_worker.clients.factory", "admin_client"),
    "consumer": ("mirror_worker.clients.factory", "consumer"),
    "producer": ("mirror_worker.clients.factory", "producer"),
    "active_members": ("mirror_worker.clients.groups", "active_members"),
    "committed_positions": ("mirror_worker.clients.groups", "committed_positions"),
    "read_headers": ("mirror_worker.clients.headers", "read_headers"),
    "produced_timestamp": ("mirror_worker.clients.timestamps", "produced_timestamp"),
    "expected_destination_timestamp": ("mirror_worker.clients.timestamps", "expected_destination_timestamp"),
    "EPOCH_ZERO_STAMP_MS": ("mirror_worker.clients.timestamps", "EPOCH_ZERO_STAMP_MS"),
    "UnreadableHeaders": ("mirror_worker.clients.headers", "UnreadableHeaders"),
    "list_offsets": ("mirror_worker.clients.log_ends", "list_offsets"),
    "log_bounds": ("mirror_worker.clients.log_ends", "log_bounds"),
    "reads_committed": ("mirror_worker.clients.log_ends", "reads_committed"),
    "KAFKA_MAX_MESSAGE_BYTES": ("mirror_worker.config.librdkafka", "KAFKA_MAX_MESSAGE_BYTES"),
    "batch_size_for": ("mirror_worker.config.librdkafka", "batch_size_for"),
    "connection_settings": ("mirror_worker.config.librdkafka", "connection_settings"),
    "consumer_settings": ("mirror_worker.config.librdkafka", "consumer_settings"),
    "fitted_to_topics": ("mirror_worker.config.librdkafka", "fitted_to_topics"),
    "producer_settings": ("mirror_worker.config.librdkafka", "producer_settings"),
    "CONSUMER_DEFAULTS": ("mirror_worker.config.librdkafka", "CONSUMER_DEFAULTS"),
    "WAN_PARTITION_FETCH_BYTES": ("mirror_worker.config.fetch_sizes", "WAN_PARTITION_FETCH_BYTES"),
    "PRODUCER_DEFAULTS": ("mirror_worker.config.librdkafka", "PRODUCER_DEFAULTS"),
    "java_security_settings": ("mirror_worker.config.security", "java_security_settings"),
    "TopicCreation": ("mirror_worker.config.model", "TopicCreation"),
    "select_mirror": ("mirror_worker.config.spec", "select_mirror"),
    "IdentityPolicy": ("mirror_worker.policy.naming", "IdentityPolicy"),
    "NamingPolicy": ("mirror_worker.policy.naming", "NamingPolicy"),
    "PrefixPolicy": ("mirror_worker.policy.naming", "PrefixPolicy"),
    "Router": ("mirror_worker.policy.routing", "Router"),
    "PROVENANCE_HEADER": ("mirror_worker.policy.provenance", "PROVENANCE_HEADER"),
    "mirrored_headers": ("mirror_worker.policy.provenance", "mirrored_headers"),
    "provenance_value": ("mirror_worker.policy.provenance", "provenance_value"),
    "DestinationTopics": ("mirror_worker.topics.admin", "DestinationTopics"),
    "creation_configs": ("mirror_worker.topics.configs", "creation_configs"),
    "exclusion_pattern": ("mirror_worker.topics.configs", "exclusion_pattern"),
    "describe_topics": ("mirror_worker.topics.admin", "describe_topics"),
    "topic_ids": ("mirror_worker.topics.admin", "topic_ids"),
    "TopicConfigs": ("mirror_worker.topics.configs", "TopicConfigs"),
    "describe_explicit_configs": ("mirror_worker.topics.configs", "describe_explicit_configs"),
    "wire_format": ("mirror_worker.schemas", "wire_format"),
    "rewritten_fields": ("mirror_worker.schemas.framing", "rewritten_fields"),
    "HEADER_SIZE": ("mirror_worker.schemas.wire_format", "HEADER_SIZE"),
    "MAGIC_BYTE": ("mirror_worker.schemas.wire_format", "MAGIC_BYTE"),
    "syncers_for": ("mirror_worker.schemas.sync", "syncers_for"),
    "SUBJECT_SUFFIXES": ("mirror_worker.schemas.sync", "SUBJECT_SUFFIXES"),
    "TopicFraming": ("mirror_worker.schemas.framing", "TopicFraming"),
    "schema_meanings": ("mirror_worker.schemas.meaning", "schema_meanings"),
    "Registry": ("mirror_worker.schemas.registry", "Registry"),
    "POSITIONS_GROUP": ("mirror_worker.exactly_once.positions", "POSITIONS_GROUP"),
    "Owner": ("mirror_worker.exactly_once.positions", "Owner"),
    "PartitionTransactions": ("mirror_worker.exactly_once.transactions", "PartitionTransactions"),
    "ProducerFenced": ("mirror_worker.exactly_once.transactions", "ProducerFenced"),
    "TransactionAborted": ("mirror_worker.exactly_once.transactions", "TransactionAborted"),
    "StartDecision": ("mirror_worker.engine.data_loss", "StartDecision"),
    "Verdict": ("mirror_worker.engine.data_loss", "Verdict"),
    "decide_start": ("mirror_worker.engine.data_loss", "decide_start"),
    "resets_to_earliest": ("mirror_worker.engine.data_loss", "resets_to_earliest"),
    "take_available": ("mirror_worker.engine.consume", "take_available"),
    "CatchupLease": ("mirror_worker.engine.catchup_lease", "CatchupLease"),
    "FailedOver": ("mirror_worker.dr.failover_mark", "FailedOver"),
    "refuse_if_failed_over": ("mirror_worker.dr.failover_mark", "refuse_if_failed_over"),
    "committed_reader": ("mirror_worker.dr.offset_translation", "committed_reader"),
    "failback_start": ("mirror_worker.dr.failback", "failback_start"),
    "ConfigError": ("mirror_worker.exceptions", "ConfigError"),
    "SchemaConflict": ("mirror_worker.exceptions", "SchemaConflict"),
    "UnknownSchemaId": ("mirror_worker.exceptions", "UnknownSchemaId"),
    "SchemaRegistryUnavailable": ("mirror_worker.exceptions", "SchemaRegistryUnavailable"),
    "configure_logging": ("mirror_worker.logs", "configure_logging"),
    "is_secret_key": ("mirror_worker.redaction", "is_secret_key"),
    "SECRET_KEY_PATTERN": ("mirror_worker.redaction", "SECRET_KEY_PATTERN"),
    "redact_url": ("mirror_worker.redaction", "redact_url"),
}

__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_names(__name__, _HOME)

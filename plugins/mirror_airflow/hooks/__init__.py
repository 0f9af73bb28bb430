"""Hooks: Kafka clients (on the official Kafka provider's `kafka` connection type), the schema registry
(`http`), the Airflow REST API calls of the lifecycle operators (`http`), and a mirror's consumer-group
offsets for the failover (from the mirror spec)."""

from mirror_airflow.hooks.airflow_api import AirflowApi, AirflowApiHook, api_from_connection
from mirror_airflow.hooks.kafka import KafkaHook
from mirror_airflow.hooks.offsets import MirrorOffsetsHook
from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

__all__ = ["AirflowApi", "AirflowApiHook", "KafkaHook", "MirrorOffsetsHook", "SchemaRegistryHook", "api_from_connection"]

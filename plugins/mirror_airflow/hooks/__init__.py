"""Hooks: Kafka clients (on the official Kafka provider's `kafka` connection type), the schema registry
(`http`), and the Airflow REST API calls of the lifecycle operators (`http`)."""

from mirror_airflow.hooks.airflow_api import AirflowApi, AirflowApiHook, api_from_connection
from mirror_airflow.hooks.kafka import KafkaHook
from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

__all__ = ["AirflowApi", "AirflowApiHook", "KafkaHook", "SchemaRegistryHook", "api_from_connection"]

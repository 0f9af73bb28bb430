"""Hooks: Kafka clients and a schema-registry client from Airflow connections.

Kafka connection (conn type `kafka`): the extras are a JSON object of librdkafka (or Java client)
settings, e.g. `{"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL", ...}`.
They go through the worker's own checks (mirror_worker/client_config.py), so a bad key fails the
same way it would in the spec. Schema-registry connection (conn type `http`): host (with scheme,
or `schema` as the scheme), port, optional path in the extra `path`, login/password as basic auth.
"""

from __future__ import annotations

import json

from airflow.sdk import BaseHook

from mirror_airflow.exceptions import ConnectionConfigError
from mirror_worker.client_config import (
    connection_settings, consumer_settings, producer_settings, settings_from_connection,
)
from mirror_worker.exceptions import ConfigError


class KafkaHook(BaseHook):
    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Kafka (librdkafka settings in extras)"

    def __init__(self, kafka_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id
        self._settings: dict[str, str] | None = None

    @property
    def where(self) -> str:
        return f"Airflow connection {self.kafka_conn_id!r}"

    def client_settings(self) -> dict[str, str]:
        """The connection's extras as client settings; bootstrap.servers is required."""
        if self._settings is None:
            conn = self.get_connection(self.kafka_conn_id)
            try:
                extras = json.loads(conn.extra) if conn.extra else {}
            except ValueError:
                raise ConnectionConfigError(f"{self.where}: extra is not valid JSON") from None
            if not isinstance(extras, dict):
                raise ConnectionConfigError(f"{self.where}: extra must be a JSON object of librdkafka settings")
            if not extras.get("bootstrap.servers"):
                raise ConnectionConfigError(
                    f"{self.where}: bootstrap.servers is required in the extras (a JSON object of librdkafka "
                    'settings, e.g. {"bootstrap.servers": "host:9092"})'
                )
            # The connection's login and password are the SASL credentials (mirror_worker/security.py).
            self._settings = settings_from_connection(conn.login, conn.password, extras, self.where)
        return dict(self._settings)

    def consumer_config(self, group_id: str) -> dict[str, str]:
        return {"group.id": group_id, **consumer_settings(self.client_settings(), self.where)}

    def producer_config(self, queue_size: int = 10_000) -> dict[str, str]:
        return producer_settings(self.client_settings(), self.where, queue_size)

    def admin_config(self) -> dict[str, str]:
        return connection_settings(self.client_settings())

    def get_admin_client(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.admin_config())

    def get_consumer(self, group_id: str):
        from confluent_kafka import Consumer

        return Consumer(self.consumer_config(group_id))

    def get_producer(self):
        from confluent_kafka import Producer

        return Producer(self.producer_config())

    def test_connection(self) -> tuple[bool, str]:
        try:
            self.consumer_config("airflow-test-connection")  # every extra checked by librdkafka first
            metadata = self.get_admin_client().list_topics(timeout=10)
        except ConfigError as exc:
            return False, str(exc)
        except Exception as exc:  # the UI shows the message: any client error is a failed test
            return False, f"{self.where}: {exc.__class__.__name__}: {exc}"
        return True, f"connected: cluster {metadata.cluster_id}, {len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s)"


class SchemaRegistryHook(BaseHook):
    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = "schema_registry_default"
    conn_type = "http"
    hook_name = "Schema registry (Confluent API)"

    def __init__(self, schema_registry_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.schema_registry_conn_id = schema_registry_conn_id

    def client_config(self) -> dict[str, str]:
        """confluent-kafka SchemaRegistryClient config: url (+ basic.auth.user.info)."""
        conn = self.get_connection(self.schema_registry_conn_id)
        where = f"Airflow connection {self.schema_registry_conn_id!r}"
        if not conn.host:
            raise ConnectionConfigError(f"{where}: host is required (the schema registry's address)")
        host = conn.host if "://" in conn.host else f"{conn.schema or 'http'}://{conn.host}"
        url = f"{host}:{conn.port}" if conn.port else host
        path = (conn.extra_dejson or {}).get("path")
        if path:
            url = f"{url.rstrip('/')}/{str(path).lstrip('/')}"
        config = {"url": url}
        if conn.login:
            config["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        return config

    def get_client(self):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient(self.client_config())

    def test_connection(self) -> tuple[bool, str]:
        try:
            subjects = self.get_client().get_subjects()
        except ConfigError as exc:
            return False, str(exc)
        except Exception as exc:
            return False, f"{exc.__class__.__name__}: {exc}"
        return True, f"connected: {len(subjects)} subject(s)"

"""KafkaHook: Kafka clients from an Airflow connection of the official Kafka provider's type `kafka`.

The hook builds on `airflow.providers.apache.kafka.hooks.base.KafkaBaseHook` (which owns the `kafka`
connection type; this package declares no second one). The connection's extras are a JSON object of
librdkafka (or Java client) settings, e.g. `{"bootstrap.servers": "127.0.0.1:9092", "security.protocol":
"SASL_SSL", ...}`, as for the official hooks; here they go through the worker's own checks
(mirror_worker/config/librdkafka.py), so a bad key fails the same way it would in the spec, and the
connection's login/password, when given, are the SASL credentials.

Whoever may edit a connection is not trusted with the hosts the hook runs on (worker, triggerer, the
api-server's "Test connection"): `${file:...}`/`${directory:...}` placeholders are resolved only inside
the host's MIRROR_SECRETS_DIRS, `${env:...}` never (mirror_worker/config/placeholders.py); cleartext SASL
and unverified TLS need the extra's `allow-insecure` (mirror_worker/config/posture.py).
"""

from __future__ import annotations

import json
from functools import cached_property

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from mirror_airflow.exceptions import ConnectionConfigError
from mirror_worker.api import (
    ConfigError, PlaceholderRule, connection_settings, consumer_settings, producer_settings, settings_from_connection,
)


class KafkaHook(KafkaBaseHook):
    """Admin, consumer and producer clients with the mirror's delivery settings (acks=all, manual commits)."""

    def __init__(self, kafka_conn_id: str | None = None, *, kafka_config_id: str | None = None, **kwargs) -> None:
        # kafka_config_id: the official hooks' name for it, which Airflow passes (conn_name_attr).
        super().__init__(kafka_config_id=kafka_conn_id or kafka_config_id or self.default_conn_name, **kwargs)
        self._settings: dict[str, str] | None = None

    @property
    def kafka_conn_id(self) -> str:
        return self.kafka_config_id

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
            # The connection's login and password are the SASL credentials (mirror_worker/config/security.py).
            self._settings = settings_from_connection(conn.login, conn.password, extras, self.where)
        return dict(self._settings)

    def consumer_config(self, group_id: str) -> dict[str, str]:
        return {"group.id": group_id, **consumer_settings(self.client_settings(), self.where, PlaceholderRule.connection())}

    def producer_config(self, queue_size: int = 10_000) -> dict[str, str]:
        return producer_settings(self.client_settings(), self.where, queue_size,
                                 placeholders=PlaceholderRule.connection())

    def admin_config(self) -> dict[str, str]:
        return connection_settings(self.client_settings())

    @cached_property
    def get_conn(self):
        """The admin client, as KafkaBaseHook.get_conn, built from the checked settings."""
        return self.get_admin_client()

    def get_admin_client(self):
        from mirror_worker.api import admin_client

        return admin_client(self.admin_config())

    def get_consumer(self, group_id: str):
        from mirror_worker.api import consumer

        return consumer(self.consumer_config(group_id))

    def get_producer(self):
        from mirror_worker.api import producer

        return producer(self.producer_config())

    def test_connection(self) -> tuple[bool, str]:
        try:
            self.consumer_config("airflow-test-connection")  # every extra checked by librdkafka first
            metadata = self.get_admin_client().list_topics(timeout=10)
        except ConfigError as exc:
            return False, str(exc)
        except Exception as exc:  # the UI shows the message: any client error is a failed test
            return False, f"{self.where}: {exc.__class__.__name__}: {exc}"
        return True, f"connected: cluster {metadata.cluster_id}, {len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s)"

"""SchemaRegistryHook: a confluent-kafka SchemaRegistryClient from an `http` connection.

Host (with scheme, or `schema` as the scheme), port, optional path in the extra `path` (e.g.
`/apis/ccompat/v7`), login/password as basic auth. The extra's other keys are the registry's settings as
the worker reads them (mirror_worker/config/registry.py: `bearer.auth.token`, `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, ...), placeholders under the connection rule. An http://
registry (also a host without a scheme) off loopback, or credentials over http://, need
`"allow-insecure": ["http-registry"]` in the extra (mirror_worker/config/posture.py).
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from mirror_airflow.exceptions import ConnectionConfigError
from mirror_worker.api import ConfigError, allowed_insecure, registry_from_connection


class SchemaRegistryHook(BaseHook):
    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = "schema_registry_default"
    conn_type = "http"
    hook_name = "Schema registry (Confluent API)"

    def __init__(self, schema_registry_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.schema_registry_conn_id = schema_registry_conn_id

    def client_config(self) -> dict:
        """confluent-kafka SchemaRegistryClient config: url, auth and TLS, built by the worker's own code."""
        conn = self.get_connection(self.schema_registry_conn_id)
        where = f"Airflow connection {self.schema_registry_conn_id!r}"
        if not conn.host:
            raise ConnectionConfigError(f"{where}: host is required (the schema registry's address)")
        host = conn.host if "://" in conn.host else f"{conn.schema or 'http'}://{conn.host}"
        url = f"{host}:{conn.port}" if conn.port else host
        extra = dict(conn.extra_dejson or {})
        allowed = allowed_insecure(extra.pop("allow-insecure", None), where)
        path = extra.pop("path", None)
        if path:
            url = f"{url.rstrip('/')}/{str(path).lstrip('/')}"
        if conn.login and "${" in conn.login:
            raise ConfigError(f"{where}: login: placeholders are not resolved here (the login is shown in clear)")
        if conn.login:
            if "basic.auth.user.info" in extra:
                raise ConfigError(f"{where}: basic.auth.user.info is set both in extra and as the login/password")
            extra["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        return registry_from_connection(url, extra, allowed, where)

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

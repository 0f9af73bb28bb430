"""The registry and REST API hooks refuse plain http:// off loopback unless the connection names it (issue 46)."""

from __future__ import annotations

import json
import logging

import pytest
from mirror_airflow.hooks.airflow_api import AirflowApi, api_from_connection
from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

from mirror_worker.exceptions import ConfigError


def _connection(monkeypatch, conn_id: str, **body) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "http", **body}))


def test_the_api_hook_refuses_http_off_loopback_even_by_default_and_accepts_it_named(monkeypatch):
    from airflow.sdk import BaseHook

    _connection(monkeypatch, "api_noscheme", host="airflow-apiserver", port=8080, login="admin", password="Adm-Pw-1")
    with pytest.raises(ConfigError) as err:
        AirflowApi.from_connection(BaseHook.get_connection("api_noscheme"))
    assert str(err.value) == ("Airflow connection 'api_noscheme': the Airflow REST API over http:// (its password in "
                              "clear) refused; add http-api to allow-insecure to accept it")
    with pytest.raises(ConfigError):  # refused, not taken for a missing connection (the pause check stays on)
        api_from_connection("api_noscheme", logging.getLogger("t"))
    _connection(monkeypatch, "api_named", host="airflow-apiserver", port=8080, login="admin", password="Adm-Pw-1",
                extra={"allow-insecure": ["http-api"]})
    assert AirflowApi.from_connection(BaseHook.get_connection("api_named")).base_url == "http://airflow-apiserver:8080"
    _connection(monkeypatch, "api_tls", host="https://airflow.example", login="admin", password="Adm-Pw-1")
    assert AirflowApi.from_connection(BaseHook.get_connection("api_tls")).base_url == "https://airflow.example"


def test_the_registry_hook_refuses_http_off_loopback_and_keeps_loopback(monkeypatch):
    _connection(monkeypatch, "reg_far", host="registry.example", port=8081)
    with pytest.raises(ConfigError, match="^Airflow connection 'reg_far': a schema registry over http:// refused; "
                                          "add http-registry to allow-insecure to accept it$"):
        SchemaRegistryHook("reg_far").client_config()
    _connection(monkeypatch, "reg_local", host="127.0.0.1", port=8081)
    assert SchemaRegistryHook("reg_local").client_config()["url"] == "http://127.0.0.1:8081"

"""Schema-registry authentication as settings of their own (issue 46 item 2, config/registry.py): basic auth or a
bearer token from placeholders under the secrets-directory rule, a CA and a client certificate; never in a URL,
argv or a repr; one piece of code builds the registry client for the worker, sync-schemas, the hook and Spark."""

from __future__ import annotations

import json

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.config.spec import select_mirror
from mirror_worker.exceptions import ConfigError

BASE = {"name": "m", "sources": [{"name": "dc1", "consumer": {"bootstrap.servers": "h:1"}}],
        "producer": {"bootstrap.servers": "h:2"}, "whitelist": "t", "group_id": "g"}
PASSWORD = "Reg-Pw-8812"
TOKEN = "tok-5f1e-secret"


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "registry.properties").write_text(f"source.user.info=mirror:{PASSWORD}\nsource.password={PASSWORD}\n")
    (directory / "destination-token").write_text(TOKEN + "\n")
    monkeypatch.setenv("MIRROR_SECRETS_DIRS", str(directory))
    return directory


def _spec(tmp_path, source: dict, destination: dict) -> object:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "g", "source": {"name": "dc1", "kafka": {"bootstrap.servers": "h:1"}, **source},
        "destination": {"kafka": {"bootstrap.servers": "h:2"}, **destination},
        "mirrors": [{"name": "m", "whitelist": "t"}]}]}))
    return spec


def test_a_spec_gives_registry_auth_and_tls_from_placeholders(tmp_path, secrets):
    spec = _spec(tmp_path, {
        "schema-registry-url": "https://reg-src:8081",
        "schema-registry": {"basic.auth.user.info": f"${{file:{secrets}/registry.properties:source.user.info}}",
                            "ssl.ca.location": "/etc/mirror/ca.pem"},
    }, {
        "schema-registry-url": "https://reg-dst:8081",
        "schema-registry": {"bearer.auth.token": f"${{directory:{secrets}:destination-token}}",
                            "bearer.auth.logical.cluster": "lsrc-1", "ssl.certificate.location": "/c.pem",
                            "ssl.key.location": "/k.pem"},
    })
    config = select_mirror(spec, "m")
    source = config.source_registry(config.sources[0])
    assert {k: source[k] for k in ("url", "basic.auth.user.info", "ssl.ca.location")} == {
        "url": "https://reg-src:8081", "basic.auth.user.info": f"mirror:{PASSWORD}", "ssl.ca.location": "/etc/mirror/ca.pem"}
    destination = config.destination_registry
    assert destination["bearer.auth.token"] == TOKEN and destination["bearer.auth.credentials.source"] == "STATIC_TOKEN"
    assert PASSWORD not in repr(config) and TOKEN not in repr(config)
    # A config rebuilt from JSON (a --num.streams child, a Spark executor) keeps them.
    assert type(config).model_validate_json(config.model_dump_json()).destination_registry == destination


def test_the_registry_client_is_built_from_those_settings(tmp_path, secrets):
    from mirror_worker.schemas.registry import Registry

    spec = _spec(tmp_path, {"schema-registry-url": "https://reg-src:8081", "schema-registry": {
        "basic.auth.user.info": f"${{file:{secrets}/registry.properties:source.user.info}}"}},
                 {"schema-registry-url": "https://reg-dst:8081"})
    config = select_mirror(spec, "m")
    client = Registry(config.source_registry(config.sources[0]), "source 'dc1'")._client
    assert client._rest_client.auth == ("mirror", PASSWORD)


@pytest.mark.parametrize("registry, message", [
    ({"basic.auth.user.info": "${file:/etc/passwd:root}"},
     "source 'dc1' schema-registry: basic.auth.user.info: /etc/passwd is outside the secrets directories"),
    ({"basic.auth.user.info": "${env:HOME}"}, "basic.auth.user.info: ${env:...} is not resolved in specs while "
                                              "MIRROR_SECRETS_DIRS is set"),
    ({"basic.auth.user.infos": "a:b"}, "schema-registry: basic.auth.user.infos: unknown key"),
    ({"bearer.auth.token": "abcd"}, "bearer.auth.token needs bearer.auth.logical.cluster"),
    ({"ssl.key.location": "/k.pem"}, "ssl.key.location needs ssl.certificate.location"),
    ({"basic.auth.user.info": "no-colon"}, "basic.auth.user.info must be USER:PASSWORD"),
])
def test_bad_registry_settings_are_one_line(tmp_path, secrets, registry, message):
    spec = _spec(tmp_path, {"schema-registry-url": "https://reg-src", "schema-registry": registry},
                 {"schema-registry-url": "https://reg-dst"})
    with pytest.raises(ConfigError) as caught:
        select_mirror(spec, "m")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_credentials_in_a_registry_url_are_refused_without_echoing_them(tmp_path):
    spec = _spec(tmp_path, {"schema-registry-url": f"https://mirror:{PASSWORD}@reg-src"},
                 {"schema-registry-url": "https://reg-dst"})
    with pytest.raises(ConfigError) as caught:
        select_mirror(spec, "m")
    assert str(caught.value).endswith("schema-registry-url: credentials in a schema registry URL are refused: give "
                                      "them as basic.auth.user.info in the registry's settings, from a ${file:...} "
                                      "placeholder")
    assert PASSWORD not in str(caught.value)
    with pytest.raises(ConfigError, match="credentials in a schema registry URL are refused"):
        build_mirror_config({**BASE, "schema_registry_url": f"http://u:{PASSWORD}@127.0.0.1:1",
                             "destination_schema_registry_url": "http://127.0.0.1:2"})


def test_credentials_over_http_need_the_opt_in_even_on_loopback(tmp_path):
    registry = {"schema-registry-url": "http://127.0.0.1:8081", "schema-registry": {"basic.auth.user.info": "u:pwpw"}}
    with pytest.raises(ConfigError, match="a schema registry over http:// refused; add http-registry"):
        select_mirror(_spec(tmp_path, registry, {"schema-registry-url": "http://127.0.0.1:8082"}), "m")
    config = select_mirror(_spec(tmp_path, {**registry, "allow-insecure": ["http-registry"]},
                                 {"schema-registry-url": "http://127.0.0.1:8082"}), "m")
    assert config.source_registry(config.sources[0])["basic.auth.user.info"] == "u:pwpw"


def test_settings_without_a_url_are_refused(tmp_path):
    spec = _spec(tmp_path, {}, {"schema-registry": {"ssl.ca.location": "/ca.pem"}})
    with pytest.raises(ConfigError, match="destination schema registry settings without a destination schema "
                                          "registry URL"):
        select_mirror(spec, "m")


def test_the_classic_flags_take_registry_auth_from_the_properties_not_argv(tmp_path, secrets):
    from mirror_worker.commands.cli import config_from_args, parse_args

    consumer = tmp_path / "dc1.properties"
    consumer.write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\n"
                        f"schema.registry.basic.auth.user.info=${{file:{secrets}/registry.properties:source.user.info}}\n"
                        "schema.registry.ssl.ca.location=/etc/mirror/ca.pem\n")
    producer = tmp_path / "dest.properties"
    producer.write_text("bootstrap.servers=127.0.0.1:2\n"
                        f"schema.registry.bearer.auth.token=${{directory:{secrets}:destination-token}}\n"
                        "schema.registry.bearer.auth.logical.cluster=lsrc-2\n")
    argv = ["--consumer.config", str(consumer), "--producer.config", str(producer), "--whitelist", "t",
            "--schema.registry.url", "https://src:8081", "--destination.schema.registry.url=https://dst:8081"]
    config = config_from_args(parse_args(argv))
    assert config.source_registry(config.sources[0])["basic.auth.user.info"] == f"mirror:{PASSWORD}"
    assert config.source_registry(config.sources[0])["ssl.ca.location"] == "/etc/mirror/ca.pem"
    assert config.destination_registry["bearer.auth.token"] == TOKEN
    assert "schema.registry.ssl.ca.location" not in config.sources[0].consumer  # not a librdkafka key
    assert PASSWORD not in " ".join(argv) and PASSWORD not in repr(config)


def test_the_airflow_hook_uses_the_same_code_under_the_connection_rule(tmp_path, secrets, monkeypatch):
    from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

    (secrets / "reg-key.pem").write_text("k")
    monkeypatch.setenv("AIRFLOW_CONN_REG_AUTH", json.dumps({
        "conn_type": "http", "host": "https://reg.example", "login": "mirror",
        "password": f"${{file:{secrets}/registry.properties:source.password}}",
        "extra": {"ssl.ca.location": "/etc/ssl/reg-ca.pem", "ssl.certificate.location": str(secrets / "reg-key.pem"),
                  "ssl.key.location": str(secrets / "reg-key.pem")}}))
    config = SchemaRegistryHook("reg_auth").client_config()
    assert config["basic.auth.user.info"] == f"mirror:{PASSWORD}" and config["url"] == "https://reg.example"
    assert config["ssl.ca.location"] == "/etc/ssl/reg-ca.pem"
    monkeypatch.setenv("AIRFLOW_CONN_REG_HOSTKEY", json.dumps({
        "conn_type": "http", "host": "https://reg.example",
        "extra": {"ssl.certificate.location": "/etc/ssl/host.pem", "ssl.key.location": "/etc/ssl/host.key"}}))
    with pytest.raises(ConfigError, match="ssl.certificate.location: /etc/ssl/host.pem is outside the secrets "
                                          "directories"):
        SchemaRegistryHook("reg_hostkey").client_config()
    monkeypatch.setenv("AIRFLOW_CONN_REG_ENV", json.dumps({
        "conn_type": "http", "host": "https://reg.example", "extra": {"bearer.auth.token": "${env:HOME}",
                                                                     "bearer.auth.logical.cluster": "c"}}))
    with pytest.raises(ConfigError, match=r"\$\{env:...\} is not resolved in an Airflow connection"):
        SchemaRegistryHook("reg_env").client_config()

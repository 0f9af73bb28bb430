"""The security posture: what is refused without a named opt-in (config/posture.py, issue 46 item 3)."""

from __future__ import annotations

import logging

import pytest

from mirror_worker.config import posture
from mirror_worker.config.librdkafka import consumer_settings, settings_from_connection
from mirror_worker.config.spec import select_mirror
from mirror_worker.exceptions import ConfigError

SASL = {"sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "pw-1234"}


@pytest.mark.parametrize("settings, needs", [
    ({"security.protocol": "PLAINTEXT"}, []),
    ({}, []),
    ({"security.protocol": "SASL_SSL", **SASL}, []),
    ({"security.protocol": "SASL_PLAINTEXT", **SASL}, ["cleartext-sasl"]),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512"}, ["cleartext-sasl"]),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"}, ["cleartext-sasl"]),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI"}, []),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}, ["no-hostname-verification"]),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "https"}, []),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, ["no-certificate-verification"]),
])
def test_client_weaknesses(settings, needs):
    assert posture.client_weaknesses(settings) == needs


@pytest.mark.parametrize("url, needs", [
    ("https://reg.example/apis", None),
    ("http://127.0.0.1:8081/apis/ccompat/v7", None),
    ("http://localhost:8081", None),
    ("http://[::1]:8081", None),
    ("http://registry-source:8080/apis/ccompat/v7", "http-registry"),
    ("http://10.0.0.5:8081", "http-registry"),
    (None, None),
])
def test_url_weakness(url, needs):
    assert posture.url_weakness(url, "http-registry") == needs


def test_refused_with_one_line_naming_the_opt_in_accepted_and_logged_once_with_it(caplog):
    settings = {"bootstrap.servers": "b:1", "security.protocol": "SASL_PLAINTEXT", **SASL}
    with pytest.raises(ConfigError) as err:
        consumer_settings(settings, "w1")
    assert str(err.value) == ("w1: SASL credentials over SASL_PLAINTEXT (sent in clear) refused; "
                              "add cleartext-sasl to allow-insecure to accept it")
    with caplog.at_level(logging.WARNING, logger="mirror_worker.config.posture"):
        for _ in range(2):
            out = consumer_settings({**settings, "allow-insecure": "cleartext-sasl"}, "w1")
    assert "allow-insecure" not in out and out["security.protocol"] == "SASL_PLAINTEXT"
    assert [r.getMessage() for r in caplog.records] == [
        "w1: insecure setting accepted (allow-insecure: cleartext-sasl): SASL credentials over SASL_PLAINTEXT "
        "(sent in clear)"]


def test_an_empty_hostname_algorithm_is_none_and_refused():
    with pytest.raises(ConfigError, match="^w: ssl.endpoint.identification.algorithm none .* refused; add "
                                          "no-hostname-verification to allow-insecure"):
        consumer_settings({"bootstrap.servers": "b:1", "security.protocol": "SSL",
                           "ssl.endpoint.identification.algorithm": ""}, "w")


def test_unknown_opt_in_is_refused():
    with pytest.raises(ConfigError, match="^w: allow-insecure: unknown 'everything'"):
        posture.allowed_insecure(["everything"], "w")


def test_a_connection_keeps_its_opt_in_for_the_hooks_second_pass():
    extra = {"bootstrap.servers": "b:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "allow-insecure": ["cleartext-sasl"]}
    settings = settings_from_connection("u", "pw-1234", extra, "k")
    assert settings["allow-insecure"] == "cleartext-sasl"
    assert consumer_settings(settings, "k")["sasl.username"] == "u"
    with pytest.raises(ConfigError, match="^k: SASL credentials over SASL_PLAINTEXT"):
        settings_from_connection("u", "pw-1234", {k: v for k, v in extra.items() if k != "allow-insecure"}, "k")


def _spec(tmp_path, source_extra: str = "", registry: str = "http://registry-source:8080/apis/ccompat/v7"):
    spec = tmp_path / "m.yaml"
    spec.write_text(f"""
groups:
  - name: g
    source:
      name: src
      kafka: {{bootstrap.servers: "127.0.0.1:1", security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN,
              sasl.username: u, sasl.password: pw-1234}}
      schema-registry-url: {registry}
      {source_extra}
    destination: {{kafka: {{bootstrap.servers: "127.0.0.1:2"}}, schema-registry-url: "http://127.0.0.1:8082"}}
    mirrors: [{{name: m, whitelist: "x"}}]
""")
    return spec


def test_a_spec_names_its_opt_ins_on_the_cluster(tmp_path):
    with pytest.raises(ConfigError, match="source 'src' schema-registry-url: a schema registry over http:// refused"):
        select_mirror(_spec(tmp_path), "m")
    with pytest.raises(ConfigError, match="source 'src' kafka: SASL credentials over SASL_PLAINTEXT"):
        select_mirror(_spec(tmp_path, "allow-insecure: [http-registry]"), "m")
    config = select_mirror(_spec(tmp_path, "allow-insecure: [http-registry, cleartext-sasl]"), "m")
    assert config.sources[0].consumer["security.protocol"] == "SASL_PLAINTEXT"
    assert "allow-insecure" not in config.sources[0].consumer

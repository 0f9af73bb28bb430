"""Security settings: Java keys onto librdkafka's, secrets from files and connections, redaction."""

from __future__ import annotations

import json
import shutil
import subprocess
import logging

import pytest

from mirror_worker import redaction
from mirror_worker.config.librdkafka import consumer_settings, producer_settings, settings_from_connection
from mirror_worker.config.model import build_mirror_config
from mirror_worker.config.placeholders import resolve_placeholders
from mirror_worker.config.security import java_security_settings, translate_security
from mirror_worker.config.spec import select_mirror
from mirror_worker.exceptions import ConfigError
from mirror_worker.logs import JsonFormatter
from tests.secure_kafka import make_certificates

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="mirror" password="pa55-w0rd\\"q";')


@pytest.fixture(autouse=True)
def _empty_registry():
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"))


# ------------------------------------------------------------------ translation
def test_scram_jaas_config_becomes_sasl_username_and_password():
    out = translate_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.jaas.config": SCRAM_JAAS}, "w")
    assert out == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                   "sasl.username": "mirror", "sasl.password": 'pa55-w0rd"q'}


def test_plain_jaas_config_without_quotes_and_trailing_blanks():
    out = translate_security({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                                  "required username=alice password=al1ce-pw ;\n"}, "w")
    assert (out["sasl.username"], out["sasl.password"]) == ("alice", "al1ce-pw")


@pytest.mark.parametrize("jaas, expected", [
    ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
     "w: sasl.jaas.config: Krb5LoginModule is not translated; set librdkafka's sasl.kerberos.* keys instead"),
    ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
     "w: sasl.jaas.config: OAuthBearerLoginModule is not translated; set librdkafka's sasl.oauthbearer.* keys instead"),
    ('org.apache.kafka.common.security.scram.ScramLoginModule required username="u";',
     "w: sasl.jaas.config: ScramLoginModule needs password"),
    ("garbage", 'w: sasl.jaas.config: expected `<LoginModule class> required key="value" ...;`'),
])
def test_untranslatable_jaas_config_names_the_key(jaas, expected):
    with pytest.raises(ConfigError) as err:
        translate_security({"sasl.jaas.config": jaas}, "w")
    assert str(err.value) == expected


def test_pem_truststore_and_keystore_map_onto_locations(certs):
    out = translate_security({
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker_pem), "ssl.key.password": "kp-1234",
        "ssl.endpoint.identification.algorithm": "", "ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLS",
    }, "w")
    assert out == {"ssl.ca.location": str(certs.ca_pem), "ssl.key.location": str(certs.broker_pem),
                   "ssl.certificate.location": str(certs.broker_pem), "ssl.key.password": "kp-1234",
                   "ssl.endpoint.identification.algorithm": "none"}


def test_store_type_is_sniffed_when_not_declared(certs):
    assert translate_security({"ssl.truststore.location": str(certs.ca_pem)}, "w") == {
        "ssl.ca.location": str(certs.ca_pem)}


def test_pkcs12_truststore_is_converted_to_pem(certs):
    out = translate_security({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(certs.ca_p12),
                              "ssl.truststore.password": certs.truststore_password}, "w")
    assert set(out) == {"ssl.ca.pem"}
    assert out["ssl.ca.pem"] == certs.ca_pem.read_text()


def test_pkcs12_truststore_with_a_wrong_password_is_a_clear_error(certs):
    with pytest.raises(ConfigError, match=r"^w: ssl.truststore.location: .* is not a PKCS12 truststore, "
                                          r"or ssl.truststore.password is wrong$"):
        translate_security({"ssl.truststore.location": str(certs.ca_p12), "ssl.truststore.password": "nope"}, "w")


def test_jks_stores_are_refused_with_the_way_out(tmp_path):
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 60)
    with pytest.raises(ConfigError) as err:
        translate_security({"ssl.truststore.location": str(jks), "ssl.truststore.password": "changeit"}, "f")
    assert str(err.value).startswith("f: ssl.truststore.location: librdkafka cannot read a JKS truststore; export")
    assert "ssl.ca.location" in str(err.value) and "changeit" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^f: ssl.keystore.location: librdkafka cannot read a JKS keystore; "
                                          r"convert it to PKCS12"):
        translate_security({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks)}, "f")


def test_pkcs12_keystore_and_inline_pem_pass_to_librdkafka():
    out = translate_security({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                              "ssl.keystore.password": "ks-pass", "ssl.keystore.certificate.chain": "CERT",
                              "ssl.keystore.key": "KEY", "ssl.truststore.certificates": "CA"}, "w")
    assert out == {"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "ks-pass",
                   "ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY", "ssl.ca.pem": "CA"}


def test_java_style_consumer_file_is_accepted_by_librdkafka(certs):
    settings = consumer_settings({
        "bootstrap.servers": "127.0.0.1:1", "group.id": "g", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": SCRAM_JAAS,
        "ssl.truststore.location": str(certs.ca_pem), "ssl.truststore.type": "PEM",
    }, "--consumer.config c.properties")
    assert settings["sasl.username"] == "mirror" and settings["ssl.ca.location"] == str(certs.ca_pem)


# ------------------------------------------------------------------ secrets from files
def test_file_directory_and_env_placeholders(tmp_path, monkeypatch):
    (tmp_path / "secrets.properties").write_text("source.password=from-file-pw\n# c\nother=x\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "token").write_text("from-dir-token\n")
    monkeypatch.setenv("MIRROR_TEST_PW", "from-env-pw")
    out = resolve_placeholders({
        "sasl.password": f"${{file:{tmp_path}/secrets.properties:source.password}}",
        "sasl.jaas.config": f'X required username="u" password="${{directory:{tmp_path}/dir:token}}";',
        "ssl.key.password": "${env:MIRROR_TEST_PW}",
        "config.providers": "file", "config.providers.file.class": "org.apache...FileConfigProvider",
        "plain": "no-placeholder",
    }, "w")
    assert out == {"sasl.password": "from-file-pw", "sasl.jaas.config": 'X required username="u" password="from-dir-token";',
                   "ssl.key.password": "from-env-pw", "plain": "no-placeholder"}
    assert redaction.redact_text("a from-file-pw b from-dir-token from-env-pw") == \
        "a [redacted] b [redacted] [redacted]"


@pytest.mark.parametrize("value, message", [
    ("${file:/nonexistent/s.properties:k}", "w: sasl.password: secrets file /nonexistent/s.properties not found or unreadable"),
    ("${file:{tmp}/s.properties:missing}", "w: sasl.password: no key 'missing' in secrets file {tmp}/s.properties"),
    ("${vault:secret/x:k}", "w: sasl.password: unsupported config provider 'vault'; use file, directory or env"),
    ("${env:MIRROR_TEST_SURELY_UNSET}", "w: sasl.password: environment variable MIRROR_TEST_SURELY_UNSET (from ${env:...}) is not set"),
    ("${directory:{tmp}:../etc}", "w: sasl.password: '../etc' must be a file name inside {tmp}"),
])
def test_placeholder_errors_name_the_key(tmp_path, value, message):
    (tmp_path / "s.properties").write_text("k=v-secret\n")
    with pytest.raises(ConfigError) as err:
        resolve_placeholders({"sasl.password": value.replace("{tmp}", str(tmp_path))}, "w")
    assert str(err.value) == message.replace("{tmp}", str(tmp_path))


def test_spec_destination_with_file_placeholder(tmp_path, certs):
    (tmp_path / "s.properties").write_text("dest.password=spec-dest-pw\n")
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(f"""
groups:
  - name: g
    source: {{name: src, kafka: {{bootstrap.servers: "127.0.0.1:1"}}}}
    destination:
      kafka:
        bootstrap.servers: "127.0.0.1:2"
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-256
        sasl.username: dest
        sasl.password: "${{file:{tmp_path}/s.properties:dest.password}}"
        ssl.ca.location: "{certs.ca_pem}"
    mirrors: [{{name: m, whitelist: "x"}}]
""")
    config = select_mirror(spec, "m")
    assert config.producer["sasl.password"] == "spec-dest-pw"
    assert "spec-dest-pw" not in repr(config) and "spec-dest-pw" not in str(config)


# ------------------------------------------------------------------ Airflow connections
def test_settings_from_connection_login_and_password_become_sasl_credentials():
    out = settings_from_connection("mirror", "conn-pw-123", {
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "enable.ssl.certificate.verification": True,
    })
    assert out == {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                   "enable.ssl.certificate.verification": "true", "sasl.username": "mirror", "sasl.password": "conn-pw-123"}
    assert redaction.redact_text("x conn-pw-123") == "x [redacted]"


def test_settings_from_connection_extra_only_and_errors():
    extra = {"bootstrap.servers": "b:9092", "sasl.jaas.config": SCRAM_JAAS, "security.protocol": "SASL_SSL"}
    assert settings_from_connection(None, None, extra)["sasl.username"] == "mirror"
    with pytest.raises(ConfigError, match="^kafka_src: a login or password needs security.protocol SASL_SSL"):
        settings_from_connection("u", "p-123", {"bootstrap.servers": "b:9092"}, "kafka_src")
    with pytest.raises(ConfigError, match="^connection: sasl.password is set both in extra and as the connection's password$"):
        settings_from_connection(None, "p-123", {**extra, "sasl.password": "other"})
    with pytest.raises(ConfigError, match="^connection: bootstrap.servers is required in extra$"):
        settings_from_connection(None, None, {})


# ------------------------------------------------------------------ redaction
def test_redact_settings_by_key_nested():
    shown = redaction.redact_settings({"bootstrap.servers": "b", "sasl.password": "x", "sasl.username": "u",
                                       "ssl.key.pem": "K", "ssl.keystore.password": "y", "basic.auth.user.info": "a:b",
                                       "sasl.jaas.config": SCRAM_JAAS, "sasl.oauthbearer.client.secret": "s",
                                       "nested": {"ssl.key.password": "z"}, "empty.password": ""})
    assert shown == {"bootstrap.servers": "b", "sasl.password": "[redacted]", "sasl.username": "u",
                     "ssl.key.pem": "[redacted]", "ssl.keystore.password": "[redacted]",
                     "basic.auth.user.info": "[redacted]", "sasl.jaas.config": "[redacted]",
                     "sasl.oauthbearer.client.secret": "[redacted]", "nested": {"ssl.key.password": "[redacted]"},
                     "empty.password": ""}


def test_redact_text_cuts_registered_secrets_and_inline_pairs():
    redaction.register_secrets({"sasl.jaas.config": SCRAM_JAAS, "sasl.password": "abc", "ssl.key.password": "k3y-pass"})
    assert redaction.redact_text('error with pa55-w0rd\\"q and k3y-pass') == "error with [redacted] and [redacted]"
    # Too short to cut out of free text, but an echoed pair is still cut.
    assert redaction.redact_text("abc sasl.password=abc") == "abc sasl.password=[redacted]"
    assert redaction.redact_text('x password="zz top" y') == "x password=[redacted] y"


def test_json_log_lines_never_carry_a_secret():
    redaction.register_secrets({"sasl.password": 'q"uo\\te-pw'})
    record = logging.makeLogRecord({"msg": 'failed with q"uo\\te-pw', "levelname": "WARNING", "name": "t"})
    record.error = 'also q"uo\\te-pw'
    line = JsonFormatter().format(record)
    assert "uo" not in line and json.loads(line)["msg"] == "failed with [redacted]"


def test_librdkafka_rejection_of_a_secret_value_is_redacted():
    with pytest.raises(ConfigError) as err:
        producer_settings({"bootstrap.servers": "b", "security.protocol": "SSL",
                           "ssl.key.pem": "-----BEGIN PRIVATE KEY-----\nS3CRETKEY\n-----END PRIVATE KEY-----",
                           "ssl.certificate.pem": "nope"}, "p", 100)
    assert "S3CRETKEY" not in str(err.value) and str(err.value).startswith("p: ")


def test_validation_errors_and_reprs_hide_client_settings():
    fields = {"name": "m", "group_id": "g", "whitelist": "x",
              "sources": [{"name": "s", "consumer": {"bootstrap.servers": "b", "sasl.password": "model-pw-1"}}],
              "producer": {"bootstrap.servers": "b", "sasl.password": "model-pw-2"}, "queue_size": 1}
    with pytest.raises(ConfigError) as err:
        build_mirror_config(fields)
    assert "model-pw" not in str(err.value)
    config = build_mirror_config({**fields, "queue_size": 100})
    assert "model-pw" not in repr(config) and "model-pw" not in str(config.sources)
    dumped = redaction.redact_settings(config.model_dump())
    assert dumped["sources"][0]["consumer"]["sasl.password"] == "[redacted]" and "model-pw" not in str(dumped)
    # A config rebuilt from JSON (a --num.streams child) registers its secrets again.
    redaction.forget_secrets()
    type(config).model_validate_json(config.model_dump_json())
    assert redaction.redact_text("model-pw-1 model-pw-2") == "[redacted] [redacted]"


# ------------------------------------------------------------------ back to Java keys (Spark's Kafka client)
def test_java_security_settings_round_trip(certs):
    librdkafka = translate_security({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS,
        "ssl.truststore.location": str(certs.ca_pem), "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker_pem), "ssl.key.password": "kp-1234",
        "ssl.endpoint.identification.algorithm": "",
    }, "w")
    java = java_security_settings({**librdkafka, "linger.ms": "5"})
    assert java == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="mirror" password="pa55-w0rd\\"q";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker_pem), "ssl.key.password": "kp-1234",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert translate_security(java, "w") == librdkafka


def test_spark_options_carry_java_security_keys():
    from spark_jobs.common.job_config import JobTarget

    target = JobTarget("s:1", "d:2", ("t",), source_settings={
        "bootstrap.servers": "s:1", "group.id": "g", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p-123"})
    assert target.spark_options("source") == {
        "kafka.bootstrap.servers": "s:1", "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="u" password="p-123";',
        "kafka.isolation.level": "read_committed"}
    assert target.spark_options("destination") == {"kafka.bootstrap.servers": "d:2",
                                                   "kafka.isolation.level": "read_committed"}


@pytest.mark.skipif(not shutil.which("keytool"), reason="keytool (JDK) not installed")
def test_truststores_made_by_keytool(certs, tmp_path):
    """What MirrorMaker users really have: keytool's PKCS12 is converted, its JKS refused."""
    for kind in ("PKCS12", "JKS"):
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(certs.ca_pem),
                        "-keystore", str(tmp_path / f"ts.{kind}"), "-storetype", kind, "-storepass", "changeit"],
                       check=True, capture_output=True)
    out = translate_security({"ssl.truststore.location": str(tmp_path / "ts.PKCS12"),
                              "ssl.truststore.password": "changeit"}, "w")
    assert out == {"ssl.ca.pem": certs.ca_pem.read_text()}
    with pytest.raises(ConfigError, match="librdkafka cannot read a JKS truststore"):
        translate_security({"ssl.truststore.location": str(tmp_path / "ts.JKS")}, "w")


@pytest.mark.parametrize("text, expected", [
    # An echoed setting ends its line or field: cut.
    ("  sasl.password: hunter2\n  next: 1", "  sasl.password: [redacted]\n  next: 1"),
    ("{sasl.password: hunter2, x: y}", "{sasl.password: [redacted], x: y}"),
    ("bad line sasl.password: hunter2", "bad line sasl.password: [redacted]"),
    ("sasl.password: hunter2  # the old one", "sasl.password: [redacted]  # the old one"),
    ('"token": "abc-123"', '"token": [redacted]'),
    # Our own lines name a secret key, then say what is wrong with it: kept whole (they used to read
    # "sasl.password: [redacted] (set it)", "basic.auth.user.info: [redacted] be USER:PASSWORD").
    ("mirror_worker: spec.yaml: basic.auth.user.info: must be USER:PASSWORD",
     "mirror_worker: spec.yaml: basic.auth.user.info: must be USER:PASSWORD"),
    ("basic.auth.user.info and bearer.auth.token: give only one of them",
     "basic.auth.user.info and bearer.auth.token: give only one of them"),
    ("sasl.password: missing (set it)", "sasl.password: missing (set it)"),
])
def test_a_key_colon_pair_is_cut_only_when_its_value_ends_the_field(text, expected):
    assert redaction.redact_text(text) == expected

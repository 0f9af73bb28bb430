"""Placeholders only where the host's operator allows them (config/placeholders.py, issue 46 item 1)."""

from __future__ import annotations

import uuid

import pytest

from mirror_worker import redaction
from mirror_worker.config.librdkafka import settings_from_connection
from mirror_worker.config.placeholders import PlaceholderRule, resolve_placeholders
from mirror_worker.exceptions import ConfigError


@pytest.fixture
def secrets(tmp_path):
    """An allowlisted secrets directory with a properties file and a file per secret, and a file outside it."""
    allowed = tmp_path / "secrets"
    (allowed / "dir").mkdir(parents=True)
    (allowed / "s.properties").write_text("pw=allowed-pw-1\n")
    (allowed / "dir" / "token").write_text("allowed-token-1\n")
    (tmp_path / "outside.properties").write_text("pw=outside-pw-1\n")
    return allowed


def _env(allowed) -> dict:
    return {"MIRROR_SECRETS_DIRS": str(allowed)}


def test_inside_the_secrets_directory_file_and_directory_resolve(secrets):
    rule = PlaceholderRule.connection(_env(secrets))
    out = resolve_placeholders({"sasl.password": f"${{file:{secrets}/s.properties:pw}}",
                                "ssl.key.password": f"${{directory:{secrets}/dir:token}}"}, "c", rule)
    assert out == {"sasl.password": "allowed-pw-1", "ssl.key.password": "allowed-token-1"}


@pytest.mark.parametrize("value, message", [
    ("${file:{tmp}/outside.properties:pw}", "c: sasl.password: {tmp}/outside.properties is outside the secrets "
                                            "directories (MIRROR_SECRETS_DIRS): refused"),
    ("${file:{secrets}/../outside.properties:pw}", "c: sasl.password: {secrets}/../outside.properties is outside the "
                                                   "secrets directories (MIRROR_SECRETS_DIRS): refused"),
    ("${directory:{secrets}/..:outside.properties}", "c: sasl.password: {secrets}/../outside.properties is outside the "
                                                     "secrets directories (MIRROR_SECRETS_DIRS): refused"),
    ("${file:{secrets}/link:pw}", "c: sasl.password: {secrets}/link is outside the secrets directories "
                                  "(MIRROR_SECRETS_DIRS): refused"),
    ("${file:/proc/self/status:Uid}", "c: sasl.password: /proc/self/status is outside the secrets directories "
                                      "(MIRROR_SECRETS_DIRS): refused"),
    ("${env:HOME}", "c: sasl.password: ${env:...} is not resolved in an Airflow connection; put the secret in a "
                    "file under MIRROR_SECRETS_DIRS"),
])
def test_a_connection_reads_nothing_outside_the_secrets_directory(secrets, value, message):
    (secrets / "link").symlink_to(secrets.parent / "outside.properties")
    fill = lambda text: text.replace("{tmp}", str(secrets.parent)).replace("{secrets}", str(secrets))  # noqa: E731
    with pytest.raises(ConfigError) as err:
        resolve_placeholders({"sasl.password": fill(value)}, "c", PlaceholderRule.connection(_env(secrets)))
    assert str(err.value) == fill(message)


def test_without_a_secrets_directory_a_connection_resolves_no_placeholder(secrets):
    with pytest.raises(ConfigError) as err:
        resolve_placeholders({"sasl.password": f"${{file:{secrets}/s.properties:pw}}"}, "c",
                             PlaceholderRule.connection({}))
    assert str(err.value) == ("c: sasl.password: placeholders are off in an Airflow connection: the host names no "
                              "secrets directory (MIRROR_SECRETS_DIRS)")


@pytest.mark.parametrize("key", ["bootstrap.servers", "client.id"])
def test_never_in_bootstrap_servers_or_client_id_even_in_specs(secrets, key):
    with pytest.raises(ConfigError, match=f"^s: {key}: placeholders are not resolved here"):
        resolve_placeholders({key: f"${{file:{secrets}/s.properties:pw}}"}, "s", PlaceholderRule.spec({}))


def test_a_spec_is_held_to_the_secrets_directory_once_the_host_names_one(secrets, monkeypatch):
    monkeypatch.setenv("MIRROR_TEST_PW", "spec-env-pw")
    assert resolve_placeholders({"p": "${env:MIRROR_TEST_PW}"}, "s", PlaceholderRule.spec({})) == {"p": "spec-env-pw"}
    rule = PlaceholderRule.spec(_env(secrets))
    assert resolve_placeholders({"p": f"${{file:{secrets}/s.properties:pw}}"}, "s", rule) == {"p": "allowed-pw-1"}
    with pytest.raises(ConfigError, match="outside the secrets directories"):
        resolve_placeholders({"p": f"${{file:{secrets.parent}/outside.properties:pw}}"}, "s", rule)
    with pytest.raises(ConfigError, match=r"\$\{env:...\} is not resolved in specs while MIRROR_SECRETS_DIRS is set"):
        resolve_placeholders({"p": "${env:MIRROR_TEST_PW}"}, "s", rule)


def test_the_issues_connection_is_refused_with_one_line_and_nothing_resolved(monkeypatch):
    """The review's connection: login and client.id naming Airflow's own secrets."""
    monkeypatch.delenv("MIRROR_SECRETS_DIRS", raising=False)
    fernet = f"fernet-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", fernet)
    extra = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    for login, more in (("${env:AIRFLOW__CORE__FERNET_KEY}", {}),
                        ("u", {"client.id": "${env:AIRFLOW__CORE__FERNET_KEY}"}),
                        ("u", {"ssl.key.password": "${env:AIRFLOW__CORE__FERNET_KEY}"})):
        with pytest.raises(ConfigError) as err:
            settings_from_connection(login, "pw-123", {**extra, **more}, "Airflow connection 'k'")
        assert "\n" not in str(err.value) and fernet not in str(err.value)
        assert str(err.value).startswith("Airflow connection 'k': ")
    assert redaction.redact_text(fernet) == fernet  # never read, so never registered as a secret


def test_a_connection_neither_runs_code_nor_reads_key_files_outside_the_secrets_directory(secrets, monkeypatch):
    base = {"bootstrap.servers": "b:9093", "security.protocol": "SSL"}
    monkeypatch.delenv("MIRROR_SECRETS_DIRS", raising=False)
    for key in ("sasl.kerberos.kinit.cmd", "plugin.library.paths", "ssl.engine.location"):
        with pytest.raises(ConfigError, match=f"^k: {key} runs or loads code on the host: not accepted from a connection$"):
            settings_from_connection(None, None, {**base, key: "/tmp/x"}, "k")
    with pytest.raises(ConfigError, match="^k: ssl.key.location: a connection's key files are read only inside "
                                          "MIRROR_SECRETS_DIRS, which this host does not set$"):
        settings_from_connection(None, None, {**base, "ssl.key.location": f"{secrets}/dir/token"}, "k")
    monkeypatch.setenv("MIRROR_SECRETS_DIRS", str(secrets))
    with pytest.raises(ConfigError, match="^k: ssl.keystore.location: /etc/ssl/private/host.p12 is outside the secrets"):
        settings_from_connection(None, None, {**base, "ssl.keystore.location": "/etc/ssl/private/host.p12"}, "k")

"""Schema-registry client settings: the one place that says how to reach and authenticate to a registry, for
the worker, `sync-schemas`, the Airflow registry hook and the Spark jobs alike (issue 46, item 2).

A registry is a URL (`schema-registry-url`, `--schema.registry.url`) and these settings, spelled as
confluent-kafka's SchemaRegistryClient spells them:

    basic.auth.user.info          USER:PASSWORD, HTTP basic auth
    bearer.auth.token             a static bearer token (with bearer.auth.logical.cluster, as Confluent's
    bearer.auth.logical.cluster   client sends them; bearer.auth.identity.pool.id optional)
    bearer.auth.identity.pool.id
    ssl.ca.location               a CA bundle (PEM file, or a directory) to verify an https:// registry
    ssl.certificate.location      a client certificate (PEM) for mutual TLS
    ssl.key.location              its private key (PEM); ssl.key.password if the key is encrypted
    ssl.key.password

Where they are written: a spec's source or destination `schema-registry:` mapping; with the classic flags,
`schema.registry.`-prefixed keys of the side's `.properties` (`--consumer.config` for the source registry,
`--producer.config` for the destination's: a password never needs to be on the command line); an Airflow
`http` connection's login/password and extra. Values take the same `${file:...}`/`${directory:...}`
placeholders as Kafka settings, under the same rule (config/placeholders.py: inside MIRROR_SECRETS_DIRS).

Credentials in the URL (`https://user:pw@host`) are refused: a URL is printed, passed in argv and stored in
reports. Credentials over http:// need the `http-registry` opt-in (config/posture.py), loopback included.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from mirror_worker.config.placeholders import PlaceholderRule, allowed_path, resolve_placeholders
from mirror_worker.config.posture import enforce, url_weakness
from mirror_worker.config.unknown_keys import unknown_keys
from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import register_secret, register_secrets, register_url_secret

REGISTRY_KEYS = (
    "basic.auth.user.info", "bearer.auth.token", "bearer.auth.logical.cluster", "bearer.auth.identity.pool.id",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
)
# `.properties` keys of the classic flags' files that belong to the registry, not to the Kafka client.
PROPERTIES_PREFIX = "schema.registry."
_CREDENTIAL_KEYS = ("basic.auth.user.info", "bearer.auth.token")
# Files a connection may name only inside the secrets directories (as its Kafka key files: placeholders.py).
_KEY_FILES = ("ssl.certificate.location", "ssl.key.location")
# How long a registry call may take, and the pause between its retries.
CLIENT_DEFAULTS = {"timeout": 30, "retries.wait.ms": 200}


def check_registry_url(url: str | None) -> str | None:
    """`url` if it is http(s):// without credentials; the message never echoes it (it may hold a password)."""
    if url is None:
        return None
    if not url.startswith(("http://", "https://")):
        raise ValueError("a schema registry URL must start with http:// or https://")
    parts = urlsplit(url)
    if parts.username or parts.password:
        register_url_secret(url)  # the refusal may travel on through text that quotes the input
        raise ValueError("credentials in a schema registry URL are refused: give them as basic.auth.user.info "
                         "in the registry's settings, from a ${file:...} placeholder")
    return url


def check_registry_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Validated settings (resolved already): known keys only, a bearer token with its logical cluster, a key
    with its certificate. Every credential is registered for redaction (also in a rebuilt config)."""
    settings = {str(k): str(v) for k, v in settings.items()}
    unknown = set(settings) - set(REGISTRY_KEYS)
    if unknown:
        raise ValueError(unknown_keys(unknown, set(REGISTRY_KEYS)))
    _register(settings)
    if "basic.auth.user.info" in settings and ":" not in settings["basic.auth.user.info"]:
        raise ValueError("basic.auth.user.info must be USER:PASSWORD")
    if "basic.auth.user.info" in settings and "bearer.auth.token" in settings:
        raise ValueError("basic.auth.user.info and bearer.auth.token: give one of them")
    if "bearer.auth.token" in settings and not settings.get("bearer.auth.logical.cluster"):
        raise ValueError("bearer.auth.token needs bearer.auth.logical.cluster")
    if ("ssl.key.location" in settings or "ssl.key.password" in settings) and "ssl.certificate.location" not in settings:
        raise ValueError("ssl.key.location needs ssl.certificate.location (the client certificate)")
    return settings


def _register(settings: Mapping[str, str]) -> None:
    register_secrets(settings)
    _, _, password = settings.get("basic.auth.user.info", "").partition(":")
    register_secret(password)  # the password alone also appears in text (an HTTP library's message)


def registry_settings(raw, where: str, rule: PlaceholderRule | None = None) -> dict[str, str]:
    """The registry settings of a spec mapping, a `.properties` split or a connection's extra: placeholders
    resolved as `rule` allows (default: the spec's), then checked; every problem a one-line ConfigError."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a mapping of schema registry settings is expected")
    text = {str(k): _setting(v) for k, v in raw.items()}
    register_secrets(text)
    resolved = resolve_placeholders(text, where, rule)
    try:
        return check_registry_settings(resolved)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _setting(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def split_properties(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A `.properties` file's Kafka settings and its registry settings (`schema.registry.`-prefixed keys,
    prefix removed). `schema.registry.url` stays a flag: one way to give the URL."""
    kafka, registry = {}, {}
    for key, value in properties.items():
        if key.startswith(PROPERTIES_PREFIX):
            registry[key[len(PROPERTIES_PREFIX):]] = value
        else:
            kafka[key] = value
    return kafka, registry


def check_connection_files(settings: Mapping[str, str], rule: PlaceholderRule, where: str) -> None:
    """From an Airflow connection: the client certificate and key only inside the secrets directories (a
    connection pointed at the host's own key would lend its identity to any registry)."""
    for key in _KEY_FILES:
        if settings.get(key):
            allowed_path(Path(settings[key]), rule, f"{where}: {key}")


def registry_weakness(url: str | None, settings: Mapping[str, str]) -> str | None:
    """`http-registry` when the registry is http:// off loopback, or sends credentials over http:// at all."""
    weakness = url_weakness(url, "http-registry")
    if weakness is None and url and url.lower().startswith("http://") and any(k in settings for k in _CREDENTIAL_KEYS):
        return "http-registry"
    return weakness


def check_registry_posture(url: str | None, settings: Mapping[str, str], allowed: frozenset[str], where: str) -> None:
    """Refuse an http:// registry as registry_weakness says, unless `allowed` names http-registry."""
    weakness = registry_weakness(url, settings)
    enforce([weakness] if weakness else [], allowed, where)


def client_config(url: str, settings: Mapping[str, str] | None = None) -> dict:
    """confluent-kafka SchemaRegistryClient config: the URL, the settings, a static bearer token's source."""
    config: dict = {**CLIENT_DEFAULTS, "url": url, **(settings or {})}
    if "bearer.auth.token" in config:
        config["bearer.auth.credentials.source"] = "STATIC_TOKEN"
    return config


def registry_from_connection(url: str, raw: Mapping[str, str], allowed: frozenset[str], where: str) -> dict:
    """SchemaRegistryClient config for an Airflow connection's registry (`raw`: the registry keys of its extra,
    and its login/password as basic.auth.user.info): placeholders under the connection rule, certificate and
    key files inside the secrets directories, the http:// posture with the connection's opt-ins."""
    rule = PlaceholderRule.connection()
    settings = registry_settings(raw, where, rule)
    check_connection_files(settings, rule, where)
    check_registry_posture(url, settings, allowed, where)
    return client_config(url, settings)

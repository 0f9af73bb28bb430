"""Secrets from placeholders, only where the operator of the host put them (issue 46, item 1).

Config-provider placeholders, as Kafka's FileConfigProvider, DirectoryConfigProvider and
EnvVarConfigProvider write them, are resolved in setting values (also inside a JAAS line):

    ${file:/etc/mirror/secrets.properties:source.password}   a key of a .properties file
    ${directory:/run/secrets:source-password}                 the content of a file in a directory
    ${env:SOURCE_PASSWORD}                                    an environment variable

A placeholder is resolved on the host that reads the settings, with that process's rights: whoever
writes it reads that host's files and environment, and the value then travels to a broker (in
`client.id`, in every request header) or into a log line. So what may be read is the host's decision,
not the settings': `MIRROR_SECRETS_DIRS` (directories, `os.pathsep`-separated, read from the
environment of the process) names the only places `file` and `directory` may read, checked on real
paths (`..` and symlinks that leave them are refused).

- Airflow connections (`PlaceholderRule.connection`), which anyone who may edit a connection writes:
  off unless MIRROR_SECRETS_DIRS is set, then inside it only; `env` never.
- Specs and `.properties` files (`PlaceholderRule.spec`), which are files of the deployment: inside
  MIRROR_SECRETS_DIRS when it is set (then `env` refused too: secrets come from those directories);
  anywhere, `env` included, when it is not (a spec author already chooses what the worker runs).
- Never in `bootstrap.servers` or `client.id` (both are printed and sent in clear), nor in a
  connection's login (`sasl.username`, shown in Airflow's connection list).

Every resolved value is treated as a secret (see redaction.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mirror_worker.config.properties import load_properties
from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import register_secret

SECRETS_DIRS_VARIABLE = "MIRROR_SECRETS_DIRS"
PLACEHOLDER = re.compile(r"\$\{(?P<provider>[A-Za-z0-9_-]+):(?P<body>[^}]*)\}")
# Java's way of declaring providers: here the three above are built in, so these keys have no use.
_PROVIDER_KEYS = re.compile(r"^config\.providers(\..*)?$")
_NEVER_KEYS = ("bootstrap.servers", "client.id")


@dataclass(frozen=True)
class PlaceholderRule:
    """What placeholders may read. `dirs` None: any path; () : none at all (placeholders off)."""

    dirs: tuple[Path, ...] | None
    env: bool
    never_keys: tuple[str, ...] = _NEVER_KEYS
    origin: str = "spec"

    @classmethod
    def spec(cls, environ: Mapping[str, str] | None = None) -> PlaceholderRule:
        dirs = secrets_dirs(os.environ if environ is None else environ)
        return cls(dirs=dirs, env=dirs is None)

    @classmethod
    def connection(cls, environ: Mapping[str, str] | None = None) -> PlaceholderRule:
        return cls(dirs=secrets_dirs(os.environ if environ is None else environ) or (), env=False,
                   never_keys=(*_NEVER_KEYS, "sasl.username"), origin="Airflow connection")


def secrets_dirs(environ: Mapping[str, str]) -> tuple[Path, ...] | None:
    """The allowlisted secrets directories as real paths, or None when the host names none."""
    named = [d for d in environ.get(SECRETS_DIRS_VARIABLE, "").split(os.pathsep) if d.strip()]
    return tuple(Path(os.path.realpath(d.strip())) for d in named) or None


def resolve_placeholders(settings: dict[str, str], where: str, rule: PlaceholderRule | None = None) -> dict[str, str]:
    """Replace `${provider:...}` in every value as `rule` (default: the spec's) allows; drop Java's
    `config.providers*` declarations. A placeholder the rule refuses is a one-line ConfigError, and nothing
    is read."""
    rule = rule or PlaceholderRule.spec()
    out = {}
    for key, value in settings.items():
        if _PROVIDER_KEYS.match(key):
            continue
        text = str(value)
        if key in rule.never_keys and PLACEHOLDER.search(text):
            raise ConfigError(f"{where}: {key}: placeholders are not resolved here (the value is sent or shown in clear)")
        out[key] = PLACEHOLDER.sub(lambda m, k=key: _provide(m, f"{where}: {k}", rule), text)
    return out


def _provide(match: re.Match, where: str, rule: PlaceholderRule) -> str:
    provider, body = match.group("provider"), match.group("body")
    if provider == "env":
        if not rule.env:
            raise ConfigError(f"{where}: ${{env:...}} is not resolved in {_scope(rule)}; "
                              f"put the secret in a file under {SECRETS_DIRS_VARIABLE}")
        name = body.lstrip(":")  # KIP-887 also writes ${env::NAME}
        if name not in os.environ:
            raise ConfigError(f"{where}: environment variable {name} (from ${{env:...}}) is not set")
        value = os.environ[name]
    elif provider in ("file", "directory"):
        path, sep, name = body.rpartition(":")
        if not sep or not path or not name:
            raise ConfigError(f"{where}: ${{{provider}:PATH:KEY}} expected")
        value = _from_file(provider, Path(path), name, where, rule)
    else:
        raise ConfigError(f"{where}: unsupported config provider {provider!r}; use file, directory or env")
    register_secret(value)
    return value


def _scope(rule: PlaceholderRule) -> str:
    return "an Airflow connection" if rule.origin != "spec" else f"specs while {SECRETS_DIRS_VARIABLE} is set"


def allowed_path(path: Path, rule: PlaceholderRule, where: str) -> Path:
    """`path` as a real path (symlinks and `..` resolved), refused unless inside one of the rule's directories."""
    if rule.dirs is None:
        return path
    if not rule.dirs:
        raise ConfigError(f"{where}: placeholders are off in {_scope(rule)}: the host names no secrets "
                          f"directory ({SECRETS_DIRS_VARIABLE})")
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(d) for d in rule.dirs):
        raise ConfigError(f"{where}: {path} is outside the secrets directories ({SECRETS_DIRS_VARIABLE}): refused")
    return real


# What a connection's settings may make librdkafka do on the host beyond placeholders: run a command or load a
# library (refused from a connection), read private key material (only inside the secrets directories: a
# connection pointed at the host's own client key would present the host's identity to any cluster).
_RUNS_ON_HOST = ("sasl.kerberos.kinit.cmd", "plugin.library.paths", "ssl.engine.location")
_KEY_FILES = ("ssl.key.location", "ssl.keystore.location", "ssl.certificate.location", "sasl.kerberos.keytab")


def check_host_reach(settings: dict[str, str], rule: PlaceholderRule, where: str) -> None:
    """For settings from an Airflow connection: refuse keys that run code on the host, and key files outside
    the rule's directories (one line each)."""
    for key in _RUNS_ON_HOST:
        if settings.get(key):
            raise ConfigError(f"{where}: {key} runs or loads code on the host: not accepted from a connection")
    for key in _KEY_FILES:
        if not settings.get(key):
            continue
        if rule.dirs == ():
            raise ConfigError(f"{where}: {key}: a connection's key files are read only inside "
                              f"{SECRETS_DIRS_VARIABLE}, which this host does not set")
        allowed_path(Path(str(settings[key])), rule, f"{where}: {key}")


def _from_file(provider: str, path: Path, name: str, where: str, rule: PlaceholderRule) -> str:
    if provider == "file":
        real = allowed_path(path, rule, where)
        try:
            values = load_properties(real)
        except ConfigError:
            raise ConfigError(f"{where}: secrets file {path} not found or unreadable") from None
        if name not in values:
            raise ConfigError(f"{where}: no key {name!r} in secrets file {path}")
        return values[name]
    target = path / name
    if target.parent != path or name in ("", ".", ".."):
        raise ConfigError(f"{where}: {name!r} must be a file name inside {path}")
    real = allowed_path(target, rule, where)
    try:
        return real.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"{where}: secret file {target} not found or unreadable") from None

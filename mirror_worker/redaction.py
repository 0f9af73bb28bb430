"""Keep credentials out of everything the mirror prints: logs, stderr lines, error messages, reprs.

Two nets, because either alone leaks: settings are redacted by key (`redact_settings`) wherever a
settings dict is shown, and every secret value the process has seen (`register_secrets`, fed by the
client-settings translation and by config validation) is cut out of any text (`redact_text`) before
it is written — which also catches a password echoed inside a librdkafka or pydantic message.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping

REDACTED = "[redacted]"

# Setting keys whose values are credentials (Java and librdkafka spellings, schema-registry auth).
# Also Java syntax: the Spark jobs add it to spark.redaction.regex (spark_jobs/common/cluster_security.py).
SECRET_KEY_PATTERN = (
    r"password|secret|jaas\.config|user\.info|token|credential|ssl\.key\.pem|ssl\.keystore\.key$|private"
)
_SECRET_KEY = re.compile(SECRET_KEY_PATTERN, re.IGNORECASE)
# `password="..."` / `password=...` inside a JAAS line or any echoed `key=value` of a secret key; `key: value`
# (YAML, JSON's `"key": "value"`) only where the value ends its line or field (`_cut`).
_INLINE = re.compile(
    r"""(?P<key>\b[\w.]*(?:password|secret|user\.info|token)[\w.]*"?\s*(?P<sep>[=:])\s*)(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;}"']+)""",
    re.IGNORECASE,
)
# What may follow an echoed `key: value` (spaces skipped): the end, or the next field of a mapping.
_FIELD_END = frozenset(",;}])#\r\n")
# Shorter values are not cut out of free text: a 2-letter "secret" would shred every log line.
# (Redaction by key covers them.)
MIN_SECRET_LENGTH = 4

_known: set[str] = set()
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def register_secret(value: object) -> None:
    text = str(value) if value is not None else ""
    if len(text) >= MIN_SECRET_LENGTH:
        with _lock:
            _known.add(text)


def register_secrets(settings: Mapping) -> None:
    """Remember the values of every secret key in `settings` (and the passwords inside a JAAS line)."""
    for key, value in settings.items():
        if is_secret_key(str(key)) and value:
            register_secret(value)
            for match in _INLINE.finditer(str(value)):
                register_secret(match.group("value").strip("\"'"))


def redact_settings(settings: Mapping) -> dict:
    """A copy of `settings` that can be shown: secret values replaced, in nested mappings and lists too
    (e.g. `redact_settings(config.model_dump())`)."""
    return {key: REDACTED if is_secret_key(str(key)) and value not in (None, "") and not isinstance(value, Mapping)
            else _redact_nested(value) for key, value in settings.items()}


def _redact_nested(value):
    if isinstance(value, Mapping):
        return redact_settings(value)
    if isinstance(value, (list, tuple)):
        return [_redact_nested(v) for v in value]
    return value


_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^/@:\s]*:)(?P<password>[^/@\s]+)@")


def register_url_secret(url: str | None) -> None:
    """Remember the password of a URL with credentials (`http://user:secret@host`)."""
    for match in _URL_PASSWORD.finditer(url or ""):
        register_secret(match.group("password"))


def redact_url(url: str) -> str:
    """`url` with the password of its credentials replaced."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{REDACTED}@", url)


def redact_text(text: str) -> str:
    """`text` with every known secret, and any `password=...`-like pair, cut out."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_known, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
        # The same secret as it appears inside a JSON string (quotes, backslashes escaped).
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret and escaped in text:
            text = text.replace(escaped, REDACTED)
    return _INLINE.sub(_cut, text)


def _cut(match: re.Match) -> str:
    """An inline pair's value replaced; but `key: words…` is a line about the key (`sasl.password: missing`,
    `basic.auth.user.info: must be USER:PASSWORD`), not an echo of its value: kept whole."""
    if match.group("sep") == ":" and match.group("value")[0] not in "\"'":
        following = match.string[match.end():].lstrip(" \t")[:1]
        if following and following not in _FIELD_END:
            return match.group(0)
    return match.group("key") + REDACTED


class RedactingFilter(logging.Filter):
    """Redacts a record's message where it is made, whatever handler then writes it (Airflow's task log,
    a test's caplog): librdkafka's lines name the client (`client.id#producer-1`) and echo settings, and
    reach handlers that do not go through logs.JsonFormatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


def forget_secrets() -> None:
    """For tests only: start from an empty registry."""
    with _lock:
        _known.clear()

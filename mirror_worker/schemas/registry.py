"""The schema-registry I/O edge: confluent-kafka's SchemaRegistryClient behind the few calls schema sync needs.

A registry is given as SchemaRegistryClient config (config/registry.py builds it from a mirror's settings:
URL, basic auth or bearer token, CA and client certificate) or as a bare URL. Neither the URL nor a credential
appears in errors or logs, which name a registry by its role ("source 'dc1'", "destination") instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mirror_worker.config.registry import client_config
from mirror_worker.exceptions import SchemaRegistryUnavailable, UnknownSchemaId

_NOT_FOUND = 404
_REJECTED = (409, 422)  # incompatible with the subject's level; invalid schema


class SchemaRejected(Exception):
    """The registry refused to register a schema."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SubjectVersion:
    """One registered version of a subject, as the registry returns it."""

    version: int
    schema_id: int
    schema_type: str
    schema_str: str
    references: tuple[Reference, ...] = ()


def redact(url: str) -> str:
    """`url` without its user info: safe to print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Registry:
    """One Confluent-API registry; `role` names it in errors."""

    def __init__(self, registry: str | Mapping, role: str) -> None:
        """`registry`: SchemaRegistryClient config (MirrorConfig.source_registry, .destination_registry), or a URL."""
        self.role = role
        config = client_config(registry) if isinstance(registry, str) else dict(registry)
        url = urlsplit(config["url"])
        _, _, password = str(config.get("basic.auth.user.info", "")).partition(":")
        self._secret_parts = [p for p in (url.username, url.password, password, config.get("bearer.auth.token")) if p]
        self._client = SchemaRegistryClient(config)

    # ---------------------------------------------------------------- reads
    def versions(self, subject: str) -> list[SubjectVersion]:
        """Every version of `subject`, oldest first; [] when the subject does not exist."""
        try:
            numbers = self._call(self._client.get_versions, subject)
        except _Missing:
            return []
        out = []
        for number in sorted(numbers):
            registered = self._call(self._client.get_version, subject, number)
            out.append(_subject_version(registered.version, registered.schema_id, registered.schema))
        return out

    def schema(self, schema_id: int) -> SubjectVersion | None:
        """The schema `schema_id` names (`version` 0: an id names a schema, not a version); None when the
        registry does not know the id."""
        try:
            schema = self._call(self._client.get_schema, schema_id)
        except _Missing:
            return None
        return _subject_version(0, schema_id, schema)

    def version(self, subject: str, number: int) -> SubjectVersion | None:
        """One version of `subject`; None when it does not exist."""
        try:
            registered = self._call(self._client.get_version, subject, number)
        except _Missing:
            return None
        return _subject_version(registered.version, registered.schema_id, registered.schema)

    def has_subject(self, subject: str) -> bool:
        try:
            return bool(self._call(self._client.get_versions, subject))
        except _Missing:
            return False

    def subjects_of_id(self, schema_id: int) -> list[str]:
        try:
            # /schemas/ids/{id}/versions: Apicurio's Confluent API has no /schemas/ids/{id}/subjects.
            return sorted({v.subject for v in self._call(self._client.get_schema_versions, schema_id)})
        except _Missing:
            raise UnknownSchemaId(f"schema id {schema_id} is not in the {self.role} registry") from None

    def compatibility(self, subject: str | None) -> str | None:
        """The subject's own level (None when it has none), or the global level when `subject` is None."""
        try:
            return self._call(self._client.get_compatibility, subject)
        except _Missing:
            return None

    # ---------------------------------------------------------------- writes
    def register(self, subject: str, version: SubjectVersion, references: tuple[Reference, ...]) -> int:
        """Register `version`'s schema under `subject`; SchemaRejected if the registry refuses it."""
        refs = [SchemaReference(r.name, r.subject, r.version) for r in references]
        schema = Schema(version.schema_str, version.schema_type, refs)
        try:
            return self._client.register_schema(subject, schema)
        except SchemaRegistryError as exc:
            if exc.http_status_code in _REJECTED:
                raise SchemaRejected(f"the {self.role} registry refused it: {self._scrub(exc.error_message)}") from None
        return self._call(self._client.register_schema, subject, schema)  # other errors, reported as such

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call(self._client.set_compatibility, subject, level)

    # ---------------------------------------------------------------- errors
    def _call(self, method, *args):
        try:
            return method(*args)
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                raise _Missing() from None
            raise SchemaRegistryUnavailable(f"{self.role} schema registry: {self._scrub(str(exc))}") from None
        except _TRANSPORT_ERRORS as exc:
            raise SchemaRegistryUnavailable(
                f"{self.role} schema registry unreachable: {self._scrub(f'{exc.__class__.__name__}: {exc}')}"
            ) from None

    def _scrub(self, text: str) -> str:
        for secret in self._secret_parts:
            text = text.replace(secret, "***")
        return text


def _subject_version(version: int, schema_id: int, schema: Schema) -> SubjectVersion:
    return SubjectVersion(version, schema_id, schema.schema_type or "AVRO", schema.schema_str,
                          tuple(Reference(r.name, r.subject, r.version) for r in schema.references or ()))


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the registry client raises when the registry cannot be reached, by public names only: the client
    uses httpx2 where it is installed, else httpx (its private `_httpx_compat` chooses, and is absent from
    some releases), so both are looked up; OSError covers sockets and TLS."""
    errors: list[type[BaseException]] = [OSError]
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).HTTPError)
        except ImportError:
            continue
    return tuple(errors)


_TRANSPORT_ERRORS = _transport_errors()


class _Missing(Exception):
    """A 404 from the registry: the subject, version or id does not exist."""

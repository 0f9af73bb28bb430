"""Schema sync: copy a mirrored topic's subjects to the destination registry and map schema ids.

Subjects follow the topic-name strategy: `<topic>-key` / `<topic>-value` on the source registry are copied to
`<destination topic>-key` / `-value` (the mirror's naming policy), every version in order. Referenced subjects
are copied first, under their own names. Two modes, as viooh-mirror has them:

    strict   the destination subject is an exact copy: its versions are a prefix of the source's (the
             missing rest is registered), nothing else
    lenient  the destination may hold extra versions; every source version appears there, in the source's
             relative order (missing ones can only be appended, so they must all come after the last present)

A violation is a `SchemaConflict` for the topic: it is not mirrored, nothing is written for it.
`plan_subject` is the pure decision; `SchemaSyncer` does the registry I/O and keeps the id map (source framing
header -> destination framing header) the worker rewrites records with.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from fastavro.schema import SchemaParseException, UnknownType, parse_schema

from mirror_worker.config.model import MirrorConfig
from mirror_worker.exceptions import ConfigError, SchemaConflict, UnknownSchemaId
from mirror_worker.policy.naming import NamingPolicy
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.framing import TopicFraming
from mirror_worker.schemas.registry import Reference, Registry, SchemaRejected, SubjectVersion

log = logging.getLogger("mirror_worker.schemas")

SUBJECT_SUFFIXES = ("-key", "-value")
STRICT, LENIENT = "strict", "lenient"


# ------------------------------------------------------------------ pure: comparing and planning


def fingerprint(schema_type: str, schema_str: str, references: tuple[Reference, ...] = ()) -> tuple:
    """What makes two registered schemas the same: type, meaning, references (on the same side)."""
    return schema_type, canonical_text(schema_type, schema_str), references


# Avro attributes a decoder never reads from the writer's schema: documentation, and what only a reader's own
# schema uses (field defaults, aliases, sort order). Every other attribute counts: the parsing canonical form
# drops logicalType, precision and scale (and properties such as connect.name), yet a long with
# timestamp-millis or a decimal of another scale reads as other data.
_AVRO_UNREAD = frozenset({"doc", "aliases", "default", "order"})


def canonical_text(schema_type: str, schema_str: str) -> str:
    if schema_type == "AVRO":
        schema = json.loads(schema_str)
        try:
            schema = parse_schema(schema, _write_hint=False)  # full names: a namespace written two ways is one
        except (SchemaParseException, UnknownType):  # named types from references are unknown here
            pass
        return json.dumps(_avro_meaning(schema), sort_keys=True, separators=(",", ":"))
    if schema_type == "JSON":
        return json.dumps(json.loads(schema_str), sort_keys=True, separators=(",", ":"))
    # PROTOBUF: registries may re-indent the text; string literals keep their spaces.
    return " ".join(_PROTO_TOKEN.findall(schema_str))


_PROTO_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[^\s"\']+|["\']')


def _avro_meaning(schema):
    """The schema without what decoding ignores; `{"type": "long"}` is `"long"`."""
    if isinstance(schema, list):
        return [_avro_meaning(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _AVRO_UNREAD or key.startswith("__"):  # __: fastavro's own marks
            continue
        if key in ("type", "items", "values"):
            value = _avro_meaning(value)
        elif key == "fields" and isinstance(value, list):
            value = [_avro_meaning(f) for f in value]
        out[key] = value
    return out["type"] if list(out) == ["type"] and isinstance(out["type"], str) else out


@dataclass(frozen=True)
class SubjectPlan:
    """Which source versions (indexes) to register, in order; or why the subject conflicts."""

    register: tuple[int, ...] = ()
    conflict: str | None = None


def plan_subject(source: Sequence[tuple[int, Hashable]], destination: Sequence[tuple[int, Hashable]],
                 mode: str) -> SubjectPlan:
    """`source` and `destination`: (version number, fingerprint) oldest first."""
    position = {fp: i for i, (_, fp) in enumerate(destination)}
    if mode == STRICT:
        for i, (version, fp) in enumerate(source):
            if i >= len(destination):
                return SubjectPlan(tuple(range(i, len(source))))
            if destination[i][1] != fp:
                return SubjectPlan(conflict=f"destination version {destination[i][0]} differs from source "
                                            f"version {version} (strict mode needs an exact copy)")
        if len(destination) > len(source):
            extra = ", ".join(str(v) for v, _ in destination[len(source):])
            return SubjectPlan(conflict=f"destination has versions the source has not ({extra}; strict mode "
                                        "needs an exact copy)")
        return SubjectPlan()
    last = -1
    missing: list[int] = []
    for i, (version, fp) in enumerate(source):
        at = position.get(fp)
        if at is None:
            missing.append(i)
            continue
        if missing:
            return SubjectPlan(conflict=f"source version {source[missing[0]][0]} is missing on the destination but "
                                        f"the later source version {version} is there already (destination "
                                        f"version {destination[at][0]}): appending it would break the order")
        if at < last:
            return SubjectPlan(conflict=f"source version {version} comes before destination version "
                                        f"{destination[last][0]} there but after it on the source")
        last = at
    return SubjectPlan(tuple(missing))


# ------------------------------------------------------------------ registry I/O


class SubjectConflict(Exception):
    """A subject cannot be synced under the mode; the topic that needs it gets a SchemaConflict."""


class SchemaSyncer:
    """Syncs subjects from one source registry to the destination registry; keeps their id map."""

    def __init__(self, source: Registry, destination: Registry, policy: NamingPolicy, mode: str,
                 compatibility: str, on_register: Callable[[], None] | None = None) -> None:
        self.source, self.destination, self.policy = source, destination, policy
        self.mode, self.compatibility = mode, compatibility
        self.on_register = on_register
        self.registered = 0
        # Source framing header (magic byte + id) -> destination header of the same schema.
        self.id_headers: dict[bytes, bytes] = {}
        # (source subject, version) -> destination version: to translate references.
        self._versions: dict[tuple[str, int], int] = {}
        self._global_compatibility: str | None = None
        self._compatibility_set: set[str] = set()
        # Source topic -> whether it has a key / value subject: which of its fields are framed.
        self.framing: dict[str, TopicFraming] = {}

    def sync_topic(self, topic: str) -> int:
        """Copy the topic's key and value subjects; returns schemas registered. SchemaConflict if not possible."""
        before = self.registered
        remote = self.policy.remote_topic(topic)
        checked_at = time.monotonic()
        try:
            keys, values = (self.sync_subject(topic + suffix, remote + suffix) for suffix in SUBJECT_SUFFIXES)
        except SubjectConflict as exc:
            raise SchemaConflict(topic, str(exc)) from None
        self.framing[topic] = TopicFraming(keys, values, checked_at)
        return self.registered - before

    def recheck_topic(self, topic: str) -> TopicFraming:
        """Look again for the subjects the topic lacked; a new one is synced before it is used."""
        known = self.framing.get(topic)
        checked_at = time.monotonic()
        missing = [suffix for suffix, present in zip(SUBJECT_SUFFIXES, (known.keys, known.values) if known else (False, False))
                   if not present]
        if any(self.source.has_subject(topic + suffix) for suffix in missing):
            self.sync_topic(topic)
        else:
            self.framing[topic] = TopicFraming(bool(known and known.keys), bool(known and known.values), checked_at)
        return self.framing[topic]

    def destination_header(self, topic: str, source_id: int) -> bytes:
        """The destination framing header for `source_id`, syncing the schema's subjects first if needed.

        UnknownSchemaId when the source registry does not know the id; SchemaConflict when a subject cannot be
        synced under the mode.
        """
        header = wire_format.header(source_id)
        if header not in self.id_headers:
            self.sync_topic(topic)
        if header not in self.id_headers:
            # Registered under other subjects only (another strategy, or shared): copy those, names kept.
            try:
                for subject in self.source.subjects_of_id(source_id):
                    self.sync_subject(subject, subject)
            except SubjectConflict as exc:
                raise SchemaConflict(topic, str(exc)) from None
        if header not in self.id_headers:
            raise UnknownSchemaId(f"schema id {source_id} is in no subject of the {self.source.role} registry")
        return self.id_headers[header]

    def sync_subject(self, subject: str, destination_subject: str, _visiting: frozenset = frozenset()) -> bool:
        """Copy `subject` (references first) to `destination_subject` and map its ids; SubjectConflict if not.

        False when the source has no such subject.
        """
        source_versions = self.source.versions(subject)
        if not source_versions:
            return False
        for version in source_versions:
            for ref in version.references:
                if (ref.subject, ref.version) not in self._versions and ref.subject not in _visiting:
                    self.sync_subject(ref.subject, ref.subject, _visiting | {subject})
        translated = [self._translated_references(subject, v) for v in source_versions]
        source_fps = [fingerprint(v.schema_type, v.schema_str, refs) for v, refs in zip(source_versions, translated)]
        destination_versions = self.destination.versions(destination_subject)
        plan = plan_subject(
            [(v.version, fp) for v, fp in zip(source_versions, source_fps)],
            [(d.version, fingerprint(d.schema_type, d.schema_str, d.references)) for d in destination_versions],
            self.mode,
        )
        where = f"subject {subject} -> {destination_subject}"
        if plan.conflict:
            raise SubjectConflict(f"{where}: {plan.conflict}")
        if plan.register:
            # The level goes on before what it governs; a registry may only configure a subject that exists.
            exists = bool(destination_versions)
            for index in plan.register:
                if exists:
                    self._apply_compatibility(subject, destination_subject)
                version = source_versions[index]
                try:
                    self.destination.register(destination_subject, version, translated[index])
                except SchemaRejected as exc:
                    raise SubjectConflict(f"{where}: source version {version.version}: {exc}") from None
                self.registered += 1
                if self.on_register is not None:
                    self.on_register()
                if not exists:
                    self._apply_compatibility(subject, destination_subject)
                    exists = True
            destination_versions = self.destination.versions(destination_subject)
        by_fingerprint = {fingerprint(d.schema_type, d.schema_str, d.references): d for d in destination_versions}
        for version, fp in zip(source_versions, source_fps):
            copy = by_fingerprint.get(fp)
            if copy is None:
                raise SubjectConflict(f"{where}: source version {version.version} is not on the destination "
                                         "after registering it (the registry changed it)")
            self._versions[(subject, version.version)] = copy.version
            self.id_headers[wire_format.header(version.schema_id)] = wire_format.header(copy.schema_id)
        if plan.register:
            log.info("schemas registered", extra={
                "subject": subject, "destination_subject": destination_subject, "registered": len(plan.register),
                "source_registry": self.source.role,
            })
        return True

    def _translated_references(self, subject: str, version: SubjectVersion) -> tuple[Reference, ...]:
        out = []
        for ref in version.references:
            copied = self._versions.get((ref.subject, ref.version))
            if copied is None:
                raise SubjectConflict(f"subject {subject} version {version.version}: its reference "
                                         f"{ref.subject} version {ref.version} could not be copied")
            out.append(Reference(ref.name, ref.subject, copied))
        return tuple(out)

    def _apply_compatibility(self, subject: str, destination_subject: str) -> None:
        if destination_subject in self._compatibility_set:
            return
        self._compatibility_set.add(destination_subject)
        level = self.compatibility
        if level == "MIRROR":
            level = self.source.compatibility(subject)
            if level is None:
                if self._global_compatibility is None:
                    self._global_compatibility = self.source.compatibility(None) or "BACKWARD"
                level = self._global_compatibility
        if self.destination.compatibility(destination_subject) != level:
            self.destination.set_compatibility(destination_subject, level)


# ------------------------------------------------------------------ the library entry point


@dataclass
class SchemaSyncReport:
    conflicts: dict[str, str] = field(default_factory=dict)  # source topic -> error
    registered: int = 0
    topics: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_dict(self) -> dict:
        return {"ok": self.ok, "conflicts": dict(self.conflicts), "registered": self.registered,
                "topics": list(self.topics)}


def syncers_for(config: MirrorConfig, on_register: Callable[[], None] | None = None) -> dict[str, SchemaSyncer]:
    """One syncer per source cluster that has a registry (source name -> syncer)."""
    if not config.syncs_schemas:
        return {}
    destination = Registry(config.destination_registry, "destination")
    out = {}
    for source in config.sources:
        registry = config.source_registry(source)
        if registry:
            out[source.name] = SchemaSyncer(Registry(registry, f"source {source.name!r}"), destination,
                                            config.naming_policy(), config.schema_sync, config.schema_compatibility,
                                            on_register)
    return out


def sync_mirror_schemas(config: MirrorConfig, topics: Iterable[str] | None = None) -> SchemaSyncReport:
    """Sync the subjects of `topics` (None: every source topic the mirror's filter selects) to the destination.

    ConfigError when the mirror has no registries; SchemaRegistryUnavailable when one does not answer.
    """
    syncers = syncers_for(config)
    if not syncers:
        raise ConfigError(f"mirror {config.name!r} has no schema registries (a source schema-registry-url and "
                          "a destination schema-registry-url are needed)")
    report = SchemaSyncReport()
    wanted = None if topics is None else list(dict.fromkeys(topics))
    for source in config.sources:
        syncer = syncers.get(source.name)
        if syncer is None:
            continue
        names = wanted if wanted is not None else config.topic_filter().select(
            _source_topics({"group.id": config.group_id, **source.consumer}, source.name, config.startup_timeout_s))
        for topic in names:
            try:
                syncer.sync_topic(topic)
            except SchemaConflict as exc:
                report.conflicts[topic] = str(exc)
            if topic not in report.topics:
                report.topics.append(topic)
        report.registered += syncer.registered
    return report


def _source_topics(consumer_settings: dict, alias: str, timeout_s: float) -> list[str]:
    """The source's topics, within the mirror's start-up timeout (a fixed 30 s before: `startup-timeout-s` was
    ignored, and the line did not say which source)."""
    from confluent_kafka import KafkaException

    from mirror_worker.clients import factory

    from mirror_worker.exceptions import UnreachableClusterError
    from mirror_worker.topics.admin import describe_topics

    consumer = factory.consumer(consumer_settings, {"enable.auto.commit": False})
    try:
        return sorted(describe_topics(consumer, timeout=timeout_s))
    except KafkaException as exc:
        raise UnreachableClusterError(f"source cluster {alias!r} unreachable within {timeout_s:g}s: "
                                      f"{exc.args[0].str()}") from None
    finally:
        consumer.close()

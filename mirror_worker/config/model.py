"""The one validated config model of a mirror, whichever way it was given (flags or YAML spec).

Field names are snake_case; the CLI (`commands/cli.py`) maps MirrorMaker's dotted flags onto them and the spec
loader (`config/spec.py`) maps the YAML's kebab-case keys. Kafka client settings stay librdkafka/Java-style
dotted keys in plain dicts (`ClientSettings`), checked by `config/librdkafka.py`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError, field_validator,
    model_validator,
)

from mirror_worker.config.inflight import DEFAULT_INFLIGHT_BUDGET_BYTES, MIN_INFLIGHT_BUDGET_BYTES
from mirror_worker.config.membership import check_instance_id
from mirror_worker.config.registry import check_registry_settings, check_registry_url, client_config
from mirror_worker.config.unknown_keys import unknown_key
from mirror_worker.exceptions import ConfigError
from mirror_worker.policy.filter import ReverseTopicFilter, TopicFilter
from mirror_worker.policy.naming import ExplicitMapPolicy, IdentityPolicy, InversePolicy, NamingPolicy, PrefixPolicy
from mirror_worker.redaction import redact_settings, redact_url, register_secrets

def _register_secrets(value: dict[str, str]) -> dict[str, str]:
    # A config rebuilt elsewhere (a --num.streams child process) must redact the same secrets.
    register_secrets(value)
    return value


ClientSettings = Annotated[dict[str, str], AfterValidator(_register_secrets)]


def _require_bootstrap(value: ClientSettings) -> ClientSettings:
    if not value.get("bootstrap.servers"):
        raise ValueError("bootstrap.servers is required")
    return value


RegistryUrl = Annotated[str | None, AfterValidator(check_registry_url)]
# A registry's authentication and TLS settings (config/registry.py), resolved; {} for none.
RegistrySettings = Annotated[dict[str, str], AfterValidator(check_registry_settings)]

# Settings of a client that connects somewhere: bootstrap.servers is required.
ConnectingClientSettings = Annotated[ClientSettings, AfterValidator(_require_bootstrap)]

MIRROR_SOURCE = "mirror-source"
# MIRROR: each destination subject gets its source subject's level (else the source registry's global level).
SchemaCompatibility = Literal[
    "MIRROR", "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"
]


# Switches take YAML booleans only: a quoted "false" is a string, and pydantic would read it as false here
# while `bool("false")` is true elsewhere (StrictBool fields below).


class _Strict(BaseModel):
    # Validation errors never echo input values: client settings hold credentials.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            if isinstance(value, dict):
                value = redact_settings(value)
            elif isinstance(value, str):
                value = redact_url(value)  # a registry URL with credentials
            yield name, value


class TopicCreation(_Strict):
    """How missing destination topics are created: a fixed count, or the source's, clamped."""

    partitions: int | Literal["mirror-source"] = Field(MIRROR_SOURCE, description="a fixed partition count, or the source topic's")
    min_partitions: int = Field(1, ge=1, description="the partition count is clamped to min..max")
    max_partitions: int = Field(10_000, ge=1, description="the partition count is clamped to min..max")
    replication_factor: int | Literal["mirror-source"] = Field(MIRROR_SOURCE, description="a fixed replication factor, or the source topic's")
    min_replication_factor: int = Field(1, ge=1, description="the replication factor is clamped to min..max")
    max_replication_factor: int = Field(3, ge=1, description="the replication factor is clamped to min..max")
    # The worker's own topics (offset syncs, exactly-once positions, heartbeats, dead letters): as MirrorMaker 2's
    # internal topics, 3 by default, -1 for the destination brokers' default.replication.factor.
    internal_replication_factor: int = 3

    @model_validator(mode="after")
    def _bounds(self) -> "TopicCreation":
        if self.min_partitions > self.max_partitions:
            raise ValueError("min_partitions must not exceed max_partitions")
        if self.min_replication_factor > self.max_replication_factor:
            raise ValueError("min_replication_factor must not exceed max_replication_factor")
        for name in ("partitions", "replication_factor"):
            value = getattr(self, name)
            if isinstance(value, int) and value < 1:
                raise ValueError(f"{name} must be at least 1 or {MIRROR_SOURCE!r}")
        if self.internal_replication_factor < 1 and self.internal_replication_factor != -1:
            raise ValueError("internal_replication_factor must be at least 1, or -1 for the brokers' default")
        return self

    def partitions_for(self, source_partitions: int) -> int:
        wanted = source_partitions if self.partitions == MIRROR_SOURCE else self.partitions
        return max(self.min_partitions, min(self.max_partitions, wanted))

    def replication_factor_for(self, source_replication_factor: int) -> int:
        wanted = (
            source_replication_factor if self.replication_factor == MIRROR_SOURCE else self.replication_factor
        )
        return max(self.min_replication_factor, min(self.max_replication_factor, wanted))

    def internal_replication_factor_for(self, brokers: int) -> int:
        """The worker's own topics' replication factor on a destination of `brokers` live brokers: never more
        than there are (a one-node development cluster gets 1), -1 leaves it to the brokers."""
        if self.internal_replication_factor == -1:
            return -1
        return max(1, min(self.internal_replication_factor, brokers))


class SourceCluster(_Strict):
    name: str
    consumer: ConnectingClientSettings
    schema_registry_url: RegistryUrl = None  # this cluster's registry; MirrorConfig.schema_registry_url if unset
    schema_registry: RegistrySettings = Field(default_factory=dict)  # for whichever of the two URLs applies


class ForwardMirror(_Strict):
    """The mirror a reverse (failback) mirror takes back home: its topic selection and naming (spec `reverse-of`)."""

    name: str
    whitelist: str | None = None
    blacklist: str | None = None
    prefix: str | None = None
    topic_map: dict[str, str] = Field(default_factory=dict)
    provenance_headers: StrictBool

    @model_validator(mode="after")
    def _headers(self) -> "ForwardMirror":
        # Without them the reverse mirror cannot tell the forward mirror's copies from new records.
        if not self.provenance_headers:
            raise ValueError(f"mirror {self.name!r} must write provenance headers (provenance-headers: true) "
                             "for a failback mirror to tell its copies from new records")
        return self

    def topic_filter(self) -> TopicFilter:
        return TopicFilter.from_expressions(self.whitelist, self.blacklist)

    def naming_policy(self) -> NamingPolicy:
        return naming_policy_of(self.prefix, self.topic_map)


def naming_policy_of(prefix: str | None, topic_map: dict[str, str]) -> NamingPolicy:
    if topic_map:
        return ExplicitMapPolicy(dict(topic_map))
    if prefix:
        return PrefixPolicy(prefix)
    return IdentityPolicy()


class MirrorConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    sources: list[SourceCluster] = Field(min_length=1)
    producer: ConnectingClientSettings
    whitelist: str | None = None
    blacklist: str | None = None
    prefix: str | None = None
    topic_map: dict[str, str] = Field(default_factory=dict, description="explicit source topic -> destination topic "
                                      "names (not with prefix)")
    group_id: str = Field(description="the mirror's consumer group on the source (spec default: group-id-prefix + "
                                      "the mirror's name)")
    preserve_partitions: StrictBool = False
    preserve_order: StrictBool = False
    num_streams: int = Field(1, ge=1)
    num_producers: int = Field(1, ge=1)
    # Records in flight across the producers; None: sized from the destination's round trip (config/inflight.py).
    queue_size: int | None = Field(None, ge=10)
    # Bytes of in-flight data (consumer prefetch, producer queues) the sizes stay within (config/inflight.py).
    inflight_budget_bytes: int = Field(DEFAULT_INFLIGHT_BUDGET_BYTES, ge=MIN_INFLIGHT_BUDGET_BYTES)
    max_procs: int | None = Field(None, ge=1)
    topic_creation: TopicCreation = Field(default_factory=TopicCreation)
    provenance_headers: StrictBool = False
    dead_letter_topic: str | None = None
    heartbeat_producer: ClientSettings | None = None
    heartbeat_topic: str = Field("mirror.heartbeats", description="heartbeat records' topic on the destination")
    heartbeat_interval_s: float = Field(5.0, gt=0, description="seconds between heartbeat records")
    schema_registry_url: RegistryUrl = None  # every source's registry unless the source names its own
    destination_schema_registry_url: RegistryUrl = None
    destination_schema_registry: RegistrySettings = Field(default_factory=dict)
    schema_sync: Literal["strict", "lenient"] = "strict"
    # Which keys/values get their schema ids rewritten (schemas/framing.py): auto = those of topics with a key/value subject.
    # YAML 1.1 reads an unquoted `off` as false.
    schema_id_rewrite: Annotated[Literal["auto", "off", "force"], BeforeValidator(lambda v: "off" if v is False else v)] = "auto"
    schema_compatibility: Annotated[SchemaCompatibility, BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)] = "MIRROR"
    commit_interval_s: float = Field(5.0, gt=0, description="how often delivered offsets are committed "
                                     "(flag --offset.commit.interval.ms, in ms)")
    # Exactly-once: commit cycles start this often (engine/cadence.py), so read_committed readers see a record
    # about this late plus a cycle (the source group's offsets are still committed every commit_interval_s).
    transaction_interval_ms: int = Field(30, gt=0)
    topic_refresh_interval_s: float = Field(10.0, gt=0, description="how often source topics are discovered again "
                                            "and destination topics created or grown")
    startup_timeout_s: float = Field(30.0, gt=0, description="timeout of the cluster calls made at start")
    shutdown_timeout_s: float = Field(25.0, gt=0, description="SIGTERM/SIGINT flushes and commits within this; "
                                      "the process exits within it and 5 s more")
    metrics_port: int | None = Field(None, ge=0, le=65535)
    # A partition whose records wait while none is copied this long (at least two commit intervals) is
    # reported stalled (engine/stalls.py).
    stall_timeout_s: float = Field(30.0, gt=0)
    delivery: Literal["at-least-once", "exactly-once"] = Field("at-least-once", description="exactly-once: records "
                                                              "and source positions in one destination transaction per "
                                                              "source partition (flag --exactly.once)")
    on_data_loss: Literal["halt", "reset"] = "halt"
    # Topic-config sync (topics/configs.py): every N ms, 0 disables it (creation copies nothing either).
    config_sync_interval_ms: int = Field(60_000, ge=0)
    config_sync_exclude: list[str] = Field(default_factory=list)  # regexes, on top of MM2's defaults
    # Topic ACL sync (dr/acl_rules.py): read-side ACLs copied every N ms, 0 (the default) disables it in the worker.
    acl_sync_interval_ms: int = Field(0, ge=0)
    acl_sync_principals: list[str] = Field(default_factory=list)  # regexes over `User:name`; empty: every principal
    acl_sync_exclude_principals: list[str] = Field(default_factory=list, description="regexes: never these principals' "
                                                   "ALLOW bindings")
    # Group offset sync (dr/group_rules.py): chosen source groups' translated offsets written forward to their
    # destination groups without members every N ms; 0 (the default) disables it in the worker.
    group_offset_sync_interval_ms: int = Field(0, ge=0)
    group_offset_sync_groups: list[str] = Field(default_factory=list)  # regexes over group ids; empty: every group
    group_offset_sync_exclude_groups: list[str] = Field(default_factory=list, description="regexes: never these groups "
                                                        "(always: console-consumer-.*, connect-.*, __.*, the mirror's own)")
    # Offset syncs for failover (dr/offset_syncs.py); written only with preserve_partitions.
    offset_syncs: StrictBool = True
    # Static group membership (config/membership.py): opt-in, since a static member that stops cleanly does not leave
    # the group and its partitions idle until session.timeout.ms. The slot comes from --worker.slot.
    static_membership: StrictBool = False
    worker_slot: int = Field(0, ge=0)
    # A record whose provenance header names this mirror's destination cluster came from there: `halt` its
    # partition (a loop nobody meant), or `skip` it (a failback pair: those records exist there already).
    origin_records: Literal["halt", "skip"] = "halt"
    # Failback (spec `reverse-of`): mirror back what the forward mirror copied, by its inverse naming, starting
    # each partition without a position just after the forward mirror's last copy (dr/failback.py).
    reverse_of: ForwardMirror | None = None

    @field_validator("config_sync_exclude", "acl_sync_principals", "acl_sync_exclude_principals",
                     "group_offset_sync_groups", "group_offset_sync_exclude_groups")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for expression in value:
            try:
                re.compile(expression)
            except re.error as exc:
                raise ValueError(f"invalid regex {expression!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> "MirrorConfig":
        if self.reverse_of is not None:
            self._check_reverse()
        elif (self.whitelist is None) == (self.blacklist is None):
            raise ValueError("exactly one of whitelist and blacklist is required")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source cluster names must be unique, got {names}")
        if self.prefix is not None and self.topic_map:
            raise ValueError("prefix and topic_map cannot be combined")
        if self.exactly_once:
            for source in self.sources:
                if source.consumer.get("isolation.level", "read_committed") != "read_committed":
                    raise ValueError(f"exactly-once needs a read_committed consumer (source {source.name!r} "
                                     f"sets isolation.level={source.consumer['isolation.level']})")
            if "transactional.id" in self.producer:
                raise ValueError("exactly-once chooses transactional.id per source partition: remove it "
                                 "from the producer settings")
        for source in self.sources:
            if source.consumer.get("group.id", self.group_id) != self.group_id:
                raise ValueError(f"source {source.name!r}: group.id differs from the mirror's consumer group "
                                 f"{self.group_id} (one mirror, one consumer group)")
            if "group.instance.id" in source.consumer:
                raise ValueError(f"source {source.name!r}: group.instance.id is derived per worker slot and stream: "
                                 "set static-membership (--static.membership) and --worker.slot instead")
            if self.static_membership:
                check_instance_id(self.group_id, source.name, self.worker_slot, self.process_count)
        if self.group_offset_sync_interval_ms and not self.preserve_partitions:
            raise ValueError("group-offset-sync-interval-ms needs preserve-partitions: offsets translate only when "
                             "each destination partition holds its source partition's records")
        has_source_registry = any(self.source_registry_url(s) for s in self.sources)
        if self.destination_schema_registry_url and not has_source_registry:
            raise ValueError("a destination schema registry needs a source schema registry "
                             "(--schema.registry.url or the source's schema-registry-url)")
        if has_source_registry and not self.destination_schema_registry_url:
            raise ValueError("a source schema registry needs a destination schema registry to sync schemas and "
                             "rewrite schema ids (--destination.schema.registry.url or the destination's "
                             "schema-registry-url)")
        for source in self.sources:
            if source.schema_registry and not self.source_registry_url(source):
                raise ValueError(f"source {source.name!r}: schema registry settings without a schema registry URL")
        if self.destination_schema_registry and not self.destination_schema_registry_url:
            raise ValueError("destination schema registry settings without a destination schema registry URL")
        return self

    def _check_reverse(self) -> None:
        forward = self.reverse_of.name
        for key in ("whitelist", "blacklist", "prefix", "topic_map"):
            if getattr(self, key):
                raise ValueError(f"reverse-of: mirror {forward!r} decides the topics and their names: "
                                 f"remove {key.replace('_', '-')}")
        if not self.provenance_headers:
            raise ValueError("reverse-of needs provenance-headers: the forward mirror, resumed after the failback, "
                             "tells this mirror's copies by them")
        if self.origin_records != "skip":
            raise ValueError("reverse-of needs origin-records: skip (the forward mirror's copies are already "
                             "on the destination)")

    # Derived, pure views -----------------------------------------------------------------------
    def topic_filter(self) -> TopicFilter | ReverseTopicFilter:
        if self.reverse_of is not None:
            return ReverseTopicFilter(self.reverse_of.topic_filter(), self.reverse_of.naming_policy().upstream_topic)
        return TopicFilter.from_expressions(self.whitelist, self.blacklist)

    def naming_policy(self) -> NamingPolicy:
        if self.reverse_of is not None:
            return InversePolicy(self.reverse_of.naming_policy())
        return naming_policy_of(self.prefix, self.topic_map)

    def source_registry_url(self, source: SourceCluster) -> str | None:
        return source.schema_registry_url or self.schema_registry_url

    def source_registry(self, source: SourceCluster) -> dict | None:
        """The source's registry as SchemaRegistryClient config (URL, auth, TLS); None without one."""
        url = self.source_registry_url(source)
        return client_config(url, source.schema_registry) if url else None

    @property
    def destination_registry(self) -> dict | None:
        """The destination registry as SchemaRegistryClient config; None without one."""
        url = self.destination_schema_registry_url
        return client_config(url, self.destination_schema_registry) if url else None

    @property
    def syncs_schemas(self) -> bool:
        return self.destination_schema_registry_url is not None

    @property
    def offset_syncs_topic(self) -> str:
        """Compacted, on the destination; `topic_filter.INTERNAL_TOPIC_PATTERNS` keeps it from being mirrored."""
        return f"{self.name}.mirror.offset-syncs"

    @property
    def positions_topic(self) -> str:
        """Exactly-once: compacted, on the destination; which partitions ever had a position (exactly_once/transactions.py)."""
        return f"{self.name}.mirror.eos-positions"

    @property
    def writes_offset_syncs(self) -> bool:
        return self.offset_syncs and self.preserve_partitions

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    @property
    def process_count(self) -> int:
        """Worker processes: one per stream, capped by --max.procs."""
        return min(self.num_streams, self.max_procs or self.num_streams)


def build_mirror_config(fields: dict, where: str = "", key_style=str) -> MirrorConfig:
    """Validate `fields` into a MirrorConfig; the problem becomes a one-line ConfigError: every unknown key
    (with the known key it is likely a typo of), else the first other problem.

    `key_style` spells field names as the input did (the YAML spec uses kebab-case).
    """
    try:
        config = MirrorConfig(**fields)
        config.topic_filter()  # compiles the regexes: an invalid one is bad input
        config.naming_policy()
        return config
    except ValidationError as exc:
        raise ConfigError(_error_line(exc, where, key_style)) from None


def _error_line(exc: ValidationError, where: str, key_style) -> str:
    prefix = f"{where}: " if where else ""
    errors = exc.errors()
    unknown = [e["loc"] for e in errors if e["type"] == "extra_forbidden"]
    if unknown:  # all of them at once: a typo is fixed in one go, not one run per typo
        return prefix + "; ".join(sorted(
            unknown_key(_location(loc, key_style), _known_at(MirrorConfig, loc[:-1], key_style)) for loc in unknown))
    error = errors[0]
    location = _location(error["loc"], key_style)
    message = re.sub(r"^(Value error|Assertion failed), ", "", error["msg"])
    return f"{prefix}{location}: {message}" if location else f"{prefix}{message}"


def _location(loc: tuple, key_style) -> str:
    return ".".join(key_style(p) if isinstance(p, str) else str(p) for p in loc)


def _known_at(model: type[BaseModel], path: tuple, key_style) -> list[str]:
    """The keys the model nested at `path` (e.g. `topic_creation`) takes, spelled as the input spells them."""
    for part in path:
        if isinstance(part, int):
            continue  # a list's index: the list's items are the model
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return []
    return [key_style(name) for name in model.model_fields]


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)

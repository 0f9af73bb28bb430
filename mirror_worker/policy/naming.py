"""Topic naming policies: where a source topic lands on the destination, and the way back.

A policy is pure string code. `remote_topic` formats the destination name; `upstream_topic` inverts it
(None when the name is not one this policy makes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirror_worker.exceptions import ConfigError, TopicMappingError


class NamingPolicy:
    def remote_topic(self, source_topic: str) -> str:
        raise NotImplementedError

    def upstream_topic(self, destination_topic: str) -> str | None:
        raise NotImplementedError

    @property
    def is_identity(self) -> bool:
        return False


@dataclass(frozen=True)
class IdentityPolicy(NamingPolicy):
    def remote_topic(self, source_topic: str) -> str:
        return source_topic

    def upstream_topic(self, destination_topic: str) -> str | None:
        return destination_topic

    @property
    def is_identity(self) -> bool:
        return True


@dataclass(frozen=True)
class PrefixPolicy(NamingPolicy):
    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ConfigError("prefix: must not be empty (omit it for identity naming)")
        validate_topic_name(self.prefix + "x", what="prefix")

    def remote_topic(self, source_topic: str) -> str:
        return self.prefix + source_topic

    def upstream_topic(self, destination_topic: str) -> str | None:
        if destination_topic.startswith(self.prefix) and len(destination_topic) > len(self.prefix):
            return destination_topic[len(self.prefix):]
        return None


@dataclass(frozen=True)
class ExplicitMapPolicy(NamingPolicy):
    """An explicit source -> destination map; topics not in it fall back to `fallback`."""

    mapping: dict[str, str] = field(default_factory=dict)
    fallback: NamingPolicy = field(default_factory=IdentityPolicy)

    def __post_init__(self) -> None:
        targets = list(self.mapping.values())
        duplicates = sorted({t for t in targets if targets.count(t) > 1})
        if duplicates:
            raise ConfigError(f"topic-map: several source topics map to {duplicates[0]!r}")
        for target in targets:
            validate_topic_name(target, what="topic-map")

    def remote_topic(self, source_topic: str) -> str:
        if source_topic in self.mapping:
            return self.mapping[source_topic]
        return self.fallback.remote_topic(source_topic)

    def upstream_topic(self, destination_topic: str) -> str | None:
        for source, target in self.mapping.items():
            if target == destination_topic:
                return source
        upstream = self.fallback.upstream_topic(destination_topic)
        return None if upstream in self.mapping else upstream

    @property
    def is_identity(self) -> bool:
        return all(s == t for s, t in self.mapping.items()) and self.fallback.is_identity


@dataclass(frozen=True)
class InversePolicy(NamingPolicy):
    """A reverse (failback) mirror's naming: the forward mirror's policy read backwards. The forward mirror
    wrote source topic S to forward.remote_topic(S); mirroring back takes that name home to S."""

    forward: NamingPolicy

    def remote_topic(self, source_topic: str) -> str:
        upstream = self.forward.upstream_topic(source_topic)
        if upstream is None:
            raise TopicMappingError(f"topic {source_topic!r} is not one the forward mirror names: it has no way back")
        return upstream

    def upstream_topic(self, destination_topic: str) -> str | None:
        return self.forward.remote_topic(destination_topic)

    @property
    def is_identity(self) -> bool:
        return self.forward.is_identity


_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_topic_name(name: str, what: str = "topic") -> None:
    """Kafka's rule: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name or len(name) > 249 or name in (".", "..") or not set(name) <= _LEGAL:
        raise ConfigError(f"{what}: {name!r} is not a legal Kafka topic name")


def check_mapping(topics: list[str], policy: NamingPolicy, topic_filter, same_cluster: bool) -> None:
    """Refuse mappings that write a topic into itself or feed the mirror its own output.

    Only a mirror whose source and destination are the same cluster can do either directly:
    identity naming writes each topic into itself, and a mirrored topic that the filter would select
    again is mirrored again, forever (orders -> p.orders -> p.p.orders ...). Cycles through other
    clusters are caught record by record with the provenance header (see engine/worker.py).
    """
    if not same_cluster:
        return
    for topic in topics:
        remote = policy.remote_topic(topic)
        if remote == topic:
            raise TopicMappingError(
                f"mirror would write topic {topic!r} into itself (source and destination are the same cluster)"
            )
        if topic_filter.should_replicate(remote):
            raise TopicMappingError(
                f"mirror would form a cycle: {topic!r} -> {remote!r}, which the topic filter selects again "
                "on the same cluster"
            )

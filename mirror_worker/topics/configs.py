"""Destination topic configs follow their source: what to copy (pure) and the admin edge that copies it.

As MirrorMaker 2 does by default, only configs *explicitly set on the source topic* are copied (config
source DYNAMIC_TOPIC_CONFIG): broker-level values and defaults are the destination broker's business.
Keys that describe one cluster's brokers, or that are unsafe to impose on another cluster, are never
copied (`DEFAULT_EXCLUDED_CONFIGS`, MM2's `config.properties.exclude` default); a mirror adds its own
regexes with `config_sync_exclude`. Only SET operations are issued: a setting that exists only on the
destination is left alone, since an operator may have set it there on purpose (e.g. a longer retention
for a disaster-recovery copy).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from mirror_worker.exceptions import ConfigError
from mirror_worker.topics.timestamp_limits import effective_values, new_topic_limits, widened_limits

log = logging.getLogger("mirror_worker")

# MirrorMaker 2's DefaultConfigPropertyFilter default (`config.properties.exclude`), as regexes, plus Kafka 4's
# timestamp limits (raised where the source accepts more, never copied: timestamp_limits.py).
DEFAULT_EXCLUDED_CONFIGS = (
    r"follower\.replication\.throttled\.replicas",  # names broker ids of the source cluster
    r"leader\.replication\.throttled\.replicas",    # idem
    r"message\.timestamp\.difference\.max\.ms",     # would refuse mirrored records that carry old timestamps
    # Kafka 4 keeps only these two in its place: the same refusal of records with old (or future) timestamps.
    r"message\.timestamp\.before\.max\.ms",
    r"message\.timestamp\.after\.max\.ms",
    r"message\.timestamp\.type",                    # LogAppendTime would overwrite the source timestamps
    r"unclean\.leader\.election\.enable",           # a durability choice of the destination's operators
    r"min\.insync\.replicas",                       # depends on the destination's replication factor
)

TopicConfigs = dict[str, str]


@dataclass(frozen=True)
class ConfigChange:
    name: str
    old: str | None  # the destination's explicit value, None when it had none
    new: str


def exclusion_pattern(extra: list[str] | tuple[str, ...] = ()) -> re.Pattern:
    """One regex of the default exclusions and `extra` (each matched against whole key names)."""
    parts = list(DEFAULT_EXCLUDED_CONFIGS)
    for expression in extra:
        try:
            re.compile(expression)
        except re.error as exc:
            raise ConfigError(f"config_sync_exclude: invalid regex {expression!r}: {exc}") from None
        parts.append(expression)
    return re.compile("|".join(f"(?:{p})" for p in parts))


def copied_configs(source: TopicConfigs, excluded: re.Pattern) -> TopicConfigs:
    """The source topic's explicit configs that the destination takes."""
    return {k: v for k, v in source.items() if excluded.fullmatch(k) is None}


def plan_config_changes(source: TopicConfigs, destination: TopicConfigs, excluded: re.Pattern) -> list[ConfigChange]:
    """SET operations that make `destination` (its explicit configs) carry `source`'s copied configs.

    Never a delete: keys set only on the destination, and excluded keys, stay as they are.
    """
    return [
        ConfigChange(name, destination.get(name), value)
        for name, value in sorted(copied_configs(source, excluded).items())
        if destination.get(name) != value
    ]


def explicit_configs(entries: dict[str, ConfigEntry]) -> TopicConfigs:
    """Entries set on the topic itself (not inherited from the broker or a default); secrets never."""
    return {
        name: entry.value for name, entry in entries.items()
        if _source_of(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG and not entry.is_sensitive and entry.value is not None
    }


def _source_of(entry: ConfigEntry) -> ConfigSource:
    # describe_configs results carry the source as a plain int, not the enum.
    return ConfigSource(getattr(entry.source, "value", entry.source))


def describe_config_entries(admin: AdminClient, topics: list[str], timeout: float = 30.0) -> dict[str, dict[str, ConfigEntry]]:
    """{topic: every config entry, broker defaults included}; topics that vanished meanwhile are left out."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    result = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            result[resource.name] = future.result(timeout)
        except KafkaException as exc:
            log.warning("topic configs not readable", extra={"topic": resource.name, "error": exc.args[0].str()})
    return result


def describe_explicit_configs(admin: AdminClient, topics: list[str], timeout: float = 30.0) -> dict[str, TopicConfigs]:
    """{topic: explicit configs}; topics that vanished meanwhile are left out."""
    return {topic: explicit_configs(entries) for topic, entries in describe_config_entries(admin, topics, timeout).items()}


def plan_limit_changes(source: TopicConfigs, destination: TopicConfigs, explicit: TopicConfigs) -> list[ConfigChange]:
    """SET operations raising the destination's timestamp limits to what the source accepts (`source`,
    `destination`: effective configs; `explicit`: the destination's own); none on a destination before 3.6."""
    return [ConfigChange(name, explicit.get(name), value)
            for name, value in sorted((widened_limits(source, destination) or {}).items())]


def apply_config_changes(admin: AdminClient, changes: dict[str, list[ConfigChange]], timeout: float = 30.0) -> dict[str, str]:
    """incremental_alter_configs SET per topic; returns {topic: error} of the topics that refused."""
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(c.name, c.new, incremental_operation=AlterConfigOpType.SET) for c in topic_changes
        ])
        for topic, topic_changes in changes.items() if topic_changes
    ]
    if not resources:
        return {}
    errors = {}
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            errors[resource.name] = exc.args[0].str()
    return errors


class AppliedChanges:
    """The config changes this process set on destination topics and has not read back yet, so that each is
    reported (logged, counted) once.

    A destination broker busy with other work answers a topic's configs from metadata that lags its controller:
    a read right after a change can give the old value for seconds (1-2 s after 200 topic creations, 4-21 s under
    constant creation: test_topic_sync.py). The next pass then plans the same change again; it is set again (SET is
    idempotent) but is not news. A change is forgotten once a pass that read its topic no longer plans it, so an
    operator's later edit, undone by the sync, is reported again."""

    def __init__(self) -> None:
        self.unseen: dict[tuple[str, str], str] = {}  # (destination topic, config) -> the value set

    def news(self, read: set[str], applied: dict[str, list[ConfigChange]]) -> dict[str, list[ConfigChange]]:
        """Of one pass's `applied` changes (per destination topic), those not set before and still unseen.
        `read`: the destination topics whose configs that pass read."""
        planned = {(topic, change.name) for topic, changes in applied.items() for change in changes}
        for key in [k for k in self.unseen if k[0] in read and k not in planned]:
            del self.unseen[key]
        news: dict[str, list[ConfigChange]] = {}
        for topic, changes in applied.items():
            for change in changes:
                if self.unseen.get((topic, change.name)) != change.new:
                    news.setdefault(topic, []).append(change)
                self.unseen[(topic, change.name)] = change.new
        return news


def creation_configs(source_admin: AdminClient, destination_admin: AdminClient, mapping: dict[str, str],
                     copying: bool, excluded: re.Pattern, timeout: float = 30.0,
                     ) -> tuple[dict[str, TopicConfigs], str | None]:
    """What each destination topic (mapping: source -> destination) is created with, by the worker, the catch-up
    and the Airflow task alike: the source's copied configs when config sync is on, and the timestamp limits
    raised to what the source accepts, config sync on or off (a topic created without them may refuse the
    source's records, Kafka 4 defaulting to one hour ahead, and halt their partitions).

    Returns ({destination topic: configs}, None) or, when the limits cannot be raised, (..., why not).
    """
    defaults, why = new_topic_limits(destination_admin, timeout)
    configs = {}
    for topic, entries in describe_config_entries(source_admin, sorted(mapping), timeout).items():
        wanted = copied_configs(explicit_configs(entries), excluded) if copying else {}
        if defaults is not None:
            wanted.update(widened_limits(effective_values(entries), defaults) or {})
        configs[mapping[topic]] = wanted
    return configs, (why if defaults is None else None)


def sync_topic_configs(source_admin: AdminClient, destination_admin: AdminClient, mapping: dict[str, str],
                       excluded: re.Pattern, timeout: float = 30.0) -> tuple[dict[str, list[ConfigChange]], dict[str, str]]:
    """Copy each source topic's configs to its destination topic (mapping: source -> destination), and raise
    the destination's timestamp limits where the source accepts more.

    Returns (changes applied per destination topic, errors per destination topic).
    """
    sources = describe_config_entries(source_admin, sorted(mapping), timeout)
    destinations = describe_config_entries(destination_admin, sorted({mapping[t] for t in sources}), timeout)
    plans = {}
    for topic, entries in sources.items():
        remote = destinations.get(mapping[topic])
        if remote is None:
            continue
        explicit = explicit_configs(remote)
        plans[mapping[topic]] = sorted(
            plan_config_changes(explicit_configs(entries), explicit, excluded)
            + plan_limit_changes(effective_values(entries), effective_values(remote), explicit),
            key=lambda change: change.name)
    plans = {topic: changes for topic, changes in plans.items() if changes}
    errors = apply_config_changes(destination_admin, plans, timeout)
    return {t: c for t, c in plans.items() if t not in errors}, errors

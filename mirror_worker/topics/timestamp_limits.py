"""Destination topics at least as permissive about record timestamps as their sources (pure, plus its admin edge).

A broker refuses a CreateTime record stamped more than `message.timestamp.after.max.ms` ahead of its clock or
`message.timestamp.before.max.ms` behind it (Kafka 3.6+; before, one symmetric
`message.timestamp.difference.max.ms`). Kafka 4 defaults `after` to one hour, where older brokers accept any:
a record a 3.x source took, stamped by a drifting clock, would be refused by a 4.x destination and halt its
partition for good. So the worker raises a destination topic's limits to what its source accepts.

Only ever raised, never copied: a source's *current* limit may be stricter than what it accepted when its old
records were written, and copying it would make the destination refuse them (config sync excludes these keys
for that reason, `configs.DEFAULT_EXCLUDED_CONFIGS`). The destination keeps the larger of the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

log = logging.getLogger("mirror_worker")

BEFORE = "message.timestamp.before.max.ms"
AFTER = "message.timestamp.after.max.ms"
DIFFERENCE = "message.timestamp.difference.max.ms"  # brokers before 3.6 know only this one; Kafka 4 dropped it
LIMITS = (BEFORE, AFTER)
ACCEPTS_ANY = 9223372036854775807  # Long.MAX_VALUE, the default of all three before Kafka 4
BROKER_PREFIX = "log."  # a broker's default for a topic config `x` is its config `log.x`


def accepted_limits(configs: Mapping[str, str]) -> dict[str, int]:
    """{before/after key: milliseconds} a topic of these effective configs (describe_configs, broker defaults
    included) accepts.

    As Kafka's LogConfig reads them: `before`/`after` left at Long.MAX fall back to `difference` (3.6 to 3.9
    keep the older key meaningful that way); a cluster without `before`/`after` (before 3.6) has `difference`
    alone, and a cluster without any of them accepts any timestamp.
    """
    fallback = int(configs.get(DIFFERENCE) or ACCEPTS_ANY)
    limits = {}
    for key in LIMITS:
        value = int(configs.get(key) or ACCEPTS_ANY)
        limits[key] = value if value != ACCEPTS_ANY else fallback
    return limits


def knows_limits(configs: Mapping[str, str]) -> bool:
    """The cluster knows `before`/`after` (3.6+): a topic may be created with them, or have them set."""
    return all(key in configs for key in LIMITS)


def widened_limits(source: Mapping[str, str], destination: Mapping[str, str]) -> dict[str, str] | None:
    """The limits to set on the destination topic so that it takes whatever the source took: those where the
    source accepts more, at the source's value; never one that would make the destination stricter.

    `source`, `destination`: effective configs (for a topic not created yet, the destination broker's defaults,
    `topic_defaults`). None when the destination does not know the limits (before 3.6): nothing can be set there.
    """
    if not knows_limits(destination):
        return None
    wanted, current = accepted_limits(source), accepted_limits(destination)
    return {key: str(wanted[key]) for key in LIMITS if wanted[key] > current[key]}


def topic_defaults(broker_configs: Mapping[str, str]) -> dict[str, str]:
    """The timestamp limits a new topic gets from a broker of these configs (`log.`-prefixed keys)."""
    return {key: broker_configs[BROKER_PREFIX + key] for key in (*LIMITS, DIFFERENCE)
            if broker_configs.get(BROKER_PREFIX + key) is not None}


def effective_values(entries: Mapping) -> dict[str, str]:
    """{name: value} of describe_configs entries, whatever their source (topic, broker, default)."""
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def describe_broker_defaults(admin: AdminClient, timeout: float = 30.0) -> tuple[dict[str, str] | None, str]:
    """(the timestamp limits a new topic of this cluster gets, ""), or (None, why they are not known).

    One broker is asked: topic defaults are cluster-wide in practice, and a new topic's leaders are anywhere.
    """
    try:
        brokers = sorted(admin.list_topics(timeout=timeout).brokers)
        if not brokers:
            return None, "no destination broker answered"
        resource = ConfigResource(ConfigResource.Type.BROKER, str(brokers[0]))
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    except KafkaException as exc:
        return None, f"destination broker configs not readable: {exc.args[0].str()}"
    return topic_defaults(effective_values(entries)), ""


def new_topic_limits(admin: AdminClient, timeout: float = 30.0) -> tuple[dict[str, str] | None, str]:
    """(the timestamp limits a new topic of this cluster gets, ""), or (None, why they cannot be raised at creation):
    a cluster before Kafka 3.6 does not know them, and refuses to create a topic that names them."""
    defaults, why = describe_broker_defaults(admin, timeout)
    if defaults is not None and not knows_limits(defaults):
        return None, ("destination brokers do not know message.timestamp.before.max.ms / after.max.ms "
                      "(Kafka before 3.6): their message.timestamp.difference.max.ms applies")
    return defaults, why

"""Destination timestamp limits raised to what the source accepts, never lowered (issue 43, defect 4), no broker."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigEntry, ConfigSource

from mirror_worker.topics.configs import (
    ConfigChange,
    creation_configs,
    exclusion_pattern,
    plan_limit_changes,
    sync_topic_configs,
)
from mirror_worker.topics.timestamp_limits import (
    ACCEPTS_ANY,
    AFTER,
    BEFORE,
    DIFFERENCE,
    accepted_limits,
    describe_broker_defaults,
    topic_defaults,
    widened_limits,
)
from tests.unit.fakes import FakeFuture, make_worker

ANY = str(ACCEPTS_ANY)
HOUR, DAY = "3600000", "86400000"
KAFKA_4 = {BEFORE: ANY, AFTER: HOUR}                     # Kafka 4's defaults (no difference.max.ms any more)
KAFKA_3_6 = {BEFORE: ANY, AFTER: ANY, DIFFERENCE: ANY}   # 3.6 to 3.9
KAFKA_3_5 = {DIFFERENCE: ANY}                            # before 3.6: the symmetric limit alone


@pytest.mark.parametrize("source, destination, expected", [
    # A source before 3.6 took any timestamp: a Kafka 4 destination must too (the defect: 1 h ahead refused).
    (KAFKA_3_5, KAFKA_4, {AFTER: ANY}),
    ({}, KAFKA_4, {AFTER: ANY}),                                     # no limit known at all: any was taken
    # A source before 3.6 with a symmetric limit of a day: a day ahead, a day behind (already taken: any).
    ({DIFFERENCE: DAY}, KAFKA_4, {AFTER: DAY}),
    # 3.6 to 3.9: before/after at Long.MAX fall back to difference.max.ms, as Kafka's LogConfig reads them.
    ({**KAFKA_3_6, DIFFERENCE: "7200000"}, KAFKA_4, {AFTER: "7200000"}),
    (KAFKA_3_6, KAFKA_4, {AFTER: ANY}),
    (KAFKA_4, KAFKA_4, {}),                                          # same limits: nothing set
    # A source stricter now than the destination: never copied (its old records would be refused).
    ({BEFORE: HOUR, AFTER: "60000"}, KAFKA_4, {}),
    # A destination already looser: left alone, whatever the source.
    (KAFKA_3_5, {BEFORE: ANY, AFTER: ANY}, {}),
    ({DIFFERENCE: DAY}, {BEFORE: ANY, AFTER: "172800000"}, {}),
    # A destination stricter both ways: each raised to the source's.
    (KAFKA_3_5, {BEFORE: DAY, AFTER: HOUR}, {BEFORE: ANY, AFTER: ANY}),
    ({BEFORE: "7200000", AFTER: DAY}, {BEFORE: HOUR, AFTER: HOUR}, {BEFORE: "7200000", AFTER: DAY}),
    # A 3.6-3.9 destination with its defaults takes any: nothing set.
    (KAFKA_3_5, KAFKA_3_6, {}),
])
def test_the_destination_takes_the_larger_limit(source, destination, expected):
    assert widened_limits(source, destination) == expected


@pytest.mark.parametrize("destination", [KAFKA_3_5, {}, {AFTER: HOUR}])
def test_a_destination_that_does_not_know_the_limits_gets_none(destination):
    # Before 3.6 a topic that names them is refused (INVALID_CONFIG): nothing may be set there.
    assert widened_limits(KAFKA_3_5, destination) is None


def test_accepted_limits_read_as_kafka_does():
    assert accepted_limits(KAFKA_4) == {BEFORE: ACCEPTS_ANY, AFTER: 3_600_000}
    assert accepted_limits({DIFFERENCE: DAY}) == {BEFORE: 86_400_000, AFTER: 86_400_000}
    assert accepted_limits({BEFORE: HOUR, AFTER: ANY, DIFFERENCE: DAY}) == {BEFORE: 3_600_000, AFTER: 86_400_000}
    assert accepted_limits({}) == {BEFORE: ACCEPTS_ANY, AFTER: ACCEPTS_ANY}


def test_a_new_topic_gets_the_brokers_log_prefixed_defaults():
    broker = {"log.message.timestamp.before.max.ms": ANY, "log.message.timestamp.after.max.ms": HOUR,
              "log.retention.ms": "1", "message.max.bytes": "2"}
    assert topic_defaults(broker) == KAFKA_4
    assert topic_defaults({"log.message.timestamp.difference.max.ms": ANY}) == KAFKA_3_5


def test_a_raise_is_a_config_change_from_the_destinations_explicit_value():
    assert plan_limit_changes(KAFKA_3_5, {BEFORE: ANY, AFTER: HOUR, "x": "1"}, {AFTER: HOUR}) == [
        ConfigChange(AFTER, HOUR, ANY)]
    assert plan_limit_changes(KAFKA_3_5, KAFKA_4, {}) == [ConfigChange(AFTER, None, ANY)]
    assert plan_limit_changes(KAFKA_3_5, KAFKA_3_5, {}) == []  # destination before 3.6: nothing asked


# ------------------------------------------------------------------ admin edge, with fake admins

def _entries(configs: dict[str, str], explicit: tuple[str, ...] = ()) -> dict[str, ConfigEntry]:
    return {name: ConfigEntry(name, value, source=(ConfigSource.DYNAMIC_TOPIC_CONFIG if name in explicit
                                                     else ConfigSource.DEFAULT_CONFIG).value)
            for name, value in configs.items()}


class ConfigsAdmin:
    """describe_configs: `topics` ({name: entries}) and one broker's `broker` configs; records alterations."""

    def __init__(self, topics: dict | None = None, broker: dict | None = None, broker_error: int | None = None) -> None:
        self.topics, self.broker, self.broker_error = topics or {}, broker or {}, broker_error
        self.altered: list = []

    def list_topics(self, topic=None, timeout=None):
        return SimpleNamespace(brokers={2: object(), 1: object()}, topics={})

    def describe_configs(self, resources, request_timeout=None):
        from confluent_kafka.admin import ConfigResource
        out = {}
        for r in resources:
            if r.restype == ConfigResource.Type.BROKER:
                assert r.name == "1"  # one broker asked, the same each time
                out[r] = FakeFuture(_entries(self.broker), self.broker_error)
            else:
                out[r] = FakeFuture(self.topics.get(r.name), None if r.name in self.topics else KafkaError.UNKNOWN_TOPIC_OR_PART)
        return out

    def incremental_alter_configs(self, resources, request_timeout=None):
        self.altered += [(r.name, [(e.name, e.value) for e in r.incremental_configs]) for r in resources]
        return {r: FakeFuture() for r in resources}


def test_config_sync_raises_the_limits_beside_the_copied_configs():
    source = ConfigsAdmin({"t": _entries({**KAFKA_3_5, "retention.ms": "5"}, explicit=("retention.ms",))})
    destination = ConfigsAdmin({"dc.t": _entries(KAFKA_4)})
    changes, errors = sync_topic_configs(source, destination, {"t": "dc.t"}, exclusion_pattern())
    assert errors == {}
    assert destination.altered == [("dc.t", [(AFTER, ANY), ("retention.ms", "5")])]
    assert changes == {"dc.t": [ConfigChange(AFTER, None, ANY), ConfigChange("retention.ms", None, "5")]}


def test_config_sync_leaves_a_looser_or_older_destination_alone():
    source = ConfigsAdmin({"t": _entries(KAFKA_3_5)})
    for destination_configs in ({BEFORE: ANY, AFTER: ANY}, KAFKA_3_5):
        destination = ConfigsAdmin({"dc.t": _entries(destination_configs)})
        assert sync_topic_configs(source, destination, {"t": "dc.t"}, exclusion_pattern()) == ({}, {})
        assert destination.altered == []


def test_broker_defaults_or_why_not():
    assert describe_broker_defaults(ConfigsAdmin(broker={"log.message.timestamp.before.max.ms": ANY,
                                                         "log.message.timestamp.after.max.ms": HOUR})) == (KAFKA_4, "")
    defaults, why = describe_broker_defaults(ConfigsAdmin(broker_error=KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    assert defaults is None and why.startswith("destination broker configs not readable")


KAFKA_4_BROKER = {"log.message.timestamp.before.max.ms": ANY, "log.message.timestamp.after.max.ms": HOUR}


@pytest.mark.parametrize("sync_ms", [0, 60_000])
def test_a_new_destination_topic_is_created_taking_what_its_source_took(sync_ms):
    """Config sync on or off: a topic created with Kafka 4's one hour would refuse what a 3.x source took."""
    worker, stream, _, _ = make_worker({("t", 0): []}, config_sync_interval_ms=sync_ms)
    stream.admin = ConfigsAdmin({"t": _entries({**KAFKA_3_5, "retention.ms": "5"}, explicit=("retention.ms",))})
    worker.topics.admin = ConfigsAdmin(broker=KAFKA_4_BROKER)
    copied = {"retention.ms": "5"} if sync_ms else {}
    assert worker.topics._creation_configs(stream, ["t"]) == {"dst.t": {**copied, AFTER: ANY}}


def test_a_destination_before_3_6_gets_topics_without_the_limits_said_once(caplog):
    worker, stream, _, _ = make_worker({("t", 0): []})
    stream.admin = ConfigsAdmin({"t": _entries(KAFKA_3_5)})
    worker.topics.admin = ConfigsAdmin(broker={"log.message.timestamp.difference.max.ms": ANY})
    caplog.set_level(logging.WARNING, logger="mirror_worker")
    for _ in range(2):
        assert worker.topics._creation_configs(stream, ["t"]) == {"dst.t": {}}
    said = [r for r in caplog.records if r.getMessage() == "destination timestamp limits not raised at topic creation"]
    assert len(said) == 1 and "before 3.6" in said[0].reason


@pytest.mark.parametrize("copying", [False, True])
def test_the_catch_up_and_the_airflow_task_create_topics_with_the_workers_configs(copying):
    """`creation_configs`, the one rule the worker, the catch-up and EnsureDestinationTopicsOperator share."""
    source = ConfigsAdmin({"t": _entries({**KAFKA_3_5, "retention.ms": "5"}, explicit=("retention.ms",)),
                           "u": _entries(KAFKA_4)})
    configs, why = creation_configs(source, ConfigsAdmin(broker=KAFKA_4_BROKER), {"t": "dc.t", "u": "dc.u"}, copying,
                                    exclusion_pattern())
    assert why is None
    assert configs == {"dc.t": {**({"retention.ms": "5"} if copying else {}), AFTER: ANY}, "dc.u": {}}
    configs, why = creation_configs(source, ConfigsAdmin(broker={"log.message.timestamp.difference.max.ms": ANY}),
                                    {"t": "dc.t"}, False, exclusion_pattern())
    assert configs == {"dc.t": {}} and "before 3.6" in why

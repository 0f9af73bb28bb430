"""Pure planners of the destination topics: config changes and copied configs, the spec keys, partition growth (no broker)."""

from __future__ import annotations

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.exceptions import ConfigError
from mirror_worker.topics.configs import (
    AppliedChanges, ConfigChange, copied_configs, exclusion_pattern, explicit_configs, plan_config_changes,
)

DEFAULT = exclusion_pattern()


@pytest.mark.parametrize("source, destination, extra, expected", [
    # nothing set on the source: nothing to do
    ({}, {}, (), []),
    # a missing key is set, an equal one is left alone
    ({"retention.ms": "1000", "cleanup.policy": "compact"}, {"cleanup.policy": "compact"}, (),
     [ConfigChange("retention.ms", None, "1000")]),
    # a different value is overwritten
    ({"retention.ms": "1000"}, {"retention.ms": "5000"}, (), [ConfigChange("retention.ms", "5000", "1000")]),
    # destination-only settings are never deleted
    ({}, {"retention.bytes": "42"}, (), []),
    # MM2's default exclusions: never copied, whatever the destination holds
    ({"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime",
      "unclean.leader.election.enable": "true", "leader.replication.throttled.replicas": "0:1",
      "follower.replication.throttled.replicas": "0:1", "message.timestamp.difference.max.ms": "10",
      "message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "3600000"},
     {"min.insync.replicas": "1"}, (), []),
    # a user exclusion on top of the defaults
    ({"segment.ms": "100", "retention.ms": "7"}, {}, ("segment\\..*",), [ConfigChange("retention.ms", None, "7")]),
    # regexes match whole names: "retention" alone excludes nothing
    ({"retention.ms": "7"}, {}, ("retention",), [ConfigChange("retention.ms", None, "7")]),
    # changes come sorted by key
    ({"b.x": "1", "a.x": "2"}, {}, (), [ConfigChange("a.x", None, "2"), ConfigChange("b.x", None, "1")]),
])
def test_plan_config_changes(source, destination, extra, expected):
    assert plan_config_changes(source, destination, exclusion_pattern(extra)) == expected


def test_copied_configs_drops_excluded_keys():
    assert copied_configs({"min.insync.replicas": "2", "compression.type": "zstd"}, DEFAULT) == {"compression.type": "zstd"}


def test_invalid_exclusion_regex_is_bad_input():
    with pytest.raises(ConfigError, match=r"config-sync-exclude.*invalid regex"):
        build_mirror_config({
            "name": "m", "sources": [{"name": "s", "consumer": {"bootstrap.servers": "x:1"}}],
            "producer": {"bootstrap.servers": "y:1"}, "whitelist": ".*", "group_id": "g",
            "config_sync_exclude": ["("],
        }, key_style=lambda f: f.replace("_", "-"))


def test_explicit_configs_keeps_only_topic_level_non_secret_entries():
    from confluent_kafka.admin import ConfigEntry, ConfigSource

    entries = {
        "retention.ms": ConfigEntry("retention.ms", "10", source=ConfigSource.DYNAMIC_TOPIC_CONFIG.value),  # as returned
        "cleanup.policy": ConfigEntry("cleanup.policy", "compact", source=ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "segment.ms": ConfigEntry("segment.ms", "5", source=ConfigSource.STATIC_BROKER_CONFIG.value),
        "flush.ms": ConfigEntry("flush.ms", "9", source=ConfigSource.DEFAULT_CONFIG.value),
        "secret": ConfigEntry("secret", "x", source=ConfigSource.DYNAMIC_TOPIC_CONFIG.value, is_sensitive=True),
    }
    assert explicit_configs(entries) == {"retention.ms": "10", "cleanup.policy": "compact"}


def test_config_sync_flags_and_spec_keys(tmp_path):
    from mirror_worker.commands.cli import config_from_args, parse_args
    from mirror_worker.config.spec import select_mirror

    (tmp_path / "s.properties").write_text("bootstrap.servers=a:1\n")
    (tmp_path / "d.properties").write_text("bootstrap.servers=b:1\n")
    flags = config_from_args(parse_args([
        "--consumer.config", str(tmp_path / "s.properties"), "--producer.config", str(tmp_path / "d.properties"),
        "--whitelist", "x", "--config.sync.interval.ms", "0", "--config.sync.exclude", "segment\\..*, retention\\.bytes",
    ]))
    assert flags.config_sync_interval_ms == 0
    assert flags.config_sync_exclude == ["segment\\..*", "retention\\.bytes"]
    assert flags.offset_syncs_topic == "mirror.mirror.offset-syncs" and not flags.writes_offset_syncs

    spec = tmp_path / "m.yaml"
    spec.write_text("""
groups:
  - source: {kafka: {bootstrap.servers: "a:1"}}
    destination: {kafka: {bootstrap.servers: "b:1"}}
    mirrors:
      - {name: m, whitelist: x, preserve-partitions: true, config-sync-interval-ms: 5000,
         config-sync-exclude: ["retention\\\\.ms"]}
""")
    config = select_mirror(spec, "m")
    assert config.config_sync_interval_ms == 5000 and config.config_sync_exclude == ["retention\\.ms"]
    assert config.writes_offset_syncs
    from mirror_worker.policy.filter import is_internal_topic
    assert is_internal_topic(config.offset_syncs_topic)


@pytest.mark.parametrize("creation, preserve, source, current, expected", [
    ({}, False, 4, 2, 4),                                   # mirror-source count, any routing: grows with the source
    ({}, True, 4, 2, 4),
    ({}, False, 4, 4, None),                                # already there (another worker grew it)
    ({}, False, 2, 4, None),                                # never shrunk
    ({"partitions": 6}, False, 4, 6, None),                 # a fixed, larger count is left alone
    ({"partitions": 3}, False, 8, 3, None),                 # a fixed count is kept without preserve-partitions
    ({"partitions": 3}, True, 8, 3, 8),                     # preserve-partitions needs every source partition
    ({"max_partitions": 5}, False, 8, 4, 5),                # clamped like creation
    ({"min_partitions": 3}, False, 1, 3, None),             # heartbeat-like single-partition topics stay
])
def test_destination_growth_rule(creation, preserve, source, current, expected):
    from mirror_worker.config.model import TopicCreation
    from mirror_worker.topics.admin import DestinationTopics, TopicInfo

    topics = DestinationTopics(None, TopicCreation(**creation), preserve)
    assert topics.grown_count(TopicInfo("t", source, 1), current) == expected


def test_max_message_bytes_waits_for_a_broker_that_has_not_learnt_of_a_new_topic_yet():
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from mirror_worker.config.model import TopicCreation
    from mirror_worker.topics.admin import DestinationTopics

    class Future:
        def __init__(self, error: int | None) -> None:
            self.error = error

        def result(self, timeout=None):
            if self.error is not None:
                raise KafkaException(KafkaError(self.error))
            return {"max.message.bytes": SimpleNamespace(value="2048")}

    class Admin:
        def __init__(self, error: int) -> None:
            self.error, self.asked = error, []

        def describe_configs(self, resources, request_timeout=None):
            self.asked.append(sorted(r.name for r in resources))
            return {r: Future(self.error if r.name == "new" and len(self.asked) == 1 else None) for r in resources}

    admin = Admin(KafkaError.UNKNOWN_TOPIC_OR_PART)
    assert DestinationTopics(admin, TopicCreation(), False).max_message_bytes(["old", "new"]) == {"old": 2048, "new": 2048}
    assert admin.asked == [["new", "old"], ["new"]]
    with pytest.raises(KafkaException):  # another error is not waited out
        DestinationTopics(Admin(KafkaError.TOPIC_AUTHORIZATION_FAILED), TopicCreation(), False).max_message_bytes(["new"])


def test_an_internal_topics_config_is_set_on_an_existing_topic_and_a_refusal_is_only_logged(caplog):
    """The heartbeat topic of an older worker is CreateTime: it is made LogAppendTime (the lag sensor then times
    heartbeats by the destination broker); a destination that refuses the change leaves the worker running."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from mirror_worker.config.model import TopicCreation
    from mirror_worker.topics.admin import DestinationTopics

    class Future:
        def __init__(self, value=None, error: int | None = None) -> None:
            self.value, self.error = value, error

        def result(self, timeout=None):
            if self.error is not None:
                raise KafkaException(KafkaError(self.error))
            return self.value

    class Admin:
        def __init__(self, current: dict[str, str], refuse: bool) -> None:
            self.current, self.refuse, self.altered = current, refuse, []

        def describe_configs(self, resources, request_timeout=None):
            return {r: Future({"message.timestamp.type": SimpleNamespace(value=self.current[r.name])}) for r in resources}

        def incremental_alter_configs(self, resources, request_timeout=None):
            self.altered += [(r.name, [(e.name, e.value) for e in r.incremental_configs]) for r in resources]
            refusal = KafkaError.TOPIC_AUTHORIZATION_FAILED if self.refuse else None
            return {r: Future(error=refusal) for r in resources}

    wanted = {"message.timestamp.type": "LogAppendTime"}
    admin = Admin({"beats": "CreateTime"}, refuse=False)
    DestinationTopics(admin, TopicCreation(), False)._align_configs({"beats": wanted})
    assert admin.altered == [("beats", [("message.timestamp.type", "LogAppendTime")])]
    done = Admin({"beats": "LogAppendTime"}, refuse=False)
    DestinationTopics(done, TopicCreation(), False)._align_configs({"beats": wanted})
    assert done.altered == []  # nothing asked of a topic already right (no AlterConfigs permission needed)
    caplog.clear()
    refused = Admin({"beats": "CreateTime"}, refuse=True)
    DestinationTopics(refused, TopicCreation(), False)._align_configs({"beats": wanted})
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == ["topic config not set"]


def test_a_change_planned_again_before_it_is_read_back_is_news_once_and_an_undone_edit_is_news_again():
    applied, raised = AppliedChanges(), ConfigChange("max.message.bytes", None, "3000000")
    assert applied.news({"dc.t", "dc.u"}, {"dc.t": [raised]}) == {"dc.t": [raised]}
    # The destination still gives the old value: the same change is set again, not reported again.
    assert applied.news({"dc.t", "dc.u"}, {"dc.t": [raised]}) == {}
    # A pass that did not read dc.t (its read failed) forgets nothing.
    assert applied.news({"dc.u"}, {}) == {}
    assert applied.news({"dc.t"}, {"dc.t": [raised]}) == {}
    # Read back: forgotten. An operator's later edit, undone by the sync, is news again.
    assert applied.news({"dc.t"}, {}) == {}
    assert applied.news({"dc.t"}, {"dc.t": [raised]}) == {"dc.t": [raised]}


def test_a_different_value_for_a_change_still_unseen_is_news():
    applied = AppliedChanges()
    first, second = ConfigChange("retention.ms", None, "1000"), ConfigChange("retention.ms", None, "2000")
    other = ConfigChange("cleanup.policy", None, "compact")
    assert applied.news({"dc.t"}, {"dc.t": [first]}) == {"dc.t": [first]}
    assert applied.news({"dc.t"}, {"dc.t": [second, other]}) == {"dc.t": [second, other]}
    assert applied.news({"dc.t"}, {"dc.t": [second]}) == {}

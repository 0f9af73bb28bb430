"""Pure planners: topic-config changes, offset-sync slots and the translation arithmetic (no broker)."""

from __future__ import annotations

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.dr.offset_syncs import OffsetSync, slot_for, translate_offset, translate_positions
from mirror_worker.exceptions import ConfigError
from mirror_worker.topics.configs import (
    ConfigChange, copied_configs, exclusion_pattern, explicit_configs, plan_config_changes,
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


@pytest.mark.parametrize("sequence, slot", [(1, 0), (2, 1), (3, 0), (4, 2), (6, 1), (8, 3), (128, 7), (1024, 7)])
def test_slot_for_spaces_history_exponentially(sequence, slot):
    assert slot_for(sequence) == slot


def _sync(s: int, d: int, topic: str = "t", partition: int = 0, source: str = "src", topic_id: str = "") -> OffsetSync:
    return OffsetSync(source, topic, partition, s, d, topic_id)


# Syncs (S -> D) of one partition, drawn:
#
#   source       0 ... 9 | 10 ... 19 | 20 ... 29 | 30
#   destination  0 ... 9 | 10 ... 24 | 25 ... 34 | 35        (15..19 hold a re-sent copy of 10..14)
#   syncs        (10 -> 10), (20 -> 25), (30 -> 35)
SYNCS = [_sync(10, 10), _sync(20, 25), _sync(30, 35)]


@pytest.mark.parametrize("committed, expected", [
    (9, None),       # before the oldest sync: not translatable (9 < 10)
    (10, 10),        # exactly at a sync: resume at its D, nothing reread
    (11, 10),        # one past: reread source record 10 (and what was mirrored after it)
    (19, 10),        # just before the next sync: still the older one
    (20, 25),        # at the next sync
    (29, 25),
    (30, 35),        # caught up with the last sync
    (1000, 35),      # far ahead of every sync: the latest one
])
def test_translate_offset_picks_the_sync_at_or_below(committed, expected):
    result = translate_offset(committed, SYNCS)
    assert (result.destination_offset if result else None) == expected


def test_translate_offset_prefers_the_largest_destination_offset_after_a_resend():
    # A restart re-sent from 10 after a sync (20 -> 25) was written: (15 -> 40) is later and also true.
    result = translate_offset(22, [_sync(20, 25), _sync(15, 40)])
    assert result.destination_offset == 40


def test_translate_positions_per_partition_with_reasons_and_topic_ids():
    syncs = [
        _sync(5, 7, "a", 0, topic_id="id1"),
        _sync(8, 3, "a", 0, topic_id="old"),   # the topic's previous incarnation: ignored
        _sync(4, 4, "a", 1),                   # no id recorded: used
        _sync(4, 99, "a", 1, source="other"),  # another source cluster: ignored
        _sync(10, 10, "b", 0),
    ]
    out = translate_positions({("a", 0): 9, ("a", 1): 4, ("b", 0): 3, ("c", 0): 1}, syncs, "src",
                              lambda t: "dc." + t, {"a": "id1"})
    got = {(t.source_topic, t.partition): (t.destination_topic, t.result.destination_offset if t.result else None, t.reason)
           for t in out}
    assert got == {
        ("a", 0): ("dc.a", 7, ""),
        ("a", 1): ("dc.a", 4, ""),
        ("b", 0): ("dc.b", None, "committed offset 3 is older than the oldest offset sync kept (10)"),
        ("c", 0): ("dc.c", None, "no offset sync for this partition yet"),
    }


def test_sync_records_round_trip_and_foreign_records_are_ignored():
    sync = _sync(12, 34, "orders", 3, topic_id="abc")
    assert OffsetSync.decode(sync.key(slot_for(2)), sync.value()) == sync
    assert sync.key(0) != sync.key(1)  # each slot its own compacted key
    assert OffsetSync.decode(sync.key(0), None) is None
    assert OffsetSync.decode(b"junk", b"{}") is None


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


def test_an_unanswered_list_offsets_is_an_error_not_an_exception():
    """The destination down: ListOffsets futures time out; the syncs are reported as not written (counted by
    the commit cycle), and written at a later commit (issue 28: TimeoutError ended the worker)."""
    from concurrent.futures import Future

    from mirror_worker.dr.offset_syncs import OffsetSyncWriter

    class SilentAdmin:
        calls = 0

        def list_offsets(self, requests, request_timeout):
            self.calls += 1
            return {tp: Future() for tp in requests}  # never completed

    class Producer:
        def produce(self, *args):
            raise AssertionError("no sync without a high watermark")

        def poll(self, timeout):
            pass

    admin = SilentAdmin()
    writer = OffsetSyncWriter("syncs", admin, lambda t: t, timeout=0.05)
    syncs, errors = writer.write(Producer(), "source", {("orders", 0): 10}, {})
    assert syncs == [] and errors == {"orders[0]": "no answer within 0s"}
    assert admin.calls == 1  # unreachable: not retried now
    assert writer.written == {}  # the next commit tries again


def test_a_list_offsets_without_an_offset_writes_no_sync():
    """A destination leader killed and not yet fenced: ListOffsets answers -1001 instead of an error. No sync
    to a negative offset is written (the fault tests found them); the next commit tries again."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from mirror_worker.dr.offset_syncs import OffsetSyncWriter

    class DeadLeaderAdmin:
        def list_offsets(self, requests, request_timeout):
            futures = {tp: Future() for tp in requests}
            for future in futures.values():
                future.set_result(SimpleNamespace(offset=-1001))
            return futures

    class Producer:
        def produce(self, *args):
            raise AssertionError("no sync without a high watermark")

        def poll(self, timeout):
            pass

    writer = OffsetSyncWriter("syncs", DeadLeaderAdmin(), lambda t: t, timeout=0.05)
    syncs, errors = writer.write(Producer(), "source", {("orders", 0): 10}, {})
    assert syncs == [] and errors == {"orders[0]": "no high watermark (offset -1001)"}
    assert writer.written == {}


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

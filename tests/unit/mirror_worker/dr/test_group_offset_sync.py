"""Group offset sync without a broker: the plan (forward only, groups without members only), the group
choice, the admin edge over in-memory clusters (incremental reads across syncs, dry run, refused writes),
the report, the worker's counters, and the bad input of the spec and the command."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from mirror_worker.commands.main import main
from mirror_worker.config.model import build_mirror_config
from mirror_worker.dr.group_admin import GroupOffsetSync
from mirror_worker.dr.group_rules import (
    DESTINATION_AHEAD, GROUP_ACTIVE, UNTRANSLATED, WRITE_FAILED, GroupFilter, Translation, Untranslated,
    blocking_state, plan_group,
)
from mirror_worker.dr.resume_index import IncrementalFinder
from mirror_worker.exceptions import ConfigError
from mirror_worker.metrics import MirrorMetrics
from tests.unit.fakes import FakeDestinationPartitions, FakeFuture
from tests.worker_util import write_mirror_spec

SOURCE_TOPIC, TOPIC = "orders", "src.orders"


def _translation(partition: int, offset: int) -> Translation:
    return Translation(TOPIC, partition, offset, SOURCE_TOPIC, offset, "provenance", 0)


@pytest.mark.parametrize("previous, written, reason", [
    (None, True, None),            # no commit on the destination yet
    (40, True, None),              # behind: moved forward
    (50, False, None),             # at the translation: unchanged
    (60, False, "destination offset 60 is ahead of the translation 50: never rewound"),
])
def test_a_destination_offset_only_moves_forward(previous, written, reason):
    current = {} if previous is None else {(TOPIC, 0): previous}
    plan = plan_group("app", [_translation(0, 50)], [], current, blocked=None)
    assert plan.offsets() == ({(TOPIC, 0): 50} if written else {})
    assert [o.reason for o in plan.skipped] == ([reason] if reason else [])
    assert len(plan.unchanged) == (previous == 50)
    assert plan.skipped_by_reason() == ({DESTINATION_AHEAD: 1} if reason else {})


@pytest.mark.parametrize("state, members, blocked", [
    ("EMPTY", 0, False), ("DEAD", 0, False),
    ("STABLE", 1, True), ("PREPARING_REBALANCING", 2, True), ("COMPLETING_REBALANCING", 1, True),
    ("UNKNOWN", 0, True),  # an unknown state is not known to be safe
])
def test_only_groups_without_members_are_written(state, members, blocked):
    reason = blocking_state(state, members)
    assert (reason is not None) == blocked
    plan = plan_group("app", [_translation(0, 50), _translation(1, 7)],
                      [Untranslated(SOURCE_TOPIC, 2, 9, "no offset sync")], {}, reason)
    if blocked:
        assert plan.write == [] and [o.reason for o in plan.skipped] == [reason] * 2
        assert reason == (f"group is {state} with {members} active member(s) on the destination: a running "
                          "consumer owns its offsets")
        assert plan.skipped_by_reason() == {GROUP_ACTIVE: 2, UNTRANSLATED: 1}
    else:
        assert plan.offsets() == {(TOPIC, 0): 50, (TOPIC, 1): 7}


@pytest.mark.parametrize("group, include, exclude, selected", [
    ("billing", [], [], True),
    ("billing", ["bill.*"], [], True),
    ("billing", ["bill"], [], False),             # full matches only
    ("billing-test", ["bill.*"], [".*-test"], False),
    ("mirror.orders", [], [], False),             # the mirror's own consumer group
    ("console-consumer-4711", [], [], False),     # MM2's default exclusions
    ("connect-sink", [], [], False),
    ("__internal", [".*"], [], False),
])
def test_group_choice(group, include, exclude, selected):
    assert GroupFilter.from_expressions(include, exclude, own=["mirror.orders"]).selects(group) is selected


# ------------------------------------------------------------------ the admin edge over in-memory clusters
class FakeClusterAdmin:
    """The AdminClient calls the sync makes, over {group: {(topic, partition): offset}} and
    {group: (state name, members)} (unknown groups are Dead); `refuse_writes`: an error text."""

    def __init__(self, offsets: dict | None = None, states: dict | None = None, refuse_writes: str = "") -> None:
        self.offsets = offsets or {}
        self.states = states or {}
        self.refuse_writes = refuse_writes
        self.writes: list[tuple[str, dict]] = []

    def list_topics(self, topic=None, timeout=None):
        """The topics its groups committed, with those partitions."""
        topics: dict[str, set[int]] = {}
        for offsets in self.offsets.values():
            for t, p in offsets:
                topics.setdefault(t, set()).add(p)
        return SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions=dict.fromkeys(sorted(ps)))
                                       for t, ps in topics.items()})

    def list_consumer_groups(self, request_timeout=None):
        return FakeFuture(SimpleNamespace(valid=[SimpleNamespace(group_id=g) for g in self.offsets], errors=[]))

    def list_consumer_group_offsets(self, requests, request_timeout=None):
        (request,) = requests
        offsets = self.offsets.get(request.group_id, {})
        wanted = ([(tp.topic, tp.partition) for tp in request.topic_partitions] if request.topic_partitions
                  else list(offsets))
        partitions = [TopicPartition(t, p, offsets.get((t, p), -1001)) for t, p in wanted]
        return {request.group_id: FakeFuture(ConsumerGroupTopicPartitions(request.group_id, partitions))}

    def describe_consumer_groups(self, groups, request_timeout=None):
        out = {}
        for group in groups:
            state, members = self.states.get(group, ("DEAD", 0))
            out[group] = FakeFuture(SimpleNamespace(state=ConsumerGroupState[state], members=[object()] * members))
        return out

    def alter_consumer_group_offsets(self, requests, request_timeout=None):
        (request,) = requests
        if self.refuse_writes:
            return {request.group_id: _Failing(self.refuse_writes)}
        written = {(tp.topic, tp.partition): tp.offset for tp in request.topic_partitions}
        self.writes.append((request.group_id, written))
        self.offsets.setdefault(request.group_id, {}).update(written)
        return {request.group_id: FakeFuture(ConsumerGroupTopicPartitions(request.group_id, request.topic_partitions))}


class _Failing:
    def __init__(self, text: str) -> None:
        self.text = text

    def result(self, timeout=None):
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, self.text))


def _clusters(source_offsets: dict, destination_records: dict, destination: FakeClusterAdmin | None = None,
              include=(), exclude=()):
    """(sync, source admin, destination admin, destination partitions) of a mirror orders -> src.orders."""
    source = FakeClusterAdmin(source_offsets)
    destination = destination or FakeClusterAdmin()
    partitions = FakeDestinationPartitions({(TOPIC, p): records for p, records in destination_records.items()})
    sync = GroupOffsetSync("east", "cid", source, destination, IncrementalFinder(partitions),
                           GroupFilter.from_expressions(include, exclude, own=["mirror.m"]),
                           lambda topic: topic == SOURCE_TOPIC, lambda topic: f"src.{topic}", list,
                           lambda topics: {}, timeout=1.0)
    return sync, source, destination, partitions


def _header(s: int, partition: int = 0):
    from mirror_worker.policy.provenance import provenance_value
    return provenance_value("east", "cid", SOURCE_TOPIC, partition, s)


def _copies(source_offsets, partition: int = 0) -> list:
    """A clean mirror run of `orders[partition]`: the copy of each source offset at the same destination offset."""
    return [(o, _header(o, partition)) for o in source_offsets]


def test_an_idle_group_is_kept_current_and_each_sync_reads_only_new_records():
    records = [(o, _header(o)) for o in range(100)]
    sync, source, destination, partitions = _clusters({"billing": {(SOURCE_TOPIC, 0): 30}}, {0: records})
    report = sync.sync()
    assert destination.offsets["billing"] == {(TOPIC, 0): 30} and report.ok
    # The source group commits further and the mirror writes more: the next sync reads only the new records.
    source.offsets["billing"][(SOURCE_TOPIC, 0)] = 130
    partitions.partitions[(TOPIC, 0)] = records + [(o, _header(o)) for o in range(100, 200)]
    report = sync.sync()
    assert destination.offsets["billing"] == {(TOPIC, 0): 130}
    assert [(start, end) for _, _, start, end in partitions.reads] == [(0, 100), (100, 200)]
    assert report.to_dict()["groups"][0]["written"] == [{
        "topic": TOPIC, "partition": 0, "offset": 130, "source_topic": SOURCE_TOPIC, "source_offset": 130,
        "method": "provenance", "may_reread": 0, "previous": 30}]
    # Nothing new: nothing written, the partition is reported unchanged.
    report = sync.sync()
    assert len(destination.writes) == 2 and len(report.groups[0].unchanged) == 1


def test_active_and_ahead_groups_are_left_alone_and_reported():
    records = {0: _copies(range(100)), 1: [(o, _header(o, 1)) for o in range(100)]}
    destination = FakeClusterAdmin({"ahead": {(TOPIC, 0): 90, (TOPIC, 1): 10}}, {"busy": ("STABLE", 1)})
    sync, _source, destination, _ = _clusters({
        "busy": {(SOURCE_TOPIC, 0): 50},
        "ahead": {(SOURCE_TOPIC, 0): 50, (SOURCE_TOPIC, 1): 50},
        "mirror.m": {(SOURCE_TOPIC, 0): 100},       # the mirror's own group
        "other": {("payments", 0): 5},              # no mirrored topic: nothing to sync
    }, records, destination)
    report = sync.sync()
    assert destination.writes == [("ahead", {(TOPIC, 1): 50})]   # only forward, only the empty group
    groups = {g.group: g for g in report.groups}
    assert set(groups) == {"ahead", "busy"}
    assert groups["busy"].skipped_by_reason() == {GROUP_ACTIVE: 1}
    assert groups["ahead"].skipped_by_reason() == {DESTINATION_AHEAD: 1}
    skipped = report.to_dict()["groups"][0]["skipped"]
    assert skipped == [{"topic": TOPIC, "partition": 0, "offset": 50, "source_topic": SOURCE_TOPIC,
                        "source_offset": 50, "method": "provenance", "may_reread": 0, "previous": 90,
                        "reason": "destination offset 90 is ahead of the translation 50: never rewound"}]


def test_dry_run_writes_nothing_and_says_what_it_would_write():
    sync, _source, destination, _ = _clusters({"billing": {(SOURCE_TOPIC, 0): 30}}, {0: _copies(range(100))})
    document = sync.sync(dry_run=True).to_dict()
    assert destination.writes == []
    assert [o["offset"] for o in document["groups"][0]["would_write"]] == [30] and "written" not in document["groups"][0]


def test_include_and_exclude_choose_the_groups():
    sync, _source, destination, _ = _clusters(
        {g: {(SOURCE_TOPIC, 0): 10} for g in ("billing", "billing-test", "audit")}, {0: _copies(range(100))},
        include=["billing.*"], exclude=[".*-test"])
    sync.sync()
    assert [group for group, _ in destination.writes] == ["billing"]


def test_a_refused_write_and_an_untranslated_partition_are_reported():
    sync, _source, destination, _ = _clusters(
        {"billing": {(SOURCE_TOPIC, 0): 30, (SOURCE_TOPIC, 1): 5}},
        {0: _copies(range(100)), 1: [(o, None) for o in range(10)]},
        FakeClusterAdmin(refuse_writes="a member joined"))
    report = sync.sync()
    (plan,) = report.groups
    assert not report.ok and plan.error == "cannot write offsets of group 'billing' on the destination: a member joined"
    assert destination.writes == []
    assert plan.skipped_by_reason() == {WRITE_FAILED: 1, UNTRANSLATED: 1}
    assert plan.untranslated[0].reason == "no offset sync for this partition yet, and no provenance header on the destination"


def test_a_source_that_cannot_be_listed_is_an_error_of_the_report():
    sync, source, _destination_admin, _ = _clusters({}, {})

    def unreachable(request_timeout=None):
        return _Failing("Local: Timed out")

    source.list_consumer_groups = unreachable
    report = sync.sync()
    assert report.errors == {"*": "cannot list the groups of source 'east': Local: Timed out"}


def test_the_worker_counts_what_it_wrote_and_skipped():
    from mirror_worker.engine.housekeeping import Housekeeping

    destination = FakeClusterAdmin({"ahead": {(TOPIC, 0): 90}}, {"busy": ("STABLE", 2)})
    sync, *_ = _clusters({g: {(SOURCE_TOPIC, 0): 50} for g in ("idle", "busy", "ahead")},
                         {0: _copies(range(100))}, destination)
    metrics = MirrorMetrics("m")
    housekeeping = Housekeeping.__new__(Housekeeping)
    housekeeping.group_syncs, housekeeping.metrics, housekeeping.label = [sync], metrics, {"mirror": "m"}
    housekeeping.sync_group_offsets()
    value = metrics.registry.get_sample_value
    assert value("mirror_group_offsets_synced_total", {"mirror": "m", "source": "east", "group": "idle"}) == 1
    assert value("mirror_group_offsets_skipped_total", {"mirror": "m", "source": "east", "group": "busy",
                                                        "reason": GROUP_ACTIVE}) == 1
    assert value("mirror_group_offsets_skipped_total", {"mirror": "m", "source": "east", "group": "ahead",
                                                        "reason": DESTINATION_AHEAD}) == 1


# ------------------------------------------------------------------ bad input
def _fields(**extra) -> dict:
    return {"name": "m", "sources": [{"name": "east", "consumer": {"bootstrap.servers": "a:1"}}],
            "producer": {"bootstrap.servers": "b:1"}, "whitelist": "orders", "group_id": "mirror.m", **extra}


def test_the_spec_refuses_a_sync_without_preserve_partitions_and_bad_regexes():
    with pytest.raises(ConfigError, match=r"^group-offset-sync-interval-ms needs preserve-partitions: "):
        build_mirror_config(_fields(group_offset_sync_interval_ms=5000))
    with pytest.raises(ConfigError, match=r"^group_offset_sync_groups: invalid regex '\(': "):
        build_mirror_config(_fields(preserve_partitions=True, group_offset_sync_groups=["("]))
    config = build_mirror_config(_fields(preserve_partitions=True, group_offset_sync_interval_ms=5000))
    assert config.group_offset_sync_interval_ms == 5000 and config.group_offset_sync_groups == []


def test_the_command_refuses_a_mirror_without_preserve_partitions(tmp_path, capsys):
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", None, "m", "orders", None, source="127.0.0.1:1",
                             destination="127.0.0.1:2")
    assert main(["sync-group-offsets", "--config", str(spec), "--mirror", "m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mirror_worker: mirror 'm': offset translation needs preserve-partitions")
    assert main(["sync-group-offsets", "--config", str(spec), "--mirror", "nope"]) == 2
    assert main(["sync-group-offsets", "--config", str(spec), "--bogus"]) == 2


def test_the_worker_loop_syncs_group_offsets_at_once_then_every_interval(monkeypatch):
    from tests.unit.fakes import make_worker, scheduled_calls

    monkeypatch.setattr("mirror_worker.engine.worker.worker_group_syncs", lambda config, streams, admin: [])  # no clients
    worker, _, _, _ = make_worker({("orders", 0): []}, group_offset_sync_interval_ms=1000, preserve_partitions=True)
    first, gaps = scheduled_calls(worker, "sync_group_offsets")
    assert first < 0.5  # the first sync does not wait an interval
    assert all(1.0 <= gap < 1.5 for gap in gaps), gaps


def test_group_offset_sync_is_off_in_the_worker_by_default():
    from tests.unit.fakes import make_worker

    worker, _, _, _ = make_worker({("orders", 0): []})
    assert worker.config.group_offset_sync_interval_ms == 0 and worker.housekeeping.group_syncs == []
    worker.housekeeping.sync_group_offsets()  # nothing to do, no admin call


def test_a_group_with_nothing_translated_is_reported_and_its_destination_not_read():
    sync, _source, destination, _ = _clusters({"billing": {(SOURCE_TOPIC, 0): 5}}, {0: [(o, None) for o in range(10)]})
    destination.list_consumer_group_offsets = None  # must not be called
    report = sync.sync()
    assert report.ok and destination.writes == []
    assert report.to_dict()["groups"][0]["untranslated"] == [{
        "source_topic": SOURCE_TOPIC, "partition": 0, "source_offset": 5,
        "reason": "no offset sync for this partition yet, and no provenance header on the destination"}]


def test_the_workers_close_closes_the_shared_destination_reader_once():
    from types import SimpleNamespace

    from mirror_worker.engine.housekeeping import Housekeeping

    closed = []
    reader = SimpleNamespace(close=lambda: closed.append(1))
    finder = SimpleNamespace(reader=reader)
    topics = SimpleNamespace(group_syncs=[SimpleNamespace(finder=finder), SimpleNamespace(finder=finder)])
    Housekeeping.close(topics)
    assert closed == [1]


@pytest.mark.parametrize("state, assignments, me, reason", [
    ("STABLE", {"a": [("orders", 1)], "b": [("orders", 0), ("payments", 0)]}, "b", None),
    ("STABLE", {"a": [("orders", 1)], "b": [("orders", 0)]}, "a",
     "another member of the mirror's group holds its first partition orders[0] and syncs"),
    ("STABLE", {"a": [("b-topic", 0)], "b": [("a-topic", 3)]}, "b", None),  # by topic, then partition
    ("STABLE", {"a": [], "b": [("orders", 0)]}, None,
     "another member of the mirror's group holds its first partition orders[0] and syncs"),
    ("STABLE", {"a": []}, "a", "no member of the mirror's group holds a partition"),
    ("PREPARING_REBALANCE", {"a": [("orders", 0)]}, "a",
     "the mirror's group is PREPARING_REBALANCE on the source: the writer is known once it is Stable"),
])
def test_one_member_of_the_mirrors_group_writes(state, assignments, me, reason):
    from mirror_worker.dr.group_rules import not_writer_reason

    assert not_writer_reason(state, assignments, me) == reason


def test_a_process_that_is_not_the_writer_reads_and_writes_nothing():
    sync, source, destination, _ = _clusters({"billing": {(SOURCE_TOPIC, 0): 30}}, {0: _copies(range(100))})
    sync.not_writer = lambda: "another member writes"
    source.list_consumer_groups = None  # must not be called
    report = sync.sync()
    assert report.groups == [] and destination.writes == [] and report.ok
    assert report.to_dict()["not_writer"] == "another member writes"

"""DestinationTopics returns new partitions once their leader serves them, within its timeout.

The defect (issue 42, bench.width at 5,000 partitions on one destination node): the worker created 5,000
destination partitions and copied into them at once; the broker took 20-30 s to make them all, so records and
offset syncs came back "Not leader for partition" and were retried for that long, and an exactly-once worker's
first transaction, which holds records for all of them, committed after 17-30 s (the stall watch reported
thousands of partitions as stalled meanwhile). Metadata names a leader before that leader serves the partition;
a ListOffsets request is answered by the leader itself, so it is the probe."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from mirror_worker.config.model import TopicCreation
from mirror_worker.topics.admin import DestinationTopics, TopicInfo
from tests.unit.fakes import FakeFuture


class SlowLeaders:
    """A destination where each partition of a topic created here is served by its leader from `led_at[topic]`
    (clock seconds) on; every topic in `existing` is there from the start, served."""

    def __init__(self, clock, led_at: dict[str, float], partitions: int, existing: tuple[str, ...] = ()):
        self.clock, self.led_at, self.partitions = clock, led_at, partitions
        self.topics = set(existing)
        self.probed: list[tuple[str, int]] = []

    def list_topics(self, timeout=None):
        parts = {p: SimpleNamespace(replicas=[1]) for p in range(self.partitions)}
        return SimpleNamespace(brokers={1: None},
                               topics={t: SimpleNamespace(error=None, partitions=parts) for t in self.topics})

    def create_topics(self, new_topics, request_timeout=None):
        self.topics |= {t.topic for t in new_topics}
        return {t.topic: FakeFuture() for t in new_topics}

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        out = {}
        for tp in requests:
            self.probed.append((tp.topic, tp.partition))
            led = self.clock.now >= self.led_at.get(tp.topic, 0.0)
            out[tp] = FakeFuture(SimpleNamespace(offset=0), None if led else KafkaError.NOT_LEADER_FOR_PARTITION)
        return out



def test_new_partitions_are_returned_once_their_leader_serves_them(clock):
    admin = SlowLeaders(clock, {"dc1.t": 12.0}, partitions=3)
    counts = DestinationTopics(admin, TopicCreation(), False, 30.0).ensure({"dc1.t": TopicInfo("t", 3, 1)})
    assert counts == {"dc1.t": 3}
    assert 12.0 <= clock.now <= 13.0
    assert sorted(set(admin.probed)) == [("dc1.t", 0), ("dc1.t", 1), ("dc1.t", 2)]


def test_partitions_not_served_by_the_timeout_are_named_in_one_line_and_the_copy_goes_on(clock, caplog):
    admin = SlowLeaders(clock, {"dc1.t": 999.0}, partitions=2)
    with caplog.at_level("WARNING", logger="mirror_worker.topics.admin"):
        counts = DestinationTopics(admin, TopicCreation(), False, 30.0).ensure({"dc1.t": TopicInfo("t", 2, 1)})
    assert counts == {"dc1.t": 2}  # the producers retry what a leader refuses: not a reason to stop
    assert 30.0 <= clock.now <= 31.0
    lines = [r for r in caplog.records if r.getMessage().startswith("new destination partitions not served")]
    assert len(lines) == 1 and lines[0].partitions == 2 and lines[0].examples == ["dc1.t[0]", "dc1.t[1]"]


def test_topics_that_were_there_already_are_not_probed(clock):
    admin = SlowLeaders(clock, {"dc1.old": 999.0}, partitions=2, existing=("dc1.old",))
    DestinationTopics(admin, TopicCreation(), False, 30.0).ensure({"dc1.old": TopicInfo("old", 2, 1)})
    assert admin.probed == [] and clock.now < 1.0


def test_a_stop_ends_the_wait(clock):
    admin = SlowLeaders(clock, {"dc1.t": 999.0}, partitions=2)
    destination = DestinationTopics(admin, TopicCreation(), False, 30.0, stopping=lambda: clock.now >= 2.0)
    destination.ensure({"dc1.t": TopicInfo("t", 2, 1)})
    assert 2.0 <= clock.now <= 3.0


def test_a_partition_served_a_few_milliseconds_after_creation_is_not_waited_for_a_fifth_of_a_second(clock):
    """The defect (bench.wan's worker logs): a fixed 200 ms pause after the first "not served yet" cost every start
    that created topics 200 ms per creation, on loopback 0.2 s of a 0.8 s start; a broker serves a partition it
    made within milliseconds. The pauses now double from 10 ms (clients/pauses.py), up to 200 ms as before."""
    admin = SlowLeaders(clock, {"dc1.t": 0.015}, partitions=2)
    DestinationTopics(admin, TopicCreation(), False, 30.0).ensure({"dc1.t": TopicInfo("t", 2, 1)})
    assert clock.now < 0.05


class InternalDestination(SlowLeaders):
    """SlowLeaders that also counts the round trips ensure_internal takes and answers describe/alter configs."""

    def __init__(self, clock):
        super().__init__(clock, {}, partitions=1)
        self.calls: list[str] = []

    def list_topics(self, timeout=None):
        self.calls.append("metadata")
        return super().list_topics(timeout)

    def create_topics(self, new_topics, request_timeout=None):
        self.calls.append("create " + ",".join(sorted(t.topic for t in new_topics)))
        self.created_configs = {t.topic: t.config for t in new_topics}
        return super().create_topics(new_topics, request_timeout)

    def describe_configs(self, resources, request_timeout=None):
        self.calls.append("describe configs " + ",".join(sorted(r.name for r in resources)))
        return {r: FakeFuture({}) for r in resources}

    def incremental_alter_configs(self, resources, request_timeout=None):
        self.calls.append("alter configs")
        return {r: FakeFuture(None) for r in resources}


def test_the_internal_topics_are_made_in_one_go_each_with_its_own_config(clock):
    """The defect (bench.wan's worker logs at 100 ms): positions, offset syncs and heartbeats were ensured one call
    each, a replication-factor look-up, a describe, a create, a wait and a config check per topic: 0.4-0.6 s of
    start-up each at 100 ms."""
    admin = InternalDestination(clock)
    DestinationTopics(admin, TopicCreation(), False, 30.0).ensure_internal({
        "m.positions": {"cleanup.policy": "compact"}, "m.syncs": {"cleanup.policy": "compact"},
        "mirror.heartbeats": {"message.timestamp.type": "LogAppendTime"}, "m.dead": {}})
    assert [c for c in admin.calls if c.startswith("create")] == ["create m.dead,m.positions,m.syncs,mirror.heartbeats"]
    assert admin.created_configs["mirror.heartbeats"] == {"message.timestamp.type": "LogAppendTime"}
    assert admin.created_configs["m.dead"] == {}
    assert [c for c in admin.calls if c.startswith("describe configs")] == [
        "describe configs m.positions,m.syncs,mirror.heartbeats"]  # a topic without a config is not checked
    # One metadata answer gives the live brokers and the topics there (before: one request each), then one to see
    # the new topics.
    assert admin.calls[:2] == ["metadata", "create m.dead,m.positions,m.syncs,mirror.heartbeats"]

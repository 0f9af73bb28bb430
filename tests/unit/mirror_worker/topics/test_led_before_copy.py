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

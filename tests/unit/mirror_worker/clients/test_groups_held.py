"""groups.held_partitions: what a consumer group's members hold, only once its rebalance ended.

The demo announced "joined" as soon as the mirror's worker was a member, while the group still rebalanced: the
first row of its live table then showed nothing copied yet (CI failure of test_quickstart.py)."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import ConsumerGroupState, TopicPartition

from mirror_worker.clients.groups import held_partitions
from tests.unit.fakes import FakeFuture


def _admin(state, assignments):
    members = [SimpleNamespace(assignment=SimpleNamespace(topic_partitions=tps) if tps is not None else None)
               for tps in assignments]
    description = SimpleNamespace(state=state, members=members)
    return SimpleNamespace(describe_consumer_groups=lambda groups, request_timeout=None:
                           {g: FakeFuture(description) for g in groups})


def test_a_stable_group_holds_its_members_assignments():
    admin = _admin(ConsumerGroupState.STABLE, [[TopicPartition("t", 0), TopicPartition("t", 1)],
                                               [TopicPartition("t", 2)], None])
    assert held_partitions(admin, "g") == {("t", 0), ("t", 1), ("t", 2)}


def test_a_rebalancing_group_holds_nothing_yet():
    for state in (ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING,
                  ConsumerGroupState.EMPTY):
        admin = _admin(state, [[TopicPartition("t", 0)]])
        assert held_partitions(admin, "g") == set()

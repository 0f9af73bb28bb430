"""Exactly-once rules without a broker: the config it needs, its transactional and position names, its routing."""

from __future__ import annotations

import json

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.exactly_once.positions import (
    POSITIONS_GROUP, RELEASED, Owner, legacy_positions_group, legacy_transactional_id, parse_position_metadata,
    position_metadata, position_writer, transactional_id, worker_transactional_id,
)
from mirror_worker.exceptions import ConfigError
from mirror_worker.policy.naming import PrefixPolicy
from mirror_worker.policy.routing import Router


def _fields(**extra):
    return {
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g", **extra,
    }


def test_exactly_once_needs_read_committed():
    with pytest.raises(ConfigError) as err:
        build_mirror_config(_fields(
            delivery="exactly-once",
            sources=[{"name": "src", "consumer": {"bootstrap.servers": "a:1", "isolation.level": "read_uncommitted"}}],
        ))
    assert str(err.value) == ("exactly-once needs a read_committed consumer (source 'src' sets "
                              "isolation.level=read_uncommitted)")


def test_exactly_once_refuses_a_fixed_transactional_id():
    with pytest.raises(ConfigError, match="exactly-once chooses transactional.id per source partition"):
        build_mirror_config(_fields(delivery="exactly-once",
                                    producer={"bootstrap.servers": "b:1", "transactional.id": "x"}))


def test_delivery_and_data_loss_values_are_checked():
    assert build_mirror_config(_fields(delivery="exactly-once")).exactly_once
    assert not build_mirror_config(_fields()).exactly_once
    with pytest.raises(ConfigError, match="on_data_loss"):
        build_mirror_config(_fields(on_data_loss="skip"))


def test_transactional_names_are_stable_per_destination_partition():
    assert transactional_id("dc1.o.v1", 3) == "kafka-mirror-eos.dc1.o.v1.3"
    assert POSITIONS_GROUP == "kafka-mirror-eos"
    # What an upgraded worker still reads (and fences) from deployments made before.
    assert legacy_transactional_id("orders", "east", "o.v1", 3) == "kafka-mirror.orders.east.o.v1.3"
    assert legacy_positions_group("orders", "east") == "kafka-mirror-eos.orders.east"


def test_position_metadata_names_its_owner_and_reads_the_earlier_layout():
    owner = Owner("cluster-1", "orders", "kafka-mirror.mirror")
    assert parse_position_metadata(position_metadata("tid", owner, "w")) == ("tid", owner)
    assert position_writer(position_metadata("tid", owner, "w")) == "w"
    assert position_writer(position_metadata("tid", owner, RELEASED)) == RELEASED
    assert position_writer(json.dumps({"topic_id": "tid", "cluster": "c", "topic": "t", "group": "g"})) is None
    assert parse_position_metadata("tid") == ("tid", None)  # the earlier layout: the topic id alone
    assert parse_position_metadata("") == ("", None)
    assert parse_position_metadata(None) == ("", None)


def test_a_workers_transactional_id_names_its_group_source_and_member_not_a_partition():
    assert worker_transactional_id("kafka-mirror.orders", "east", "slot-0") == "kafka-mirror-eos.kafka-mirror.orders.east.slot-0"
    router = Router(PrefixPolicy("src."), preserve_partitions=True, preserve_order=False, num_producers=1)
    assert {router.route("t", p).producer_index for p in range(50)} == {0}  # one producer per source


def test_positions_are_sent_in_pieces_the_broker_can_write():
    from confluent_kafka import TopicPartition

    from mirror_worker.exactly_once.positions import OFFSETS_SEND_BYTES, offset_sends

    metadata = "m" * 250
    slots = [TopicPartition(f"w.t-{i // 10}", i % 10, 5, metadata) for i in range(5000)]
    sends = offset_sends(slots)
    assert [slot for send in sends for slot in send] == slots  # all, in order
    sizes = [sum(96 + len(s.topic) + len(s.metadata) for s in send) for send in sends]
    assert len(sends) == 4 and max(sizes) <= OFFSETS_SEND_BYTES, sizes
    assert offset_sends(slots[:1000]) == [slots[:1000]]  # the usual transaction: one send
    assert offset_sends([]) == []
    huge = TopicPartition("t", 0, 1, "x" * 4000)
    assert offset_sends([huge, huge], limit=1000) == [[huge], [huge]]  # alone past the limit: still sent

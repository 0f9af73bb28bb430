"""Delivery errors tied to their source run, and producer batches that fit the destination topics (issue #17 c, d)."""

import pytest

from mirror_worker.config.librdkafka import (
    AUTO_BATCH_CEILING, DEFAULT_BATCH_SIZE, KAFKA_MAX_MESSAGE_BYTES, batch_size_for, fitted_batch_size,
    fitted_message_max_bytes,
)
from mirror_worker.engine.delivery import RunDelivery
from mirror_worker.engine.ledger import OffsetLedger


@pytest.mark.parametrize("configured, limits, expected", [
    (1_000_000, [], 1_000_000),                       # no destination topic known yet
    (1_000_000, [1_048_588], 1_000_000),              # Kafka's default limit: the configured size fits
    (1_000_000, [1_048_588, 65_536], 65_536 - 1024),  # the smallest topic decides
    (1_000_000, [4_000_000], 1_000_000),              # never raised above the configured size
    (1_000_000, [200_000], 200_000 - 200_000 // 64),  # the margin grows with the limit
    (1_000_000, [900], 1),                            # below the margin: every record goes alone
    (16_384, [65_536], 16_384),
])
def test_fitted_batch_size(configured, limits, expected):
    assert fitted_batch_size(configured, limits) == expected


@pytest.mark.parametrize("configured, limits, expected", [
    (None, [], DEFAULT_BATCH_SIZE),                              # no destination topic known yet
    (None, [KAFKA_MAX_MESSAGE_BYTES], DEFAULT_BATCH_SIZE),       # Kafka's default: finding it changes nothing
    (None, [4_194_304, 8_388_608], 4_194_304 - 4_194_304 // 64),  # unnamed: grows to what every topic takes
    (None, [100_000_000], AUTO_BATCH_CEILING),                   # ... up to the ceiling
    (None, [65_536], 65_536 - 1024),                             # and shrinks as before
    ("1000000", [8_388_608], 1_000_000),                         # named: never raised
    ("1000000", [65_536], 65_536 - 1024),                        # named: lowered to fit
])
def test_batch_size_for(configured, limits, expected):
    assert batch_size_for(configured, limits) == expected


def test_the_default_batch_size_is_about_librdkafkas():
    assert DEFAULT_BATCH_SIZE == 1_032_204


def test_fitted_batch_size_leaves_room_for_lz4_on_incompressible_data():
    for limit in (2048, 65_536, 1_048_588):
        batch = fitted_batch_size(DEFAULT_BATCH_SIZE, [limit])
        lz4_worst = batch + batch // 255 + 16 + 61  # lz4 bound, plus the record batch header
        assert lz4_worst <= limit


@pytest.mark.parametrize("configured, limits, expected", [
    (None, [], None),                            # librdkafka's default (1,000,000) stays
    (None, [1_048_588], 1_048_588 + 65_536),     # Kafka's default topic limit is above librdkafka's
    (None, [2000, 3_000_000], 3_000_000 + 65_536),  # the largest topic decides
    (None, [900_000], None),
    (None, [2_000_000_000], 1_000_000_000),      # librdkafka's ceiling
    (500_000, [3_000_000], None),                # a value the settings name is kept
])
def test_fitted_message_max_bytes(configured, limits, expected):
    assert fitted_message_max_bytes(configured, limits) == expected


class _Err:
    def str(self):
        return "Broker: Broker failed to validate record"


class _DeliveredMsg:
    """What librdkafka hands back for a refused record: no headers, no source."""

    def __init__(self, topic="dst", partition=0):
        self._topic, self._partition = topic, partition

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def headers(self):
        return None


def test_run_delivery_reports_only_errors_with_its_source_partition_and_first_offset():
    reported = []
    run = RunDelivery(lambda r, err, msg: reported.append((r.topic, r.partition, r.first_offset, err.str())),
                      stream="east", topic="orders", partition=3, first_offset=120)
    run(None, _DeliveredMsg())
    assert reported == []
    run(_Err(), _DeliveredMsg(partition=0))  # the destination partition is not the source partition
    assert reported == [("orders", 3, 120, "Broker: Broker failed to validate record")]


def test_halting_a_run_at_its_first_offset_never_commits_past_a_refused_record_of_it():
    ledger, key = OffsetLedger(), ("orders", 3)
    ledger.mark_committed({key: 100})
    for offset in range(100, 130):  # one run: 100..129, handed over together
        ledger.handed_over(key, offset)
    checkpoint = ledger.checkpoint()
    run = RunDelivery(lambda r, err, msg: ledger.halt((r.topic, r.partition), r.first_offset, err.str()),
                      stream=None, topic="orders", partition=3, first_offset=100)
    run(_Err(), _DeliveredMsg())  # whichever record of 100..129 was refused
    assert ledger.committable(checkpoint) == {}
    assert ledger.halted[key].offset == 100

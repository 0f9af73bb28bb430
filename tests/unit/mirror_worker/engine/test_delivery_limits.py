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


NOW_MS = 1_800_000_000_000


@pytest.mark.parametrize("stamp, setting, said", [
    (NOW_MS + 7_200_000, "message.timestamp.after.max.ms", "7200000 ms ahead of"),   # a source clock ahead
    (NOW_MS - 86_400_000, "message.timestamp.before.max.ms", "86400000 ms behind"),  # an old record
])
def test_a_timestamp_refusal_names_the_destination_setting_to_raise(stamp, setting, said):
    from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError

    from mirror_worker.engine.delivery import refusal_reason
    from tests.unit.fakes import FakeError, FakeMessage

    refused = FakeMessage("dc.orders", 0, -1, timestamp=stamp)
    assert refused.timestamp()[0] == TIMESTAMP_CREATE_TIME
    reason = refusal_reason(FakeError(KafkaError.INVALID_TIMESTAMP, "Broker: Invalid timestamp"), refused, NOW_MS)
    assert reason == (f"destination refused the record: Broker: Invalid timestamp: its timestamp {stamp} is {said} "
                      f"the clock; raise {setting} on destination topic dc.orders")


def test_a_timestamp_refusal_without_a_timestamp_names_both_settings_and_other_refusals_are_as_before():
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

    from mirror_worker.engine.delivery import refusal_reason
    from tests.unit.fakes import FakeError

    class Unstamped(_DeliveredMsg):
        def timestamp(self):
            return (TIMESTAMP_NOT_AVAILABLE, -1)

    reason = refusal_reason(FakeError(KafkaError.INVALID_TIMESTAMP, "Broker: Invalid timestamp"), Unstamped(), NOW_MS)
    assert "raise message.timestamp.after.max.ms" in reason and "message.timestamp.before.max.ms" in reason
    assert reason.endswith("on destination topic dst")
    other = refusal_reason(FakeError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), Unstamped(), 0)
    assert other == "destination refused the record: Broker: Message size too large"

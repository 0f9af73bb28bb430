"""What the worker holds in flight toward the destination, from its round trip and the memory budget (issue 45):
config/inflight.py. At 50 ms, 10,000 records in flight held the bench's copy at 51 % of loopback, 40,000 at 70 %."""

from __future__ import annotations

import pytest

from mirror_worker.config.inflight import (
    BATCHES_PER_PARTITION,
    DEFAULT_INFLIGHT_BUDGET_BYTES,
    LOOPBACK_QUEUE_SIZE,
    MAX_QUEUE_SIZE,
    MIB,
    MIN_PRODUCER_QUEUE_BYTES,
    RECORD_OVERHEAD_BYTES,
    consumer_prefetch_bytes,
    inflight_sizes,
    producer_queue_kbytes_for,
    queue_size_for,
    within_budget,
)
from mirror_worker.config.fetch_sizes import fetch_sizes_for
from mirror_worker.config.librdkafka import consumer_settings, producer_settings

SOURCE = {"queued.max.messages.kbytes": "16384", "max.partition.fetch.bytes": "1048576", "fetch.max.bytes": "1048576"}


@pytest.mark.parametrize("round_trip, expected", [
    (0.0008, LOOPBACK_QUEUE_SIZE),  # loopback, one datacenter: as before
    (0.010, LOOPBACK_QUEUE_SIZE),   # across zones
    (0.015, 20_250),                # the WAN threshold of the fetch sizes: 3 x 450,000 records/s x 15 ms
    (0.050, 67_500),
    (0.100, 135_000),
    (0.200, 180_000),               # 270,000 wanted: held at MAX_QUEUE_SIZE
    (0.500, MAX_QUEUE_SIZE),        # beyond, the bytes bound the copy anyway
    (None, 67_500),                 # not measured: taken as 50 ms away
])
def test_the_records_in_flight_follow_the_destinations_round_trip(round_trip, expected):
    assert queue_size_for(round_trip) == expected


def test_the_producers_share_the_budget_left_by_the_consumers_prefetch_and_their_records_overhead():
    sizes = inflight_sizes(0.05, DEFAULT_INFLIGHT_BUDGET_BYTES, None, {}, [SOURCE, SOURCE], producers=2)
    prefetch = 2 * (16 * MIB + 1 * MIB)
    assert sizes.consumer_queue_bytes == prefetch
    assert sizes.queue_size == 67_500
    assert sizes.records_overhead_bytes == 67_500 * RECORD_OVERHEAD_BYTES
    assert sizes.producer_queue_kbytes == \
        (DEFAULT_INFLIGHT_BUDGET_BYTES - prefetch - 67_500 * RECORD_OVERHEAD_BYTES) // 2 // 1024
    assert within_budget(sizes, 2)
    assert sizes.named == {"queue.size": False, "queue.buffering.max.kbytes": False}


@pytest.mark.parametrize("round_trip", [0.001, 0.05, 0.1, 0.2])
def test_the_records_in_flight_are_counted_with_what_they_cost_beyond_their_bytes(round_trip):
    """The defect of the bench's far destination (stop 66): the producers' byte bound was the whole budget left by
    the prefetch, and each queued record cost librdkafka ~400 B more: 200 ms away, 1 KiB records held the worker at
    266-276 MiB of peak RSS with a budget of 128 MiB (~190 MiB once counted)."""
    sizes = inflight_sizes(round_trip, DEFAULT_INFLIGHT_BUDGET_BYTES, None, {}, [SOURCE], producers=1)
    assert sizes.queue_size == queue_size_for(round_trip)  # the default budget holds every round trip's records
    held = sizes.consumer_queue_bytes + sizes.producers_queue_bytes + sizes.queue_size * RECORD_OVERHEAD_BYTES
    assert DEFAULT_INFLIGHT_BUDGET_BYTES - 1024 < held <= DEFAULT_INFLIGHT_BUDGET_BYTES
    assert within_budget(sizes, 1)


def test_a_budget_too_small_for_the_round_trips_records_holds_fewer_of_them():
    budget = 48 * MIB
    sizes = inflight_sizes(0.2, budget, None, {}, [SOURCE], producers=1)
    assert LOOPBACK_QUEUE_SIZE < sizes.queue_size < queue_size_for(0.2)
    assert sizes.producers_queue_bytes >= MIN_PRODUCER_QUEUE_BYTES - 1024
    assert within_budget(sizes, 1)
    # Never fewer than near the destination: a budget under that says so.
    tiny = inflight_sizes(0.2, 20 * MIB, None, {}, [SOURCE], producers=1)
    assert tiny.queue_size == LOOPBACK_QUEUE_SIZE and not within_budget(tiny, 1)


def test_hand_set_values_win_whatever_the_round_trip():
    producer = {"queue.buffering.max.kbytes": "4096"}
    sizes = inflight_sizes(0.2, DEFAULT_INFLIGHT_BUDGET_BYTES, 20_000, producer, [SOURCE], producers=1)
    assert (sizes.queue_size, sizes.producer_queue_kbytes) == (20_000, 4096)
    assert sizes.named == {"queue.size": True, "queue.buffering.max.kbytes": True}
    # A named queue.size is kept even when its records' overhead takes the budget past its bound: it says so.
    named = inflight_sizes(0.2, 32 * MIB, 200_000, {}, [SOURCE], producers=1)
    assert named.queue_size == 200_000 and not within_budget(named, 1)


def test_a_budget_smaller_than_the_prefetch_still_leaves_each_producer_its_floor_and_says_so():
    budget = 16 * MIB
    sizes = inflight_sizes(0.05, budget, None, {}, [SOURCE], producers=1)
    assert sizes.producers_queue_bytes == MIN_PRODUCER_QUEUE_BYTES
    assert not within_budget(sizes, 1)


def test_named_prefetch_is_counted_as_configured():
    assert consumer_prefetch_bytes({"queued.max.messages.kbytes": "1024", "fetch.max.bytes": "4194304"}) \
        == 1 * MIB + 4 * MIB
    # Parsed settings carry the worker's default prefetch bound (CONSUMER_DEFAULTS), counted as it is, and one
    # response of overshoot: a whole response, not one partition's share of it (at width it holds thousands').
    parsed = consumer_settings({"bootstrap.servers": "a:1"}, "source", sized_by_round_trip=True)
    assert consumer_prefetch_bytes(parsed) == 16 * MIB + 16 * MIB  # the response size not decided yet: the larger
    assert consumer_prefetch_bytes({**parsed, **fetch_sizes_for(0.001, parsed)}) == 16 * MIB + 4 * MIB


def test_unnamed_queue_size_leaves_the_producers_message_bound_to_the_worker():
    assert "queue.buffering.max.messages" not in producer_settings({"bootstrap.servers": "b:1"}, "destination", None)
    assert producer_settings({"bootstrap.servers": "b:1"}, "destination", 40_000)["queue.buffering.max.messages"] \
        == "40000"
    named = {"bootstrap.servers": "b:1", "queue.buffering.max.messages": "7000"}
    assert producer_settings(named, "destination", None)["queue.buffering.max.messages"] == "7000"


def test_a_far_destinations_producer_holds_a_few_batches_per_partition_not_the_whole_share():
    """Stop 67: the destination takes one batch per partition per round trip from an idempotent producer, so bytes
    beyond a few batches each only queue. With records of 1 KiB, 6 partitions and 1 MiB batches 100 ms away, the whole
    share (73 MiB on the bench) held the worker at 230 MiB of peak RSS; 18 MiB copied as fast at 164 MiB (bench.wan)."""
    share = inflight_sizes(0.1, DEFAULT_INFLIGHT_BUDGET_BYTES, None, {}, [SOURCE], 1).producer_queue_kbytes
    assert share > 50 * 1024  # 59.5 MiB: the budget less the prefetch and 135,000 records' overhead
    assert BATCHES_PER_PARTITION == 3
    assert producer_queue_kbytes_for(share, 6, MIB) == 18 * 1024
    # Batches of 8 MiB (destination topics that take them, docs/operations/wan.md): 144 MiB, the share binds.
    assert producer_queue_kbytes_for(share, 6, 8 * MIB) == share
    # Never under the floor a record larger than the bound needs, nor over the share; uncounted: the share.
    assert producer_queue_kbytes_for(share, 1, MIB) == MIN_PRODUCER_QUEUE_BYTES // 1024
    assert producer_queue_kbytes_for(4096, 1, MIB) == 4096
    assert producer_queue_kbytes_for(share, None, MIB) == producer_queue_kbytes_for(share, 0, MIB) == share
    # At width the budget's share binds long before: 1,000 partitions would take 3 GiB.
    assert producer_queue_kbytes_for(share, 1000, MIB) == share

"""bench.hot_path_cost times what it says: every record of every batch handed to the producer, or the pass fails."""

from __future__ import annotations

import pytest

from bench import hot_path_cost


def test_every_system_is_timed_once_per_repeat_in_nanoseconds_per_record():
    found = hot_path_cost.measure(2 * hot_path_cost.BATCH, 100, 2, True)
    assert set(found) == {"worker", "bare by keyword", "bare by position"}
    assert all(len(values) == 2 and all(v > 0 for v in values) for values in found.values())


def test_the_batches_are_runs_of_one_partition_in_offset_order():
    (batch,) = hot_path_cost.batches(hot_path_cost.BATCH, 100)
    assert len(batch) == hot_path_cost.BATCH and len(batch[0].value()) + len(batch[0].key()) == 100
    runs = [batch[i:i + hot_path_cost.RUN] for i in range(0, len(batch), hot_path_cost.RUN)]
    assert all(len({m.partition() for m in run}) == 1 for run in runs)
    for partition in range(hot_path_cost.PARTITIONS):
        offsets = [m.offset() for m in batch if m.partition() == partition]
        assert offsets == list(range(len(offsets)))


def test_a_pass_that_held_records_back_is_refused_not_timed():
    producer = hot_path_cost._producer()  # noqa: SLF001 - the bench's own producer
    one_pass = hot_path_cost.worker_pass(producer)
    (batch,) = hot_path_cost.batches(hot_path_cost.BATCH, 100)
    with pytest.raises(RuntimeError, match="held back"):
        one_pass(batch * 5)  # more than the bench's producer queues (2 batches) or its queue.size (4) at once
    producer.purge()
    producer.poll(0)

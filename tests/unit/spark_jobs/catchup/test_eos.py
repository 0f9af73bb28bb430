"""Catch-up on an exactly-once mirror (spark_jobs/catchup/eos.py): transactions with the worker's positions,
start after fencing, a worker's takeover, with in-memory fakes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mirror_worker.exactly_once.transactions import ProducerFenced
from spark_jobs.catchup import eos as catchup_eos
from spark_jobs.catchup.copy_range import CopySettings, copy_range
from spark_jobs.catchup.eos import ExactlyOnce, Fenced, copy_exactly_once
from tests.unit.spark_jobs.catchup.test_copy_range import TASK, RangeConsumer, RecordingProducer, _log

EOS = ExactlyOnce("orders-mirror", "east", "orders-mirror.mirror.eos-positions", {}, 5.0, commit_every=4)
SETTINGS = CopySettings(consumer={}, producer={"acks": "all"}, destination_cluster_id="dst", exactly_once=EOS)


def test_a_checkpoint_commits_every_n_records_and_the_range_end_instead_of_a_flush():
    calls = []
    consumer = RangeConsumer(_log(range(10, 25)), batch_limit=3, calls=calls)
    producer = RecordingProducer(calls)
    copied = copy_range(TASK, SETTINGS, consumer, producer, [], emit=lambda _e: None,
                        checkpoint=lambda position: calls.append(("checkpoint", position)), checkpoint_every=4)
    assert copied == 10
    # Batches of 3: 6 copied after the second batch (position 16); 10 by the end, whose checkpoint is the range end.
    assert calls == [("checkpoint", 16), ("checkpoint", 20), ("commit", [("orders", 2, 20, "id-orders")])]


def test_no_checkpoint_when_a_delivery_failed():
    calls = []
    consumer = RangeConsumer(_log(range(10, 20)), calls=calls)
    with pytest.raises(Exception, match="delivery failed"):
        copy_range(TASK, SETTINGS, consumer, RecordingProducer(calls), ["Broker: fenced"], emit=lambda _e: None,
                   checkpoint=lambda position: calls.append(("checkpoint", position)), checkpoint_every=4)
    assert calls == []


class FakeTransactions:
    def __init__(self, found, fenced_at=None):
        self.found, self.fenced_at = found, fenced_at
        self.producers = {(TASK.topic, TASK.partition): RecordingProducer()}
        self.commits, self.closed = [], False

    def open(self, keys):
        return {key: self.found for key in keys}

    def commit(self, key, position, timeout_s):
        if self.fenced_at is not None and position >= self.fenced_at:
            raise ProducerFenced(f"{key[0]}[{key[1]}]: Broker: Producer fenced")
        self.commits.append(position)

    def close_all(self):
        self.closed = True


@pytest.fixture
def transactions(monkeypatch):
    made = {}

    def install(found, fenced_at=None):
        made["t"] = FakeTransactions(found, fenced_at)
        monkeypatch.setattr(catchup_eos, "_transactions", lambda *args: made["t"])
        return made["t"]

    return install


@pytest.mark.parametrize("found, start", [(None, 10), ((10, "id-orders"), 10), ((14, "id-orders"), 14),
                                          ((30, "id-orders"), 20), ((5, "id-orders"), 10)])
def test_the_task_starts_at_the_plan_or_past_it_where_a_worker_moved_the_position(transactions, found, start):
    fake = transactions(found)
    consumer = RangeConsumer(_log(range(0, 25)))
    copied = copy_exactly_once(TASK, SETTINGS, consumer, [], copy_range)
    produced = [int(key[1:]) for _t, _p, key, *_ in fake.producers[(TASK.topic, TASK.partition)].produced]
    assert produced == list(range(start, 20)) and copied == 20 - start
    assert fake.commits[-1] == 20 and fake.closed


def test_a_worker_taking_the_partition_over_fails_the_task_and_says_so(transactions):
    fake = transactions(None, fenced_at=16)
    with pytest.raises(Fenced, match=r"orders\[2\]: a worker took the partition over during the catch-up"):
        copy_exactly_once(replace(TASK, end=40), SETTINGS, RangeConsumer(_log(range(10, 40))), [], copy_range)
    # Only the claim (the start position, naming the task as writer) before any record; nothing after the takeover.
    assert fake.commits == [10] and fake.closed


class FailingFlushProducer(RecordingProducer):
    """Its last delivery reports, served by the flush, are failures (as a refused batch's are)."""

    def __init__(self, errors):
        super().__init__()
        self.errors = errors

    def flush(self, timeout):
        self.errors.append("Broker: Message size too large")
        return 0


def test_a_failure_reported_by_the_final_flush_fails_the_task_before_its_commit():
    calls, errors = [], []
    consumer = RangeConsumer(_log(range(10, 20)), calls=calls)
    with pytest.raises(Exception, match="delivery failed.*Message size too large"):
        copy_range(TASK, replace(SETTINGS, exactly_once=None), consumer, FailingFlushProducer(errors), errors,
                   emit=lambda _e: None)
    assert calls == []  # nothing committed

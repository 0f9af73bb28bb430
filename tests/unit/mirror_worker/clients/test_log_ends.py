"""log_ends.list_offsets at width: a partition whose leader is not ready yet (a broker still loading thousands of
new partitions answered NOT_LEADER_FOR_PARTITION, bench/width.py at 5,000) is asked again, not fatal."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from mirror_worker.clients import log_ends


class Answer:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class SlowLeaders:
    """ListOffsets whose partition 1 answers NOT_LEADER_FOR_PARTITION the first `refusals` times."""

    def __init__(self, refusals: int, error: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.refusals, self.error = refusals, error
        self.asked: list[list[int]] = []

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        self.asked.append(sorted(tp.partition for tp in requests))
        out = {}
        for tp in requests:
            future = Future()
            if tp.partition == 1 and self.refusals > 0:
                self.refusals -= 1
                future.set_exception(KafkaException(KafkaError(self.error)))
            else:
                future.set_result(Answer(100 + tp.partition))
            out[tp] = future
        return out


@pytest.mark.parametrize("error", [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_LEADER_EPOCH])
def test_a_partition_without_a_ready_leader_is_asked_again_alone(monkeypatch, error):
    monkeypatch.setattr(log_ends.time, "sleep", lambda s: None)
    admin = SlowLeaders(refusals=3, error=error)
    partitions = [TopicPartition("t", p) for p in range(3)]
    assert log_ends.list_offsets(admin, partitions, OffsetSpec.latest(), True, 5.0) == {
        ("t", 0): 100, ("t", 1): 101, ("t", 2): 102}
    assert admin.asked == [[0, 1, 2], [1], [1], [1]]


def test_an_error_that_is_not_retriable_is_raised_at_once(monkeypatch):
    monkeypatch.setattr(log_ends.time, "sleep", lambda s: None)
    admin = SlowLeaders(refusals=1, error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        log_ends.list_offsets(admin, [TopicPartition("t", 1)], OffsetSpec.latest(), True, 5.0)
    assert len(admin.asked) == 1

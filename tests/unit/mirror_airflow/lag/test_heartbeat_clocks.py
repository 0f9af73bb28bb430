"""Which clocks the lag sensor trusts: its judgement (`MirrorLagSensor._judge`) over a fake heartbeat topic whose
records carry a worker's skewed wall clock, stamped by the destination broker (LogAppendTime) or not (CreateTime).
A worker clock ahead must not hide a dead mirror; one behind must not page a live one for as long as it stays behind.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_END, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TopicPartition

from mirror_airflow.lag import measure
from mirror_airflow.lag.rules import Limits
from mirror_airflow.sensors import lag as sensors
from tests.unit.mirror_airflow.lag.sensor_util import orders_lag_sensor

HOUR = 3600.0


class _Record:
    def __init__(self, offset: int, key: bytes, value: dict, timestamp: tuple[int, int]):
        self._offset, self._key, self._value, self._timestamp = offset, key, json.dumps(value).encode(), timestamp

    def error(self):
        return None

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def timestamp(self):
        return self._timestamp


class FakeHeartbeatTopic:
    """One partition of heartbeat records, read the way `measure.newest_heartbeats` reads it."""

    def __init__(self, log_append_time: bool):
        self.log_append_time = log_append_time
        self.records: list[_Record] = []
        self.position = 0

    def beat(self, *, at: float, worker_clock_offset: float, worker: str = "host-a:1", source: str = "east") -> None:
        """A heartbeat appended at real time `at` by a worker whose wall clock is `worker_clock_offset` s off."""
        stamp_ms = int((at + worker_clock_offset) * 1000)
        value = {"mirror": "orders", "source": source, "worker": worker, "timestamp_ms": stamp_ms}
        # The record's timestamp: the broker's append time on a LogAppendTime topic, else the producer's stamp.
        timestamp = (TIMESTAMP_LOG_APPEND_TIME, int(at * 1000)) if self.log_append_time else \
            (TIMESTAMP_CREATE_TIME, stamp_ms)
        self.records.append(_Record(len(self.records), f"orders/{source}".encode(), value, timestamp))

    # The consumer calls newest_heartbeats makes -----------------------------------------------------
    def list_topics(self, topic, timeout=None):
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    def offsets_for_times(self, partitions, timeout=None):
        [tp] = partitions
        first = next((r.offset() for r in self.records if r.timestamp()[1] >= tp.offset), OFFSET_END)
        return [TopicPartition(tp.topic, 0, first)]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return 0, len(self.records)

    def assign(self, partitions):
        self.position = partitions[0].offset

    def consume(self, num_messages=1, timeout=-1):
        batch, self.position = self.records[self.position:], len(self.records)
        return batch

    def close(self):
        pass


@pytest.fixture
def judge(tmp_path, monkeypatch):
    """judge(topic) -> the sensor's result dict, or the LagCheckFailed it raised."""
    monkeypatch.setenv("MIRROR_DASHBOARD_DB", str(tmp_path / "h.sqlite"))
    sensor = orders_lag_sensor(Limits(max_latency_s=300))

    def run(topic: FakeHeartbeatTopic):
        monkeypatch.setattr(measure, "_reader", lambda settings, group: topic)
        try:
            return sensor._judge({})
        except sensors.LagCheckFailed as failed:
            return failed

    return run


def _beats(topic: FakeHeartbeatTopic, *, start: float, end: float, worker_clock_offset: float, **kw) -> None:
    at = start
    while at <= end:
        topic.beat(at=at, worker_clock_offset=worker_clock_offset, **kw)
        at += 5


@pytest.mark.parametrize("log_append_time,status", [(True, "LATENCY"), (False, "SKEW")])
def test_a_worker_clock_an_hour_ahead_does_not_hide_a_dead_mirror(judge, log_append_time, status):
    now = time.time()
    topic = FakeHeartbeatTopic(log_append_time)
    # Heartbeats until 8 min ago, then silence: the worker died. Its stamps read "52 min from now".
    _beats(topic, start=now - 580, end=now - 480, worker_clock_offset=HOUR)
    result = judge(topic)
    assert isinstance(result, sensors.LagCheckFailed), f"a dead mirror passed: {result}"
    assert result.status == status
    if log_append_time:  # the broker's append time: 480 s old, whatever the worker's clock said
        assert "replication latency 480s > max 300s" in str(result)
    else:  # only the worker's stamp to go by: from the future, so its age cannot be judged
        assert "stamped 3120s ahead of the sensor's clock by worker host-a:1" in str(result)


def test_one_stamp_from_the_future_does_not_mask_later_heartbeats(judge):
    now = time.time()
    topic = FakeHeartbeatTopic(log_append_time=False)
    # The worker's clock was an hour ahead, then NTP stepped it back; it died 400 s ago. The newest heartbeat
    # by offset is the honest one; the largest stamp is the one from the future.
    _beats(topic, start=now - 700, end=now - 600, worker_clock_offset=HOUR)
    _beats(topic, start=now - 595, end=now - 400, worker_clock_offset=0)
    result = judge(topic)
    assert isinstance(result, sensors.LagCheckFailed), f"a dead mirror passed: {result}"
    assert result.status == "LATENCY" and "replication latency 400s" in str(result)


def test_a_worker_clock_ten_minutes_behind_does_not_page_a_live_mirror(judge):
    now = time.time()
    topic = FakeHeartbeatTopic(log_append_time=True)
    _beats(topic, start=now - 600, end=now - 2, worker_clock_offset=-600)
    result = judge(topic)
    assert not isinstance(result, sensors.LagCheckFailed), f"a live mirror paged: {result}"
    # Not failing, but said: a WARN naming the worker and its skew.
    assert result["status"] == "WARN"
    assert result["latency_s"]["east"] < 10


def test_a_live_mirror_with_honest_clocks_is_ok(judge):
    now = time.time()
    for log_append_time in (True, False):
        topic = FakeHeartbeatTopic(log_append_time)
        _beats(topic, start=now - 300, end=now - 1, worker_clock_offset=0.2)
        assert judge(topic)["status"] == "OK"

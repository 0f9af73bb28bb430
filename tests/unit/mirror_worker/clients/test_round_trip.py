"""The round trip measured at start, and the source fetch size that follows it (issue 45: on loopback the
4 MiB fetches cost ~100 MiB of RSS at 100 B records and bought nothing; across a WAN they keep the rate)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.callbacks import ClientSettings
from mirror_worker.clients.health import DESTINATION
from mirror_worker.clients.round_trip import PROBE_TOPIC, round_trip_s, round_trips
from mirror_worker.config.fetch_sizes import (
    LOOPBACK_FETCH_MAX_BYTES,
    LOOPBACK_PARTITION_FETCH_BYTES,
    LOOPBACK_QUEUED_MIN_MESSAGES,
    WAN_FETCH_MAX_BYTES,
    WAN_PARTITION_FETCH_BYTES,
    fetch_sizes_for,
)
from mirror_worker.config.librdkafka import consumer_settings
from mirror_worker.metrics import MirrorMetrics


class Clock:
    """A fake clock per thread: a sample asked from another thread leaves the asking thread's clock where it was."""

    def __init__(self) -> None:
        self.local = threading.local()

    @property
    def now(self) -> float:
        return getattr(self.local, "now", 0.0)

    @now.setter
    def now(self, value: float) -> None:
        self.local.now = value

    def __call__(self) -> float:
        return self.now


class TimedClient:
    """Each metadata request takes the next of `took` seconds of the fake clock (the asking thread's); an exception
    is raised."""

    def __init__(self, clock: Clock, took: list) -> None:
        self.clock, self.took, self.asked = clock, list(took), []

    def list_topics(self, topic=None, timeout=None):
        self.asked.append(topic)
        took = self.took.pop(0)
        if isinstance(took, Exception):
            raise took
        self.clock.now += took


def test_the_shortest_of_three_requests_for_one_topic_is_the_round_trip():
    clock = Clock()
    client = TimedClient(clock, [0.080, 0.051, 0.260])
    assert round_trip_s(client, clock=clock) == pytest.approx(0.051)
    assert client.asked == [PROBE_TOPIC] * 3  # never every topic's metadata: a big answer on a wide cluster


def test_a_cluster_that_stops_answering_keeps_what_was_measured():
    clock = Clock()
    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    assert round_trip_s(TimedClient(clock, [0.040, timed_out]), clock=clock) == pytest.approx(0.040)
    assert round_trip_s(TimedClient(clock, [timed_out]), clock=clock) is None


class BarrierClient:
    """Its first request is answered only once `parties` requests (of any client sharing the barrier) wait at the
    same time: asked one after the other, it waits in vain (the barrier breaks after `timeout_s`, and the request
    counts as unanswered). Later ones are answered at once."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier, self.asked = barrier, 0

    def list_topics(self, topic=None, timeout=None):
        self.asked += 1
        if self.asked > 1:
            return
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT)) from None


def test_the_clusters_are_measured_at_once_each_clusters_samples_one_after_the_other(monkeypatch):
    """The defect: each cluster's three samples, then the next cluster's: a worker with two far clusters waited
    for both round trips three times. The clusters are now measured side by side. A cluster's own samples stay one
    after the other: asked at once through a 50 ms proxy they measured two round trips in half the runs."""
    barrier = threading.Barrier(2, timeout=5)
    clients = ClientSettings(MirrorMetrics("m"), {"mirror": "m"}, FakeState(), lambda err, msg: None)
    monkeypatch.setattr(ClientSettings, "cluster_ids", lambda self, probes, timeout_s: ["dest-id", "east-id"])
    monkeypatch.setattr("mirror_worker.clients.callbacks.admin_client", lambda settings, whole: BarrierClient(barrier))
    clients.reach_all(BarrierClient(barrier), {"east": {"bootstrap.servers": "e:1"}}, 5)
    assert set(clients.round_trips) == {DESTINATION, "east"} and None not in clients.round_trips.values()
    assert round_trips({}) == {}
    clock = Clock()
    client = TimedClient(clock, [0.050, 0.051, 0.052])
    assert round_trip_s(client, clock=clock) == pytest.approx(0.050)
    assert clock.now == pytest.approx(0.153)  # each sample timed on this thread's clock: one after the other


@pytest.mark.parametrize("round_trip, expected", [
    (0.0008, LOOPBACK_PARTITION_FETCH_BYTES),  # loopback, a datacenter
    (0.004, LOOPBACK_PARTITION_FETCH_BYTES),   # across zones
    (0.050, WAN_PARTITION_FETCH_BYTES),        # a WAN
    (None, WAN_PARTITION_FETCH_BYTES),         # not measured: the size that never slows a copy
])
def test_the_fetch_size_follows_the_round_trip(round_trip, expected):
    assert fetch_sizes_for(round_trip, {})["max.partition.fetch.bytes"] == str(expected)


@pytest.mark.parametrize("round_trip, expected", [
    (0.0008, str(LOOPBACK_QUEUED_MIN_MESSAGES)),  # a fetch answers in a millisecond: a small prefetch keeps up
    (0.004, str(LOOPBACK_QUEUED_MIN_MESSAGES)),
    (0.010, "6000"),                              # two round trips of 300,000 records/s
    (0.050, "30000"),                             # a WAN: two round trips too (323 -> 283 MiB at 100 B)
    (0.200, "100000"),                            # at most librdkafka's default (100,000 per partition)
    (None, None),                                 # not measured: librdkafka's default
])
def test_the_prefetched_records_follow_the_round_trip(round_trip, expected):
    assert fetch_sizes_for(round_trip, {}).get("queued.min.messages") == expected


@pytest.mark.parametrize("round_trip, expected", [
    (0.0008, LOOPBACK_FETCH_MAX_BYTES),  # at width a near source's prefetch is a few whole responses: smaller ones
    (0.004, LOOPBACK_FETCH_MAX_BYTES),
    (0.050, WAN_FETCH_MAX_BYTES),        # one response per round trip is a WAN source's whole rate
    (None, WAN_FETCH_MAX_BYTES),
])
def test_the_response_size_follows_the_round_trip(round_trip, expected):
    assert fetch_sizes_for(round_trip, {})["fetch.max.bytes"] == str(expected)


@pytest.mark.parametrize("partitions, expected", [
    (6, WAN_FETCH_MAX_BYTES),        # 6 fetches of 1 MiB: a 4-MiB response cut them short (21 against 7.5 CPU-s)
    (16, WAN_FETCH_MAX_BYTES),       # 16 x 1 MiB still fit: never cut short
    (17, LOOPBACK_FETCH_MAX_BYTES),  # more: the response is cut short either way; the smaller holds less memory
    (5000, LOOPBACK_FETCH_MAX_BYTES),
    (None, LOOPBACK_FETCH_MAX_BYTES),  # not counted: taken as many
    (0, LOOPBACK_FETCH_MAX_BYTES),     # no topic yet: those found later may be thousands of partitions
])
def test_a_near_source_of_few_partitions_gets_responses_that_hold_every_partitions_fetch(partitions, expected):
    """Issue 45: a near source's 4 MiB responses (for memory at width) cut 6 partitions' 1 MiB fetches short, and
    with the destination 50 ms away the worker burned 2.8x the CPU at two thirds of the rate (bench.wan)."""
    assert fetch_sizes_for(0.0008, {}, partitions)["fetch.max.bytes"] == str(expected)
    assert fetch_sizes_for(0.050, {}, partitions)["fetch.max.bytes"] == str(WAN_FETCH_MAX_BYTES)


def test_a_fetch_size_the_settings_name_wins_at_any_round_trip():
    named = consumer_settings({"bootstrap.servers": "a:1", "max.partition.fetch.bytes": "2097152",
                               "queued.min.messages": "777", "fetch.max.bytes": "9999999"}, "source",
                              sized_by_round_trip=True)
    assert fetch_sizes_for(0.0008, named) == {} == fetch_sizes_for(0.2, named)
    # Unnamed, a mirror source's parsed settings leave them out, for the round trip to decide.
    unnamed = consumer_settings({"bootstrap.servers": "a:1"}, "source", sized_by_round_trip=True)
    assert not {"max.partition.fetch.bytes", "queued.min.messages", "fetch.max.bytes"} & set(unnamed)
    # Any other consumer (the Spark jobs, the Airflow hook, the bare loop) keeps the WAN response size.
    assert consumer_settings({"bootstrap.servers": "a:1"}, "hook")["fetch.max.bytes"] == str(WAN_FETCH_MAX_BYTES)


class FakeState:
    stop_event = type("E", (), {"is_set": staticmethod(lambda: False)})()

    def fail(self, reason: str) -> None:
        raise AssertionError(reason)


def test_reach_all_measures_every_cluster_and_exports_it(monkeypatch):
    metrics = MirrorMetrics("m")
    clients = ClientSettings(metrics, {"mirror": "m"}, FakeState(), lambda err, msg: None)
    monkeypatch.setattr(ClientSettings, "cluster_ids", lambda self, probes, timeout_s: ["dest-id", "east-id"])
    monkeypatch.setattr("mirror_worker.clients.callbacks.admin_client", lambda settings, whole: ("admin", settings))
    measured = {DESTINATION: 0.052, "east": 0.0009}
    clients.reach_all("destination-admin", {"east": {"bootstrap.servers": "e:1"}}, 5,
                      measure=lambda client: measured["east" if isinstance(client, tuple) else DESTINATION])
    assert clients.round_trips == measured
    assert metrics.registry.get_sample_value(
        "mirror_cluster_round_trip_seconds", {"mirror": "m", "cluster": "east"}) == pytest.approx(0.0009)


@pytest.mark.parametrize("round_trip, record_bytes, expected", [
    (0.050, 116, 6_960_000),                 # 100 B values: 1.2M records/s over one round trip, ~7 MB
    (0.050, 1_040, WAN_FETCH_MAX_BYTES),     # 1 KiB: the cap, as before the sample
    (0.100, 116, 7_888_000),                 # farther: at most 68,000 records a response (340,000/s at 200 ms)
    (0.200, 116, 7_888_000),                 # (the 16 MiB cap, ~140,000 records, held 275.6 MiB of RSS at 200 ms)
    (0.200, 1_040, WAN_FETCH_MAX_BYTES),     # 1 KiB far away: still the cap
    (0.050, 20, LOOPBACK_FETCH_MAX_BYTES),   # tiny records: never under a near source's response
    (0.050, None, WAN_FETCH_MAX_BYTES),      # not sampled (an empty topic, no answer): the cap
    (None, 116, WAN_FETCH_MAX_BYTES),        # round trip not measured: the cap
])
def test_a_far_sources_response_follows_its_sampled_record_size(round_trip, record_bytes, expected):
    """Issue 45: 16 MiB of 100 B records is ~140,000 records a response, and a source 50 ms away held the worker at
    268-283 MiB of RSS; 8 MiB responses at 183-195 MiB at the same rate (bench.wan, stops 57 and 61)."""
    assert fetch_sizes_for(round_trip, {}, record_bytes=record_bytes)["fetch.max.bytes"] == str(expected)


def test_a_near_source_and_named_settings_ignore_the_sampled_size():
    assert fetch_sizes_for(0.0008, {}, 6, 116)["fetch.max.bytes"] == str(WAN_FETCH_MAX_BYTES)  # few partitions
    assert fetch_sizes_for(0.0008, {}, 5000, 116)["fetch.max.bytes"] == str(LOOPBACK_FETCH_MAX_BYTES)
    assert "fetch.max.bytes" not in fetch_sizes_for(0.050, {"fetch.max.bytes": "9999999"}, record_bytes=116)


def test_a_response_never_goes_under_the_consumers_message_max_bytes():
    """librdkafka refuses a consumer whose fetch.max.bytes is under its message.max.bytes: a small sampled record
    size (or a near source's 4 MiB) must not make a consumer that takes 10 MB records unmakeable."""
    from confluent_kafka import Consumer

    settings = {"message.max.bytes": "10000000"}
    for sizes in (fetch_sizes_for(0.050, settings, record_bytes=116), fetch_sizes_for(0.0008, settings, 5000)):
        assert sizes["fetch.max.bytes"] == "10000000"
        Consumer({"group.id": "g", **settings, **sizes}).close()  # librdkafka takes it
    # Any other consumer (the Airflow hook, the Spark jobs) gets 16 MiB responses, or its message.max.bytes if larger.
    hook = consumer_settings({"bootstrap.servers": "a:1", "message.max.bytes": "20000000"}, "hook")
    assert hook["fetch.max.bytes"] == "20000000"

"""A cluster's round-trip time as the worker sees it at start: what its fetch sizes follow (config/fetch_sizes.py
fetch_sizes_for), logged and exported as mirror_cluster_round_trip_seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException

# Asked for by name: one small metadata request and answer, whatever the cluster holds (every topic's metadata
# would be a large answer on a cluster of thousands of partitions). Missing is fine: the answer says so.
PROBE_TOPIC = "__consumer_offsets"
SAMPLES = 3


def round_trip_s(client, samples: int = SAMPLES, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> float | None:
    """The shortest of `samples` metadata round trips of `client` (an admin client or a consumer whose first
    contact was made, so no connection set-up is timed); None if the cluster did not answer. The shortest,
    because a loaded machine only ever adds to a round trip: a busy moment must not look like a WAN.

    One after the other: asked at once from threads of their own, three samples through a 50 ms proxy measured
    98-106 ms in half the runs, 200 ms ones 404 (bench.wan, 2026-11-30): librdkafka answered the second request
    after the first, and the shortest was two round trips. Sizes taken from that would be a WAN twice as far."""
    best = None
    for _ in range(samples):
        started = clock()
        try:
            client.list_topics(topic=PROBE_TOPIC, timeout=timeout_s)
        except KafkaException:
            return best
        took = clock() - started
        best = took if best is None else min(best, took)
    return best


def round_trips(clients: dict[str, object], measure: Callable[[object], float | None] = round_trip_s
                ) -> dict[str, float | None]:
    """Each named cluster's round trip (`clients`: name -> a client that made contact), each cluster from a thread
    of its own (their own connections): start-up waits for the farthest cluster's samples, not for every
    cluster's one after the other."""
    if not clients:
        return {}
    with ThreadPoolExecutor(len(clients), thread_name_prefix="round-trips") as pool:
        return dict(zip(clients, pool.map(measure, clients.values())))

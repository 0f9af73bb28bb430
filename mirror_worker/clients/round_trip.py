"""A cluster's round-trip time as the worker sees it at start: what its fetch sizes follow (config/librdkafka.py
fetch_sizes_for), logged and exported as mirror_cluster_round_trip_seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException

# Asked for by name: one small metadata request and answer, whatever the cluster holds (every topic's metadata
# would be a large answer on a cluster of thousands of partitions). Missing is fine: the answer says so.
PROBE_TOPIC = "__consumer_offsets"
SAMPLES = 3


def round_trip_s(client, samples: int = SAMPLES, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> float | None:
    """The shortest of `samples` metadata round trips of `client` (an admin client or a consumer whose first
    contact was made, so no connection set-up is timed); None if the cluster did not answer. The shortest,
    because a loaded machine only ever adds to a round trip: a busy moment must not look like a WAN."""
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

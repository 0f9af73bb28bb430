"""A cluster's round-trip time as the worker sees it at start: what its fetch sizes follow (config/librdkafka.py
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

    The samples are asked at once, each from a thread of its own (librdkafka sends them down the same connection
    one behind the other): start-up waits one round trip for them, not one per sample (0.1 s at 50 ms, 0.4 s at
    200 ms). Taken one after the other they were no further apart in time on a near cluster either, where a busy
    moment matters: milliseconds."""
    def sample(_: int) -> float | None:
        started = clock()
        try:
            client.list_topics(topic=PROBE_TOPIC, timeout=timeout_s)
        except KafkaException:
            return None
        return clock() - started

    with ThreadPoolExecutor(samples, thread_name_prefix="round-trip") as pool:
        took = [t for t in pool.map(sample, range(samples)) if t is not None]
    return min(took) if took else None


def round_trips(clients: dict[str, object], measure: Callable[[object], float | None] = round_trip_s
                ) -> dict[str, float | None]:
    """Each named cluster's round trip (`clients`: name -> a client that made contact), all measured at once:
    start-up waits for the farthest, not for the sum of them."""
    if not clients:
        return {}
    with ThreadPoolExecutor(len(clients), thread_name_prefix="round-trips") as pool:
        return dict(zip(clients, pool.map(measure, clients.values())))

"""Where each source record goes: destination topic, partition and producer. Pure and cached."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from mirror_worker.policy.naming import NamingPolicy

ANY_PARTITION = -1  # let the producer's partitioner (murmur2 of the key) choose


@dataclass(frozen=True)
class Route:
    topic: str
    partition: int
    producer_index: int  # an index into the stream's producer list


@dataclass
class Router:
    policy: NamingPolicy
    preserve_partitions: bool
    preserve_order: bool
    num_producers: int = 1
    destination_partitions: dict[str, int] = field(default_factory=dict)
    _cache: dict[tuple[str, int], Route] = field(default_factory=dict)

    def set_destination_partitions(self, topic: str, count: int) -> None:
        if self.destination_partitions.get(topic) != count:
            self.destination_partitions[topic] = count
            self._cache.clear()

    def route(self, source_topic: str, source_partition: int) -> Route:
        key = (source_topic, source_partition)
        route = self._cache.get(key)
        if route is None:
            route = self._cache[key] = self._compute(source_topic, source_partition)
        return route

    def _compute(self, source_topic: str, source_partition: int) -> Route:
        topic = self.policy.remote_topic(source_topic)
        if self.preserve_partitions:
            partition = source_partition
        elif self.preserve_order:
            # Each source partition feeds exactly one destination partition, so its order survives.
            partition = source_partition % self.destination_partitions[topic]
        else:
            partition = ANY_PARTITION
        # One producer per source partition keeps that partition's records in one ordered stream.
        producer_index = zlib.crc32(f"{source_topic}\x00{source_partition}".encode()) % self.num_producers
        return Route(topic, partition, producer_index)


"""Committed data only: the Spark jobs read a source partition up to its last stable offset (LSO), as the
worker's read_committed consumer does, and name every partition where that stops short of the high
watermark because a transaction is still open.

Inside [start, LSO) some offsets hold no record a read_committed reader returns (aborted records,
transaction markers): ranges are offset bounds, never record counts.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN_TRANSACTION = "stopped at the last stable offset (a transaction is open)"


@dataclass(frozen=True)
class LogEnds:
    low: int
    stable: int     # what the reader can reach: the LSO read_committed, the high watermark read_uncommitted
    high: int


@dataclass(frozen=True)
class OpenTransaction:
    """A partition whose range ends at its LSO, below the high watermark."""

    topic: str
    partition: int
    last_stable: int
    high: int

    def line(self) -> str:
        return (f"{self.topic}[{self.partition}] stopped at the last stable offset {self.last_stable} "
                f"(a transaction is open; high watermark {self.high})")

    def summary(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "last_stable_offset": self.last_stable,
                "high_watermark": self.high, "reason": OPEN_TRANSACTION}


def reachable(ends: dict[tuple[str, int], LogEnds]) -> dict[str, dict[int, tuple[int, int]]]:
    """{topic: {partition: (log start, end the reader reaches)}}."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for (topic, partition), bounds in sorted(ends.items()):
        out.setdefault(topic, {})[partition] = (bounds.low, bounds.stable)
    return out


def open_transactions(range_ends: dict[tuple[str, int], int],
                      ends: dict[tuple[str, int], LogEnds]) -> list[OpenTransaction]:
    """The partitions whose range end is their LSO while records lie past it (a range ending earlier, e.g.
    at a --to-timestamp, did not stop because of the transaction)."""
    out = []
    for (topic, partition), end in sorted(range_ends.items()):
        bounds = ends[(topic, partition)]
        if end == bounds.stable < bounds.high:
            out.append(OpenTransaction(topic, partition, bounds.stable, bounds.high))
    return out


def isolation_option(committed: bool) -> dict[str, str]:
    """Spark's Kafka source option: the Java client reads read_uncommitted unless told otherwise."""
    return {"kafka.isolation.level": "read_committed" if committed else "read_uncommitted"}

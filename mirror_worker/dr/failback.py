"""Where a failback (reverse) mirror starts a partition it has no position for.

After a failover, a topic on the promoted cluster holds the forward mirror's copies, each with a
provenance header naming the old source cluster, followed by what producers wrote there since. The
reverse mirror (spec `reverse-of`) takes those new records back to the old source, which is its
destination. It must not copy the forward mirror's copies back (the old source has them), and it must
not start at the end either (the records written since the failover would be missed). So a partition
starts just after the last record that came from the reverse mirror's destination cluster:

    promoted cluster   low  copy copy ... copy | new new ... new  high
                                               ^ start (a partition with no copy starts at low)

The scan reads backwards from the end in windows that double: its cost is the records written since
the failover plus one window, not the topic. A copy after the start is impossible by construction, and
copies met later (a forward mirror still running) are skipped by the hot path (`origin-records: skip`).
What the start cannot see: a new record written *before* the forward mirror's last copy, that is, a
producer that moved before the forward mirror stopped. The failover DAG stops the mirror before anyone
moves, for this reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from mirror_worker.dr.offset_translation import committed_reader
from mirror_worker.policy.provenance import is_copy_from

log = logging.getLogger("mirror_worker")


class FailbackStream(Protocol):
    """What failback reads of one of the worker's source clusters (`engine.source_stream.SourceStream`)."""

    alias: str
    admin: object

# records(topic, partition, start, end): (offset, provenance header or None) of the records in [start, end)
RecordReader = Callable[[str, int, int, int], Iterable[tuple[int, bytes | None]]]


@dataclass(frozen=True)
class FailbackPoint:
    offset: int             # where the partition starts
    last_copy: int | None   # the forward mirror's last copy, None when the partition holds none
    records_read: int


def failback_start(records: RecordReader, topic: str, partition: int, low: int, high: int, origin_cluster_id: str,
                   window: int = 1000, destination_topic: str = "") -> FailbackPoint:
    """The offset after the last record of [low, high) that is a copy of a record of `origin_cluster_id`
    (provenance.is_copy_from, as the hot path skips them; `destination_topic`: where this mirror writes `topic`),
    else low."""
    end, size, read = high, max(1, window), 0
    while end > low:
        start = max(low, end - size)
        last = None
        for offset, header in records(topic, partition, start, end):
            read += 1
            if is_copy_from(header, origin_cluster_id, topic, destination_topic):
                last = offset
        if last is not None:
            return FailbackPoint(last + 1, last, read)
        end, size = start, size * 2
    return FailbackPoint(low, None, read)


class FailbackStart:
    """`PartitionAssignment`'s start rule for partitions without a position, in a reverse mirror.

    `reader_for(stream)` makes a record reader of that source cluster (one per stream, kept until `close`);
    `remote_topic(topic)`: the mirror's destination topic of a source topic.
    """

    def __init__(self, destination_cluster_id: str, reader_for: Callable[[FailbackStream], object], label: dict,
                 window: int = 1000, remote_topic: Callable[[str], str] | None = None) -> None:
        self.destination_cluster_id = destination_cluster_id
        self.reader_for = reader_for
        self.remote_topic = remote_topic
        self.label = label
        self.window = window
        self._readers: dict[str, object] = {}

    def __call__(self, stream: FailbackStream, topic: str, partition: int, low: int, high: int) -> int:
        reader = self._readers.get(stream.alias)
        if reader is None:
            reader = self._readers[stream.alias] = self.reader_for(stream)
        point = failback_start(reader.records, topic, partition, low, high, self.destination_cluster_id, self.window,
                               self.remote_topic(topic) if self.remote_topic else "")
        log.info("failback start", extra={
            **self.label, "source": stream.alias, "partition": f"{topic}[{partition}]", "offset": point.offset,
            "last_copy": point.last_copy, "records_after": high - point.offset, "records_read": point.records_read,
        })
        return point.offset

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def worker_failback_start(config, destination_cluster_id: str, label: dict) -> FailbackStart | None:
    """A reverse mirror's start rule, reading each source cluster with that source's client settings."""
    if config.reverse_of is None:
        return None
    settings = {source.name: source.consumer for source in config.sources}

    def reader_for(stream: FailbackStream):
        return committed_reader(settings[stream.alias], stream.admin, f"{config.group_id}.failback-start",
                                config.startup_timeout_s, where=f"source {stream.alias!r}")

    return FailbackStart(destination_cluster_id, reader_for, label, remote_topic=config.naming_policy().remote_topic)

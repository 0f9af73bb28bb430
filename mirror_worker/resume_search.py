"""Where a failed-over consumer resumes on the destination, from the provenance headers it holds (pure).

A group committed source offset C on a source partition (the next record it would read). With
preserve-partitions, every mirrored copy of that partition's records is in one destination partition,
and each copy carries a provenance header naming its source offset s (provenance.py). The resume
offset is the destination offset of the first record, scanning from a safe start, that is a copy of
some s >= C:

    destination  ... s<C  s<C | s>=C  s>=C  s<C (re-sent)  s>=C ...
                              ^ resume here: no copy of any s >= C lies before it

Why this is safe without any assumption on how the mirror wrote the partition: the scan read every
record between the start and the resume offset, and none of them is a copy of an s >= C; before the
start there is none either (the start is the low watermark, or the destination offset D of an offset
sync (S, D) with S <= C: every copy of a record at/after S lands at D or later, see offset_syncs.py).
So every copy of every s >= C is at or after the resume offset: nothing is missed.

What the consumer re-reads from there: exactly the copies of s < C after the resume offset. A clean
mirror run writes a partition in source order, so there are none: 0 records. After a crash the mirror
re-sends from its last commit, and copies of s < C after the first copy of an s >= C are those re-sent
records: "at most the mirror's own re-sent duplicates". The scan goes on to the end and counts them
(plus records without a header, which may be anything): `may_reread` is that count, an upper bound of
what a consumer re-reads up to `end_offset`.

Why a scan from the safe start and not a binary search over destination offsets: source offsets are
monotone in destination offset only for a clean run. After a crash a re-sent range can hide the only
copy of an s >= C before a point where a binary search sees s < C (run 1 wrote 0..100, run 2 re-sent
50..60 and stopped: a search for C = 55 may land in run 2 and skip 61..100). Only reading every record
between the start and the answer proves there is no such copy. The start is the nearest offset sync, so
the scan is as short as the syncs are dense; reading on to the end gives the re-read count.

Records of other source partitions (another alias, topic or partition in the same destination
partition) are skipped. A record without a provenance header may be a copy of any s (a mirror that ran
without headers): the resume offset is never after one, so the answer stays safe. A destination with no
header at all from the start on falls back to the offset sync. Destination offsets may have gaps
(transaction markers, aborted records, compaction): only records the reader yields are looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from mirror_worker.provenance import parse_provenance

PROVENANCE = "provenance"          # the first copy of an s >= C
PROVENANCE_END = "provenance-end"  # every mirrored record is below C: resume at the end of the partition
OFFSET_SYNC = "offset-sync"        # no provenance header on the destination: the offset sync's D


class DestinationReader(Protocol):
    """The I/O edge: bounds and records of a destination partition (offset_translation.PartitionReader)."""

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(low watermark, end): end is the last stable offset, what a read_committed consumer reaches."""

    def records(self, topic: str, partition: int, start: int, end: int) -> Iterable[tuple[int, bytes | None]]:
        """(destination offset, provenance header value or None) of each readable record in [start, end),
        in offset order; offsets with no readable record (markers, aborted, compacted) are absent."""


@dataclass(frozen=True)
class SourcePartition:
    alias: str
    topic: str
    partition: int
    cluster_id: str = ""  # when known, a header naming another cluster id is another cluster's record


@dataclass(frozen=True)
class ResumePoint:
    destination_offset: int
    method: str            # PROVENANCE, PROVENANCE_END or OFFSET_SYNC
    may_reread: int        # upper bound of records from destination_offset to end_offset the group already read
    end_offset: int        # the destination partition's end the answer was computed against
    last_mirrored: int | None = None  # highest source offset of the partition found on the destination


def resume_point(source: SourcePartition, committed: int, records: Iterable[tuple[int, bytes | None]],
                 start: int, end: int, sync_offset: int | None) -> ResumePoint | None:
    """The resume point for a group committed at `committed`, given every record from `start` to `end`.

    `start` must be safe (see the module docstring); `sync_offset` is that sync's D (None: no sync).
    None when the destination holds no provenance header and there is no sync to fall back to.
    """
    if committed < 0:
        raise ValueError(f"committed offset must be >= 0, got {committed}")
    if not start <= end:
        raise ValueError(f"start {start} is after end {end}")
    resume: int | None = None
    headers_seen = False   # any provenance header, of this partition or another: the mirror writes them
    may_reread = 0         # copies of s < C and records without a header, from `resume` on
    readable = 0           # records of this partition or without a header (the offset-sync bound)
    last_mirrored: int | None = None
    for offset, header in records:
        if not start <= offset < end:
            raise ValueError(f"record at offset {offset} outside [{start}, {end})")
        origin = _origin(source, header)
        headers_seen = headers_seen or origin is not None
        if origin is _FOREIGN:
            continue
        readable += 1
        if origin is not None:
            last_mirrored = origin if last_mirrored is None else max(last_mirrored, origin)
        if resume is None and (origin is None or origin >= committed):
            resume = offset
        if resume is not None and (origin is None or origin < committed):
            may_reread += 1
    if not headers_seen:
        if sync_offset is None:
            return None
        # Without headers nothing tells re-sent copies from new records: every record from D may be re-read.
        return ResumePoint(sync_offset, OFFSET_SYNC, readable, end)
    if resume is None:
        # No copy of an s >= C (and no record without a header): whatever the mirror writes next lands at
        # `end` or later.
        return ResumePoint(end, PROVENANCE_END, 0, end, last_mirrored)
    return ResumePoint(resume, PROVENANCE, may_reread, end, last_mirrored)


class ResumeFinder:
    """Resume points of one destination topic's partitions, read through `reader` (a DestinationReader)."""

    def __init__(self, reader: DestinationReader) -> None:
        self.reader = reader

    def find(self, source: SourcePartition, destination_topic: str, committed: int,
             sync_offset: int | None) -> ResumePoint | None:
        low, end = self.reader.bounds(destination_topic, source.partition)
        # Before the sync's D there is no copy of any s >= S (S <= C); below the low watermark no record
        # can be read by anyone, so max(D, low) is as safe as D. A D past the end (a destination topic
        # re-created since) is no bound at all.
        fallback = max(sync_offset, low) if sync_offset is not None and sync_offset <= end else None
        start = low if fallback is None else fallback
        records = self.reader.records(destination_topic, source.partition, start, end)
        return resume_point(source, committed, records, start, end, fallback)


_FOREIGN = object()


def _origin(source: SourcePartition, header: bytes | None):
    """The source offset a record is a copy of, None when it has no (readable) header, _FOREIGN when it is
    a copy of another source partition."""
    parsed = parse_provenance(header) if header else None
    if parsed is None:
        return None
    alias, cluster_id, topic, partition, offset = parsed
    if (alias, topic, partition) != (source.alias, source.topic, source.partition):
        return _FOREIGN
    if source.cluster_id and cluster_id and cluster_id != source.cluster_id:
        return _FOREIGN
    return offset

"""Where a failed-over consumer resumes on the destination, from the provenance headers it holds (pure).

A group committed source offset C on a source partition (the next record it would read). With
preserve-partitions, every mirrored copy of that partition's records is in one destination partition,
and each copy carries a provenance header naming its source offset s (policy/provenance.py). The resume
offset is the destination offset of the first record of the partition that is a copy of some s >= C:

    destination  low ... s<C  s<C | s>=C  s>=C  s<C (re-sent)  s>=C ... end
                                  ^ resume here: no copy of any s >= C lies before it

Why this is safe without any assumption on how the mirror wrote the partition: every record from the
low watermark to the resume offset was read, and none is a copy of an s >= C. So every copy of every
s >= C is at or after the resume offset: nothing is missed.

What the consumer re-reads from there: exactly the copies of s < C after the resume offset. A clean
mirror run writes a partition in source order, so there are none: 0 records. After a crash the mirror
re-sends from its last commit, and copies of s < C after the first copy of an s >= C are those re-sent
records: "at most the mirror's own re-sent duplicates". The scan goes on to the end and counts them
(plus records without a header, which may be anything): `may_reread` is that count, an upper bound of
what a consumer re-reads up to `end_offset`.

Why the scan starts at the low watermark, not at an offset sync (S, D) with S <= C: D bounds what the
mirror writes after the sync, not what a crashed run wrote before it. Run 1 wrote 0..100 and died with
50 committed; run 2's sync at assignment is (50, 101); run 2 re-sent 50..60 and stopped. Resuming at
101 for C = 52 misses 61..100, which are on the destination only before 101. For the same reason a
binary search over destination offsets is not enough: source offsets are monotone in destination offset
only for a clean run, and a re-sent range can hide the only copy of an s >= C before a point where the
search sees s < C. Only reading every record before the answer proves there is no such copy. The cost
is one read of the partition (records, not offsets: a reader skips nothing it has to look at).

Only this hop's headers place a group: those naming this mirror's alias and source cluster id. Its copies
of other source partitions (another topic or partition in the same destination partition) are skipped,
and so are copies by the mirror's other source clusters (`SourcePartition.siblings`, an aggregate topic).
A record without a provenance header may be a copy of any s (a mirror that ran without headers): the
resume offset is never after one, so the answer stays safe. A header of any other hop counts as none: a
mirror without headers copies an upstream hop's header unchanged (provenance.mirrored_headers), and
applications forward headers, so such a record too may be a copy of any s. A destination partition with
no header of this hop falls back to the offset sync's D (which has the hole above: it is all there is then).
Destination offsets may have gaps (transaction markers, aborted records, compaction): only records the
reader yields are looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from mirror_worker.policy.provenance import parse_provenance

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
    cluster_id: str = ""  # when known, a header naming another cluster id is another hop's
    # (alias, cluster id) of the mirror's other source clusters: their copies are skipped, not unknown
    siblings: frozenset[tuple[str, str]] = frozenset()


def siblings(cluster_ids: dict[str, str], alias: str) -> frozenset[tuple[str, str]]:
    """SourcePartition.siblings of source `alias`, given {alias: cluster id} of every source of the mirror."""
    return frozenset((other, cluster_id) for other, cluster_id in cluster_ids.items() if other != alias)


@dataclass(frozen=True)
class ResumePoint:
    destination_offset: int
    method: str            # PROVENANCE, PROVENANCE_END or OFFSET_SYNC
    may_reread: int        # upper bound of records from destination_offset to end_offset the group already read
    end_offset: int        # the destination partition's end the answer was computed against
    last_mirrored: int | None = None  # highest source offset of the partition found on the destination


def resume_point(source: SourcePartition, committed: int, records: Iterable[tuple[int, bytes | None]],
                 low: int, end: int, sync_offset: int | None) -> ResumePoint | None:
    """The resume point for a group committed at `committed`, given every record from `low` to `end`.

    `sync_offset`: the offset-sync translation's D (None: no sync), used only when no record has a header.
    None when the destination holds no provenance header and there is no sync to fall back to.
    """
    if committed < 0:
        raise ValueError(f"committed offset must be >= 0, got {committed}")
    if not low <= end:
        raise ValueError(f"low watermark {low} is after end {end}")
    resume: int | None = None
    headers_seen = False   # a header of this hop, of this partition or another: the mirror writes them
    may_reread = 0         # copies of s < C and records without a header, from `resume` on
    from_sync = 0          # records of this partition or without a header from D on (offset-sync bound)
    last_mirrored: int | None = None
    for offset, header in records:
        if not low <= offset < end:
            raise ValueError(f"record at offset {offset} outside [{low}, {end})")
        origin = record_origin(source, header)
        if origin is SIBLING:
            continue
        headers_seen = headers_seen or origin is not None
        if origin is FOREIGN:
            continue
        if sync_offset is not None and offset >= sync_offset:
            from_sync += 1
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
        return ResumePoint(sync_offset, OFFSET_SYNC, from_sync, end)
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
        # Below the low watermark no record can be read by anyone, so max(D, low) is as good as D. A D past
        # the end (a destination topic re-created since) is no offset at all.
        fallback = max(sync_offset, low) if sync_offset is not None and sync_offset <= end else None
        records = self.reader.records(destination_topic, source.partition, low, end)
        return resume_point(source, committed, records, low, end, fallback)


FOREIGN = object()  # this hop's copy of another source partition
SIBLING = object()  # a copy by another source cluster of the same mirror


def record_origin(source: SourcePartition, header: bytes | None):
    """The source offset a record is a copy of; None when it may be a copy of anything (no readable header,
    or another hop's header); FOREIGN for this hop's copy of another partition, SIBLING for a copy from
    another source cluster of the mirror."""
    parsed = parse_provenance(header) if header else None
    if parsed is None:
        return None
    alias, cluster_id, topic, partition, offset = parsed
    if alias != source.alias or (source.cluster_id and cluster_id and cluster_id != source.cluster_id):
        return SIBLING if (alias, cluster_id) in source.siblings else None
    if (topic, partition) != (source.topic, source.partition):
        return FOREIGN
    return offset

"""resume_search's answer, kept incrementally: a compact index per destination partition (pure, plus a reader).

`resume_search.resume_point` reads a destination partition from its low watermark on every call: right
for a one-shot failover, too much for a group offset sync every few seconds. This module gives the same
answer from an index fed only with the records appended since the last read.

The answer, restated: with M(o) the largest source offset copied at or before destination offset o (a
record without a header counts as +infinity, records of other source partitions do not count), a group
committed at C resumes at the first record where M(o) >= C. M only grows, and it reaches C at a record
where it grows (a "step": a copy of a source offset above every earlier one, or the first record without
a header). So only the steps matter for the answer, and they come in runs:

    destination  d   d+1   d+2  ...  d+n-1      one run (d, s, n): source s, s+1, ..., s+n-1,
    source       s   s+1   s+2  ...  s+n-1      each above every copy before it

A clean mirror run is one run whatever its length; a crash's re-sent copies (not steps: their source
offsets were seen) end one run and the first new copy starts the next; a destination gap (transaction
marker) starts a new run too. resume(C) = the first step run whose last source offset is >= C, at C's
place in it (or its first record when the run starts above C); no such run: the end of the partition.

The records that are not steps (re-sent copies, records without a header once M is infinite) are kept as
runs as well, for two reasons: the count of records a consumer may re-read (copies of s < C and records
without a header from the answer on, exactly as resume_point counts them), and retention: when the low
watermark moves, the records below it are gone for any reader, M must be computed again without them,
and every kept run is what it is computed from (`trim`). Records of other source partitions are not kept;
only the offset of the last header of this hop seen (of any partition) is, since a partition with no such
header left falls back to the offset sync exactly as resume_point does. Another hop's header counts as no
header, as in resume_point.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

from mirror_worker.dr.resume_search import (
    FOREIGN, OFFSET_SYNC, PROVENANCE, PROVENANCE_END, SIBLING, DestinationReader, ResumePoint, SourcePartition,
    record_origin,
)

INFINITE = float("inf")


class Run(NamedTuple):
    destination: int   # first destination offset; the run's records are at consecutive offsets
    source: int | None  # first source offset, the next ones consecutive; None: records without a header
    length: int

    @property
    def top(self) -> float:
        """The largest source offset of the run (+infinity for records without a header)."""
        return INFINITE if self.source is None else self.source + self.length - 1

    def from_offset(self, offset: int) -> "Run | None":
        """The part of the run at or after destination `offset` (None when nothing is)."""
        skip = max(0, offset - self.destination)
        if skip >= self.length:
            return None
        return Run(self.destination + skip, None if self.source is None else self.source + skip, self.length - skip)

    def below(self, committed: int) -> int:
        """Records of the run a group committed at `committed` already read (or may have: no header)."""
        if self.source is None:
            return self.length
        return max(0, min(self.length, committed - self.source))


@dataclass
class PartitionIndex:
    """The index of one source partition's copies in one destination partition (see the module doc)."""

    low: int = 0                     # the low watermark the index was computed from
    end: int = 0                     # every record below it was added: the next read starts here
    last_header: int | None = None   # destination offset of the last record with this hop's header, any partition

    def __post_init__(self) -> None:
        self.steps: list[Run] = []   # runs where M grows, in destination order
        self.tops: list[float] = []  # each step run's top, strictly increasing (for bisect)
        self.others: list[Run] = []  # every other record of the partition or without a header, in order
        self.last_mirrored: int | None = None

    def add(self, source: SourcePartition, offset: int, header: bytes | None) -> None:
        """One record at `offset` (offsets only increase; gaps allowed)."""
        if offset < self.end:
            raise ValueError(f"record at offset {offset} is before the indexed end {self.end}")
        self.end = offset + 1
        origin = record_origin(source, header)
        if origin is SIBLING:
            return
        if origin is not None:
            self.last_header = offset
        if origin is FOREIGN:
            return
        self._add_run(Run(offset, origin, 1))

    def advance(self, end: int) -> None:
        """Every record below `end` was added (the last ones may be gaps: markers, aborted records)."""
        self.end = max(self.end, end)

    def trim(self, low: int) -> None:
        """The low watermark moved to `low`: forget the records below it, and compute M again without them."""
        if low <= self.low:
            return
        runs = sorted((part for run in self.steps + self.others if (part := run.from_offset(low)) is not None),
                      key=lambda run: run.destination)
        self.steps, self.tops, self.others, self.last_mirrored = [], [], [], None
        for run in runs:
            self._add_run(run)
        self.low = low
        self.end = max(self.end, low)

    def _add_run(self, run: Run) -> None:
        top = self.tops[-1] if self.tops else -1
        if run.source is None:
            if top == INFINITE:
                _append(self.others, run)
                return
            self._add_step(Run(run.destination, None, 1))
            if run.length > 1:
                _append(self.others, Run(run.destination + 1, None, run.length - 1))
            return
        self.last_mirrored = max(run.top, self.last_mirrored if self.last_mirrored is not None else -1)
        # The leading records at or below M are re-sent copies; the rest each raise M by one.
        seen = int(min(run.length, max(0, top - run.source + 1)))
        if seen:
            _append(self.others, Run(run.destination, run.source, seen))
        if seen < run.length:
            self._add_step(Run(run.destination + seen, run.source + seen, run.length - seen))

    def _add_step(self, run: Run) -> None:
        if _append(self.steps, run):
            self.tops[-1] = self.steps[-1].top
        else:
            self.tops.append(run.top)

    def resume(self, committed: int, sync_offset: int | None) -> ResumePoint | None:
        """resume_search.resume_point's answer for every record in [low, end) (same fallback, same counts)."""
        if committed < 0:
            raise ValueError(f"committed offset must be >= 0, got {committed}")
        if self.last_header is None or self.last_header < self.low:
            if sync_offset is None:
                return None
            return ResumePoint(sync_offset, OFFSET_SYNC, self._count_from(sync_offset), self.end)
        index = bisect_left(self.tops, committed)
        if index == len(self.steps):
            return ResumePoint(self.end, PROVENANCE_END, 0, self.end, self.last_mirrored)
        run = self.steps[index]
        resume = run.destination if run.source is None else run.destination + max(0, committed - run.source)
        may_reread = sum(part.below(committed) for run in self.steps[index:] + self.others
                         if (part := run.from_offset(resume)) is not None)
        return ResumePoint(resume, PROVENANCE, may_reread, self.end, self.last_mirrored)

    def _count_from(self, offset: int) -> int:
        return sum(part.length for run in self.steps + self.others if (part := run.from_offset(offset)) is not None)

    @property
    def runs(self) -> int:
        """How many runs the index holds (its size)."""
        return len(self.steps) + len(self.others)


def _append(runs: list[Run], run: Run) -> bool:
    """Append `run`, merged into the last one when it continues it; True when merged."""
    if runs:
        last = runs[-1]
        follows_source = (last.source is None and run.source is None) or (
            last.source is not None and run.source is not None and run.source == last.source + last.length)
        if run.destination == last.destination + last.length and follows_source:
            runs[-1] = Run(last.destination, last.source, last.length + run.length)
            return True
    runs.append(run)
    return False


class IncrementalFinder:
    """resume_search.ResumeFinder's `find`, from an index per (source partition, destination partition)
    that reads only what was appended since its last call. Hold one across a scheduled sync's intervals.

    A destination partition whose end went back (the topic was deleted and re-created) is indexed again
    from its low watermark.
    """

    def __init__(self, reader: DestinationReader) -> None:
        self.reader = reader
        self.indexes: dict[tuple[SourcePartition, str], PartitionIndex] = {}

    def find(self, source: SourcePartition, destination_topic: str, committed: int,
             sync_offset: int | None) -> ResumePoint | None:
        index = self.update(source, destination_topic)
        # As ResumeFinder: a D below the low watermark is the low watermark, one past the end is no offset.
        fallback = max(sync_offset, index.low) if sync_offset is not None and sync_offset <= index.end else None
        return index.resume(committed, fallback)

    def update(self, source: SourcePartition, destination_topic: str) -> PartitionIndex:
        low, end = self.reader.bounds(destination_topic, source.partition)
        key = (source, destination_topic)
        index = self.indexes.get(key)
        if index is None or end < index.end or low < index.low:
            index = self.indexes[key] = PartitionIndex(low, low)
        index.trim(low)
        for offset, header in self.reader.records(destination_topic, source.partition, index.end, end):
            index.add(source, offset, header)
        index.advance(end)
        return index

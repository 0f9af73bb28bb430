"""The consistency check's window: parsed from its flags, then turned into offset ranges per source partition."""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from spark_jobs.common.job_config import JobInputError, epoch_ms

log = logging.getLogger("spark_jobs.consistency_check")

Ranges = dict[tuple[str, int], tuple[int, int]]          # (topic, partition) -> [from, to)


@dataclass(frozen=True)
class CheckWindow:
    kind: str                       # "all" | "timestamps" | "offsets"
    from_ms: int | None = None
    to_ms: int | None = None
    offsets: tuple[tuple[str, int, int, int], ...] = ()   # (topic, partition, from, to)

    def describe(self) -> dict:
        out: dict = {"kind": self.kind}
        if self.kind == "timestamps":
            out["from_timestamp"] = self.from_ms
            out["to_timestamp"] = self.to_ms
        return out


def format_ms(ms: int) -> str:
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return str(ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_timestamp(text: str, flag: str) -> int:
    """Epoch milliseconds, or ISO-8601 (UTC unless it carries a zone), as epoch milliseconds."""
    try:
        ms = epoch_ms(text)
    except ValueError:
        raise JobInputError(f"{flag}: {text.strip()!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if ms < 0:  # negative times mean "latest"/"earliest" to offsetsForTimes
        raise JobInputError(f"{flag}: {text.strip()!r} is before 1970-01-01T00:00:00Z")
    return ms


_OFFSET_RANGE = re.compile(r"^([^:,\s]+):(\d+):(\d+)-(\d+)$")


def parse_offsets(text: str) -> tuple[tuple[str, int, int, int], ...]:
    """`topic:partition:from-to,...` (from included, to excluded) into (topic, partition, from, to) tuples."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise JobInputError("--offsets: no range given (topic:partition:from-to,...)")
    out, seen = [], set()
    for entry in entries:
        match = _OFFSET_RANGE.match(entry)
        if not match:
            raise JobInputError(f"--offsets: {entry!r} is not topic:partition:from-to")
        topic, partition, start, end = match[1], int(match[2]), int(match[3]), int(match[4])
        if start >= end:
            raise JobInputError(f"bad window: --offsets {entry!r}: from {start} is not below to {end}")
        if (topic, partition) in seen:
            raise JobInputError(f"--offsets: {topic}:{partition} is given twice")
        seen.add((topic, partition))
        out.append((topic, partition, start, end))
    return tuple(out)


def window_from_args(args: argparse.Namespace) -> CheckWindow:
    timed = args.from_timestamp is not None or args.to_timestamp is not None
    if args.offsets is not None:
        if timed:
            raise JobInputError("--offsets cannot be combined with --from-timestamp/--to-timestamp")
        return CheckWindow("offsets", offsets=parse_offsets(args.offsets))
    if not timed:
        return CheckWindow("all")
    start = parse_timestamp(args.from_timestamp, "--from-timestamp") if args.from_timestamp is not None else None
    end = parse_timestamp(args.to_timestamp, "--to-timestamp") if args.to_timestamp is not None else None
    if start is not None and end is not None and start >= end:
        raise JobInputError(f"bad window: --from-timestamp {format_ms(start)} is not before "
                            f"--to-timestamp {format_ms(end)}")
    return CheckWindow("timestamps", from_ms=start, to_ms=end)


def source_ranges(window: CheckWindow, topics: list[str], watermarks: dict[str, dict[int, tuple[int, int]]],
                  time_offsets: dict[tuple[str, int], tuple[int | None, int | None]] | None = None) -> Ranges:
    """The window as offset ranges per source partition, clamped to [low, end) (`watermarks`: the end a
    reader reaches, the LSO for read_committed).

    time_offsets: for a timestamp window, (offset for --from, offset for --to) per partition, None
    where that bound was not given.
    """
    ranges: Ranges = {}
    if window.kind == "offsets":
        for topic, partition, start, end in window.offsets:
            if topic not in topics:
                raise JobInputError(f"--offsets: topic {topic!r} is not among the checked topics")
            if partition not in watermarks[topic]:
                raise JobInputError(f"--offsets: topic {topic!r} has {len(watermarks[topic])} partitions "
                                    f"on the source cluster; {partition} is not one")
            low, high = watermarks[topic][partition]
            clamped = (min(max(start, low), high), max(min(end, high), low))
            if clamped != (start, end):
                log.warning("offset range clamped to the watermarks", extra={
                    "topic": topic, "partition": partition, "requested": [start, end], "range": list(clamped)})
            ranges[(topic, partition)] = clamped
        return ranges
    for topic in topics:
        for partition, (low, high) in sorted(watermarks[topic].items()):
            start, end = low, high
            if window.kind == "timestamps":
                by_time = (time_offsets or {}).get((topic, partition), (None, None))
                start = low if by_time[0] is None else max(by_time[0], low)
                end = high if by_time[1] is None else min(by_time[1], high)
            ranges[(topic, partition)] = (start, max(start, end))
    return ranges

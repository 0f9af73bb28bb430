"""Where a consumer group moving back after a failback resumes on the old source (pure, given two readers).

A reverse mirror R (reverse-of F) copies the promoted cluster's topic back to the old source. A group
that consumed the promoted topic committed C there (the next record it would read) and now moves back.
Each record of the promoted partition has exactly one place on the old source partition:

    promoted (R's source)    w:  F copy of s | F copy of s | new record | new record | F copy of s ...
    old source (R's dest.)   e:  the original at e = s     |  R's copy (its header names w)

so the group must resume at the smallest place of any promoted record at w >= C: the smallest s named by
an F copy at or after C, or the first R copy of a w >= C, or the end of the old source partition (records
R has not copied yet land there). Nothing at or after C is then before the answer, so nothing is missed.

`resume_search` alone cannot see this: records before R's first copy on the old source are originals
without a header, and there a record without a header may be a copy of anything, so it answers offset 0.

What the group may re-read from the answer E: originals s >= E that it already read as F copies before C,
and R copies of w < C at or after E (R re-sent them after a crash). Both are counted (`may_reread`, an upper
bound: a source re-sent by F counts once per copy). The F copies before C are kept as runs of consecutive
offsets, not one by one: a clean run is a single run, whatever the partition's size.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirror_worker.dr.resume_search import FOREIGN, OFFSET_SYNC, SIBLING, ResumePoint, SourcePartition, record_origin
from mirror_worker.policy.provenance import parse_provenance

FAILBACK = "failback"  # placed with the forward mirror's and the reverse mirror's provenance headers


class OffsetRuns:
    """A multiset of offsets as runs [start, end) of consecutive ones, in the order they were added."""

    def __init__(self) -> None:
        self.runs: list[list[int]] = []

    def add(self, offset: int) -> None:
        if self.runs and self.runs[-1][1] == offset:
            self.runs[-1][1] += 1
        else:
            self.runs.append([offset, offset + 1])

    def count_at_or_after(self, offset: int) -> int:
        return sum(max(0, end - max(start, offset)) for start, end in self.runs)


def failback_resume_point(committed: int, promoted: Iterable[tuple[int, bytes | None]],
                          home: Iterable[tuple[int, bytes | None]], home_end: int, home_cluster_id: str,
                          home_topic: str, reverse_source: SourcePartition,
                          sync_offset: int | None) -> ResumePoint | None:
    """The old-source offset for a group committed at `committed` on the promoted partition.

    `promoted`: (w, header) of every record of the promoted partition; `home`: (e, header) of every record of
    the old-source partition `home_topic`[reverse_source.partition] up to `home_end`. F copies are told by a
    header naming `home_cluster_id`, `home_topic` and that partition; R copies by `reverse_source`. None (no
    header on either side and no sync) as resume_point.
    """
    if committed < 0:
        raise ValueError(f"committed offset must be >= 0, got {committed}")
    read_before = OffsetRuns()   # originals the group read as F copies before C
    first_after: int | None = None
    headers_seen = False
    for w, header in promoted:
        parsed = parse_provenance(header) if header else None
        if parsed is None or parsed[1] != home_cluster_id or parsed[2:4] != (home_topic, reverse_source.partition):
            continue
        headers_seen = True
        if w < committed:
            read_before.add(parsed[4])
        elif first_after is None or parsed[4] < first_after:
            first_after = parsed[4]
    bound = home_end if first_after is None else min(first_after, home_end)
    first_copy: int | None = None  # the first R copy of a w >= C
    copies_reread = 0
    last_mirrored: int | None = None
    for e, header in home:
        origin = record_origin(reverse_source, header)
        if origin is None or origin is FOREIGN or origin is SIBLING:
            continue
        headers_seen = True
        last_mirrored = origin if last_mirrored is None else max(last_mirrored, origin)
        if origin >= committed:
            if first_copy is None:
                first_copy = e
        elif first_copy is not None or e >= bound:
            copies_reread += 1  # at or after the answer, whichever of the two it turns out to be
    if not headers_seen:
        return None if sync_offset is None else ResumePoint(sync_offset, OFFSET_SYNC, max(0, home_end - sync_offset),
                                                            home_end)
    resume = bound if first_copy is None else min(bound, first_copy)
    return ResumePoint(resume, FAILBACK, copies_reread + read_before.count_at_or_after(resume), home_end,
                       last_mirrored)

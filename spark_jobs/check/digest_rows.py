"""The digest pass's comparison, on the driver, over the rows per window of both sides (however they were
read: spark_jobs/check/digests.py with Spark's Kafka source, spark_jobs/check/rdkafka.py with librdkafka).

The rows are aggregates per (source topic, partition, window) and destination partition, never per
record: their number grows with the offsets checked divided by the window (5 million offsets in windows
of 50,000: about a hundred per side), so the comparison needs no Spark job of its own.

Source rows: (t, p, w, s_n, s_lo, s_hi, beyond). Destination rows: (t, p, w, dp, n, lo, hi, first_do,
last_do, first_src, last_src, least_shift, greatest_shift), w = POSITIONAL for records without usable
provenance (p: their destination partition), w < 0 otherwise ignored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

POSITIONAL = -1                       # the window of destination records without usable provenance
MAX_LISTED_WINDOWS = 50               # differing windows named per partition in the report


@dataclass
class PartitionDigest:
    """One source partition after the digest pass."""
    source_count: int = 0
    beyond_committed: int = 0
    windows: int = 0
    differing: int = 0
    differing_windows: list[int] = field(default_factory=list)     # the first MAX_LISTED_WINDOWS
    first_differing: int | None = None
    last_differing: int | None = None
    in_order: bool = True
    positional: int = 0                                            # destination records without provenance


def partition_digests(source_rows: Iterable[tuple], destination_rows: list[tuple], topics: list[str],
                      ranges: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionDigest]:
    """Per source partition: windows, differing windows (count, digests or presence differ on the two
    sides), the source count, records beyond the committed offset, destination records without usable
    provenance; `in_order` None where the offset shift does not prove the order (see `order_by_shift`)."""
    out = {tp: PartitionDigest() for tp in ranges}
    sides: dict[tuple[int, int, int], list] = {}
    for t, p, w, n, lo, hi, beyond in source_rows:
        sides[(t, p, w)] = [(n, lo, hi), None, beyond]
    copies: dict[tuple[int, int, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for t, p, w, _dp, n, lo, hi, *_ in destination_rows:
        if w == POSITIONAL:
            out.setdefault((topics[t], p), PartitionDigest()).positional += n
        elif w >= 0:
            acc = copies[(t, p, w)]
            acc[0], acc[1], acc[2] = acc[0] + n, acc[1] + lo, acc[2] + hi
    for key, acc in copies.items():
        sides.setdefault(key, [None, None, 0])[1] = tuple(acc)
    differing: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (t, p, w), (source, copy, beyond) in sides.items():
        digest = out.setdefault((topics[t], p), PartitionDigest())
        digest.windows += 1
        digest.source_count += source[0] if source else 0
        digest.beyond_committed += beyond
        if source != copy:
            differing[(t, p)].append(w)
    for (t, p), windows in differing.items():
        digest = out[(topics[t], p)]
        windows.sort()
        digest.differing, digest.differing_windows = len(windows), windows[:MAX_LISTED_WINDOWS]
        digest.first_differing, digest.last_differing = windows[0], windows[-1]
    for (t, p), in_order in order_by_shift(destination_rows).items():
        if (topics[t], p) in out and in_order is None:
            out[(topics[t], p)].in_order = None
    return out


def order_by_shift(destination_rows: Iterable[tuple]) -> dict[tuple[int, int], bool | None]:
    """(t, p) -> True when, in each destination partition, every copy sits at source offset = destination
    offset + one constant (so source offsets rise with destination offsets there) and destination
    partitions taken in order hold rising source offsets: no first copy follows a copy of a higher
    source offset. None (unknown: the order segments decide) otherwise."""
    per_dp: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(dict)
    for t, p, w, dp, _n, _lo, _hi, _fd, _ld, first_src, last_src, least, greatest in destination_rows:
        if w < 0:
            continue
        acc = per_dp[(t, p)].get(dp)
        per_dp[(t, p)][dp] = ([least, greatest, first_src, last_src] if acc is None else
                              [min(acc[0], least), max(acc[1], greatest), min(acc[2], first_src), max(acc[3], last_src)])
    out = {}
    for tp, by_dp in per_dp.items():
        ok, previous_last = True, None
        for dp in sorted(by_dp):
            least, greatest, first_src, last_src = by_dp[dp]
            ok = ok and least == greatest and (previous_last is None or previous_last < first_src)
            previous_last = last_src
        out[tp] = True if ok else None
    return out


def destination_spans(destination_rows: Iterable[tuple], topics: list[str],
                      spans: dict[tuple[str, int], tuple[int, int]], window: int) -> dict[tuple[str, int], tuple[int, int]]:
    """(source topic, destination partition) -> [first, last + 1) destination offsets holding every
    provenance-mapped copy of the source offsets in `spans` ((topic, partition) -> [from, to))."""
    index = {t: i for i, t in enumerate(topics)}
    wanted = {(index[t], p): (start // window, (end - 1) // window) for (t, p), (start, end) in spans.items()}
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for t, p, w, dp, _n, _lo, _hi, first_do, last_do, *_ in destination_rows:
        bounds = wanted.get((t, p))
        if w < 0 or bounds is None or not bounds[0] <= w <= bounds[1]:
            continue
        seen = out.get((t, dp))
        out[(t, dp)] = (first_do, last_do) if seen is None else (min(seen[0], first_do), max(seen[1], last_do))
    return {(topics[t], dp): (first, last + 1) for (t, dp), (first, last) in out.items()}

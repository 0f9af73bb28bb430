"""The digest pass's reading with librdkafka, a task's side: read one partition's offset range and reduce its
records to aggregates per window (Spark's side: spark_jobs/check/rdkafka_spark.py).

Why: Spark's Kafka source turns every record into a JVM row and the digests into JVM expressions; a task
that hashes the records as librdkafka hands them over reads both sides several times faster.

The rows have the shapes of `digests.source_windows` (SOURCE_WINDOWS) and
`digests.destination_windows` (DESTINATION_WINDOWS), so the comparison, the order proof and the
exact path that follow are those of the Spark Kafka source's digest pass.

Record hash. Python's `hash` of (source offset, normalised key, normalised value, headers in order without
the provenance header), the same normalisation as the exact path: a key or value of 5 bytes or more that
starts with magic byte 0 is hashed without its schema id (bytes 1..4) and tagged apart from plain bytes;
no headers and an empty header list are the same; a header's null value differs from an empty one. The
hash is seeded by PYTHONHASHSEED, which PySpark gives every Python worker of a job alike (its driver's
value, or 0): each task returns `seed_probe()` and the driver refuses rows of tasks that disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from mirror_worker.batch_api import HEADER_SIZE, PROVENANCE_HEADER, UnreadableHeaders, read_headers, take_available
from spark_jobs.check.digest_rows import POSITIONAL

FRAMED = 0                         # the tag of a schema-registry framed key or value (its body follows)
FRAMING_SIZE = HEADER_SIZE        # magic byte + 4-byte schema id
MAX_PARTITION = 2**31 - 1          # Spark's try_cast to INT / BIGINT: larger numbers do not parse
MAX_OFFSET = 2**63 - 1
# A record whose headers librdkafka's Python client cannot read (a header name that is not UTF-8:
# mirror_worker/clients/headers.py): hashed with this in their place, which no readable header list equals
# (those hold (name, value) pairs), so the record never matches a copy and its window differs; a destination
# record of that kind has no readable provenance and is placed as one without (POSITIONAL). The exact path
# compares that window with Spark's Kafka source, whose Java client decodes such a name with replacement
# characters instead of failing.
UNREADABLE_HEADERS = (-1,)

# s_lo / lo: the exact sum of the window's record hashes (`record_hash`, a Python int of any size) and
# s_hi / hi: 0 here; Spark's reader sums the two 32-bit halves of xxhash64 instead. Rows of one reader are
# only ever compared with rows of the same reader.
SOURCE_WINDOWS = ("t", "p", "w", "s_n", "s_lo", "s_hi", "beyond")
DESTINATION_WINDOWS = ("t", "p", "w", "dp", "n", "lo", "hi", "first_do", "last_do", "first_src", "last_src",
                       "least_shift", "greatest_shift")


class ReadFailed(Exception):
    """A task could not read its range completely: the Spark task fails (and is retried)."""


def seed_probe() -> int:
    """Equal in two processes exactly when their `hash` of bytes and str agree (same PYTHONHASHSEED)."""
    return hash((b"mirror-check", "mirror-check"))


# ------------------------------------------------------------------ normalisation and hashing (pure)


def normalised(data: bytes | None):
    """A key or value as the exact path compares it: framed bytes without their schema id, tagged apart."""
    if data and data[0] == 0 and len(data) >= FRAMING_SIZE:
        return (FRAMED, data[FRAMING_SIZE:])
    return data


def split_headers(headers: list | None) -> tuple[tuple, bytes | None]:
    """(headers in order without any provenance header, the value of the last provenance header or None).

    The worker adds the provenance header last: that case costs one slice."""
    if not headers:
        return (), None
    provenance = None
    last = headers[-1]
    if last[0] == PROVENANCE_HEADER:
        provenance, headers = last[1], headers[:-1]
    for name, value in headers:
        if name == PROVENANCE_HEADER:
            if provenance is None:           # the last one is the record's provenance
                provenance = [v for n, v in headers if n == PROVENANCE_HEADER][-1]
            return tuple(h for h in headers if h[0] != PROVENANCE_HEADER), provenance
    return tuple(headers), provenance


def record_hash(source_offset: int, key, value, headers: tuple) -> int:
    """The record's hash (signed 64 bits), `key` and `value` already `normalised`, `headers` split. A window's
    digest is the exact sum of its records' hashes (a Python int: no overflow), equal for equal multisets
    of records, and for unequal ones with a chance of about 2^-64. The hot loops below inline it."""
    return hash((source_offset, key, value, headers))


@dataclass(frozen=True)
class ProvenanceRule:
    """Which provenance headers the exact path uses (records.with_provenance): five ':'-separated
    fields naming the source topic this destination topic mirrors, the source cluster (or no cluster) and
    a partition and offset in decimal. Anything else maps to no source record here (the record is
    positional; its partition then goes to the exact path whole, which decides with its own rule)."""

    source_topic: str
    source_cluster_id: str | None

    def prefix_partition(self, prefix: bytes) -> int | None:
        """`alias:cluster:topic:partition` -> partition, or None when it is not usable."""
        parts = prefix.split(b":")
        if len(parts) != 4 or parts[2] != self.source_topic.encode():
            return None
        if self.source_cluster_id is not None and parts[1] not in (b"", self.source_cluster_id.encode()):
            return None
        if not parts[3].isdigit() or int(parts[3]) > MAX_PARTITION:
            return None
        return int(parts[3])


# ------------------------------------------------------------------ reading a range


def read_range(consumer, topic: str, partition: int, start: int, end: int, batch: int = 10_000,
               stall_timeout_s: float = 120.0, clock: Callable[[], float] = time.monotonic) -> Iterator[list]:
    """Batches of the records of [start, end) in offset order, as the consumer delivers them (read_committed:
    aborted records and transaction markers have offsets but are never delivered). Done at a record at or
    past `end`, or at the partition's end (EOF) at or past it; a consumer error fails the read."""
    from confluent_kafka import KafkaError, TopicPartition

    eof = KafkaError._PARTITION_EOF
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    stalled_at = clock() + stall_timeout_s
    while position < end:
        messages = take_available(consumer, batch, 1.0)
        if not messages:
            if clock() >= stalled_at:
                raise ReadFailed(f"{topic}[{partition}]: nothing read for {stall_timeout_s:.0f}s at offset "
                                 f"{position}, range end {end}")
            continue
        stalled_at = clock() + stall_timeout_s
        records = [m for m in messages if m.error() is None]
        if len(records) != len(messages):
            for m in messages:
                err = m.error()
                if err is None:
                    continue
                if err.code() != eof:
                    raise ReadFailed(f"{topic}[{partition}] consume error at offset {position}: {err.str()}")
                position = max(position, m.offset())   # the partition's end: nothing below it is left
        if records:
            if records[-1].offset() >= end:
                records = [m for m in records if m.offset() < end]
                position = end
            else:
                position = max(position, records[-1].offset() + 1)
            if records:
                yield records


# ------------------------------------------------------------------ aggregates per window (pure)


def source_window_rows(batches: Iterable[list], t: int, p: int, window: int, committed: int | None) -> list[tuple]:
    """SOURCE_WINDOWS rows of one source partition's records (in offset order)."""
    limit = MAX_OFFSET if committed is None else committed
    rows: dict[int, list[int]] = {}
    w, n, total, beyond = None, 0, 0, 0
    w_end = -1
    for records in batches:
        for m in records:
            o = m.offset()
            if o >= w_end:
                if n:
                    _merge_source(rows, w, n, total, beyond)
                w, n, total, beyond = o // window, 0, 0, 0
                w_end = (w + 1) * window
            key, value = m.key(), m.value()
            # `normalised` and `split_headers`, inlined (the hot loop)
            if key and key[0] == 0 and len(key) >= FRAMING_SIZE:
                key = (FRAMED, key[FRAMING_SIZE:])
            if value and value[0] == 0 and len(value) >= FRAMING_SIZE:
                value = (FRAMED, value[FRAMING_SIZE:])
            try:
                headers = read_headers(m)
            except UnreadableHeaders:
                headers = UNREADABLE_HEADERS
            else:
                if headers:
                    headers = ((headers[0],) if len(headers) == 1 and headers[0][0] != PROVENANCE_HEADER
                               else split_headers(headers)[0])
                else:
                    headers = ()
            n += 1
            total += hash((o, key, value, headers))             # `record_hash`
            if o >= limit:
                beyond += 1
    if n:
        _merge_source(rows, w, n, total, beyond)
    return [(t, p, w, *acc) for w, acc in sorted(rows.items())]


def _merge_source(rows: dict, w: int, n: int, total: int, beyond: int) -> None:
    acc = rows.get(w)
    rows[w] = [n, total, 0, beyond] if acc is None else [acc[0] + n, acc[1] + total, 0, acc[3] + beyond]


@dataclass(frozen=True)
class DestinationScope:
    """What one destination partition's records are placed by: the source topic it mirrors (its index
    `t` among the checked topics), the provenance rule, and the checked source ranges of that topic
    (partition -> [from, to))."""

    t: int
    rule: ProvenanceRule
    ranges: dict[int, tuple[int, int]]
    window: int


def destination_window_rows(batches: Iterable[list], dp: int, scope: DestinationScope) -> list[tuple]:
    """DESTINATION_WINDOWS rows of one destination partition's records (in offset order): per source
    (partition, window) of the copies, n, the digest halves, first/last destination and source offsets and
    the least/greatest (source offset - destination offset); w = POSITIONAL (p = dp) for records without
    usable provenance. Copies of source offsets outside the checked ranges are left out.

    Consecutive copies of one source (partition, window) form a run summed in local variables (the usual
    case: a mirror copies a partition in order), merged into the groups when the run ends."""
    window, ranges, rule = scope.window, scope.ranges, scope.rule
    groups: dict[tuple[int, int], list[int]] = {}
    run_p = run_w = None
    n = total = first_do = last_do = least_src = most_src = least_shift = most_shift = 0
    seen_prefix, seen_partition, span = None, None, None
    for records in batches:
        for m in records:
            o = m.offset()
            try:
                headers = read_headers(m)
            except UnreadableHeaders:
                headers = None  # no readable provenance: placed as a record without one (UNREADABLE_HEADERS)
            provenance = None
            if headers:                          # `split_headers`, with the worker's usual lists inlined
                last = headers[-1]
                if last[0] != PROVENANCE_HEADER or len(headers) > 2:
                    headers, provenance = split_headers(headers)
                elif len(headers) == 1:
                    provenance, headers = last[1], ()
                elif headers[0][0] != PROVENANCE_HEADER:
                    provenance, headers = last[1], (headers[0],)
                else:
                    headers, provenance = split_headers(headers)
            src = None
            if provenance is not None:
                prefix, _, tail = provenance.rpartition(b":")
                if prefix != seen_prefix:
                    seen_prefix, seen_partition = prefix, rule.prefix_partition(prefix)
                    span = ranges.get(seen_partition)
                if seen_partition is not None and tail.isdigit():
                    src = int(tail)
                    if src > MAX_OFFSET:
                        src = None
            if src is None:
                p, w, src, x = dp, POSITIONAL, -1, 0      # no digest: the exact path compares these
            else:
                if span is None or not span[0] <= src < span[1]:
                    continue                     # a copy of a record outside the checked range: ignored
                p, w = seen_partition, src // window
                key, value = m.key(), m.value()
                if key and key[0] == 0 and len(key) >= FRAMING_SIZE:
                    key = (FRAMED, key[FRAMING_SIZE:])
                if value and value[0] == 0 and len(value) >= FRAMING_SIZE:
                    value = (FRAMED, value[FRAMING_SIZE:])
                x = hash((src, key, value, headers))     # `record_hash`
            shift = src - o
            if w != run_w or p != run_p:
                if run_p is not None:
                    _merge_destination(groups, (run_p, run_w), [n, total, 0, first_do, last_do, least_src, most_src,
                                                                least_shift, most_shift])
                run_p, run_w = p, w
                n = total = 0
                first_do, least_src, most_src, least_shift, most_shift = o, src, src, shift, shift
            n += 1
            total += x
            last_do = o
            if src > most_src:
                most_src = src
            elif src < least_src:
                least_src = src
            if shift != least_shift or shift != most_shift:
                least_shift, most_shift = min(least_shift, shift), max(most_shift, shift)
    if run_p is not None:
        _merge_destination(groups, (run_p, run_w), [n, total, 0, first_do, last_do, least_src, most_src,
                                                    least_shift, most_shift])
    return [(scope.t, p, w, dp, *acc) for (p, w), acc in sorted(groups.items())]


def _merge_destination(groups: dict, key: tuple, part: list) -> None:
    """Adds `part` (n, lo, hi, first_do, last_do, first_src, last_src, least_shift, greatest_shift) to `key`'s."""
    acc = groups.get(key)
    if acc is None:
        groups[key] = part
        return
    groups[key] = [acc[0] + part[0], acc[1] + part[1], acc[2] + part[2], min(acc[3], part[3]), max(acc[4], part[4]),
                   min(acc[5], part[5]), max(acc[6], part[6]), min(acc[7], part[7]), max(acc[8], part[8])]

"""Resume points from provenance headers (resume_search.py), over in-memory destination partitions."""

from __future__ import annotations

import random

import pytest

from mirror_worker.dr.resume_search import (
    OFFSET_SYNC, PROVENANCE, PROVENANCE_END, ResumeFinder, ResumePoint, SourcePartition, resume_point,
)
from mirror_worker.policy.provenance import parse_provenance, provenance_value
from tests.unit.fakes import FakeDestinationPartitions

SOURCE = SourcePartition("east", "t", 0, "cid", frozenset({("west", "cid-west")}))  # west: the mirror's other source
UPSTREAM = {"alias": "up", "cluster": "cluster-up"}  # another hop's header: an upstream mirror's, or forwarded
TOPIC = "x.t"


def _header(s: int, alias: str = "east", topic: str = "t", partition: int = 0, cluster: str = "cid") -> bytes:
    return provenance_value(alias, cluster, topic, partition, s)


def _destination(source_offsets, first: int = 0, gap_every: int = 0) -> list[tuple[int, bytes | None]]:
    """Copies of `source_offsets` in that order from destination offset `first`; an int is a copy, None a
    record without a header, a bytes value that header. `gap_every` n: every n-th offset holds no record
    (a transaction marker), as in an exactly-once destination."""
    out, offset = [], first
    for s in source_offsets:
        if gap_every and offset % gap_every == gap_every - 1:
            offset += 1
        out.append((offset, _header(s) if isinstance(s, int) else s))
        offset += 1
    return out


def _find(records, committed: int, sync_offset: int | None = None, **reader) -> tuple[ResumePoint | None, list]:
    fake = FakeDestinationPartitions({(TOPIC, 0): records}, **reader)
    return ResumeFinder(fake).find(SOURCE, TOPIC, committed, sync_offset), fake.reads


def _read_from(records, resume: int) -> list:
    """What a consumer reads from `resume` to the end: source offsets (None: no header)."""
    return [s for s in (_source(h) for o, h in records if o >= resume) if s is not FOREIGN]


def _source(header):
    """The source offset a record is a copy of; None without a header or with another hop's; FOREIGN for this
    hop's copy of another partition and the other source's copies."""
    parsed = parse_provenance(header) if header else None
    if parsed is None or parsed[:2] not in (("east", "cid"), ("west", "cid-west")):
        return None
    return parsed[4] if parsed[:4] == ("east", "cid", "t", 0) else FOREIGN


def _this_hops(header) -> bool:
    parsed = parse_provenance(header) if header else None
    return parsed is not None and parsed[:2] == ("east", "cid")


FOREIGN = "foreign"


@pytest.mark.parametrize("committed, expected", [
    (0, ResumePoint(0, PROVENANCE, 0, 100, 99)),            # group at the beginning
    (10, ResumePoint(10, PROVENANCE, 0, 100, 99)),
    (50, ResumePoint(50, PROVENANCE, 0, 100, 99)),
    (99, ResumePoint(99, PROVENANCE, 0, 100, 99)),
    (100, ResumePoint(100, PROVENANCE_END, 0, 100, 99)),    # group at the end of what was mirrored
    (5_000, ResumePoint(100, PROVENANCE_END, 0, 100, 99)),  # group beyond what was mirrored
])
def test_clean_run_resumes_at_the_copy_of_the_committed_offset(committed, expected):
    assert _find(_destination(range(100)), committed)[0] == expected


def test_clean_run_with_a_sync_is_read_from_the_low_watermark():
    point, reads = _find(_destination(range(100)), 70, sync_offset=40)
    assert point == ResumePoint(70, PROVENANCE, 0, 100, 99)
    assert reads == [(TOPIC, 0, 0, 100)]


def test_a_sync_after_a_crash_is_no_start_for_the_scan():
    # Run 1 wrote 0..100 and died with 50 committed; run 2 wrote the sync (50 -> 101) at assignment,
    # re-sent 50..60 and stopped. From 101 a group at 52 would miss 61..100: they are only before 101.
    records = _destination([*range(101), *range(50, 61)])
    point, _ = _find(records, 52, sync_offset=101)
    assert point == ResumePoint(52, PROVENANCE, 2, 112, 100)   # 50 and 51 of run 2 are read again
    assert set(range(52, 101)) <= set(_read_from(records, point.destination_offset))


def test_crash_resend_resumes_at_the_first_copy_and_counts_the_resent_records_below_c():
    # Run 1 wrote 0..99 and died after committing 80; run 2 re-sent 80..99 and went on to 149.
    records = _destination([*range(100), *range(80, 150)])
    point, _ = _find(records, 90)
    assert point == ResumePoint(90, PROVENANCE, 10, 170, 149)   # 80..89 of run 2 are read again
    read = _read_from(records, point.destination_offset)
    assert set(range(90, 150)) <= set(read) and sum(1 for s in read if s < 90) == point.may_reread
    # A group committed before the re-sent range re-reads nothing: its copies of 80..99 come twice, but
    # those are records it had not read on the source.
    assert _find(records, 50)[0] == ResumePoint(50, PROVENANCE, 0, 170, 149)


def test_a_resend_that_has_not_caught_up_does_not_hide_records():
    # Run 1 wrote 0..100; run 2 re-sent 50..60 and the mirror stopped. The copy of 55 in run 2 is not a
    # safe place: 61..100 exist only in run 1, before it.
    records = _destination([*range(101), *range(50, 61)])
    point, _ = _find(records, 55)
    assert point == ResumePoint(55, PROVENANCE, 5, 112, 100)
    assert set(range(55, 101)) <= set(_read_from(records, point.destination_offset))


def test_destination_gaps_are_skipped_and_the_answer_is_a_record_offset():
    records = _destination(range(100), first=7, gap_every=10)
    offsets = dict((_source(h), o) for o, h in records)
    point, _ = _find(records, 50)
    assert point.destination_offset == offsets[50] and point.method == PROVENANCE and point.may_reread == 0
    assert point.end_offset == records[-1][0] + 1
    # Without headers the sync's D stands, even on a gap (a marker's offset); what follows it is counted.
    no_headers = [(o, None) for o, _ in records]
    marker = next(o for o in range(7, 200) if o not in offsets.values())
    point, _ = _find(no_headers, 50, sync_offset=marker)
    assert point == ResumePoint(marker, OFFSET_SYNC, sum(1 for o, _ in records if o > marker), records[-1][0] + 1)


def test_other_partitions_and_other_sources_copies_are_skipped_and_records_without_header_are_never_skipped():
    skipped = [_header(60, partition=1), _header(70, alias="west", cluster="cid-west")]
    records = _destination([0, 1, *skipped, 2, 3, None, 4, 5, 6])
    # The record without a header (offset 6) could be a copy of anything: the answer is not after it.
    assert _find(records, 5)[0] == ResumePoint(6, PROVENANCE, 2, 10, 6)   # it and 4 may be re-read; 5, 6 not
    assert _find(records, 3)[0] == ResumePoint(5, PROVENANCE, 1, 10, 6)   # the other copies: skipped
    assert _find(records, 7)[0] == ResumePoint(6, PROVENANCE, 4, 10, 6)   # it, 4, 5 and 6


def test_another_hops_header_counts_as_no_header():
    """Chain A -> B -> C, B -> C without provenance headers: C holds A -> B's headers, copied unchanged (and
    applications forward headers). They name no copy of this hop: they place no group."""
    upstream = [_header(s, **UPSTREAM) for s in range(100)]
    # Before: every record skipped as another partition's, the answer the log end (100, provenance-end).
    assert _find(_destination(upstream), 10, sync_offset=0)[0] == ResumePoint(0, OFFSET_SYNC, 100, 100)
    assert _find(_destination(upstream), 10)[0] is None
    # Headers turned on later at B -> C: the records before may be copies of anything, never skipped.
    records = _destination([*upstream[:50], *range(50, 100)])
    assert _find(records, 20)[0] == ResumePoint(0, PROVENANCE, 50, 100, 99)
    # The cluster id tells this hop from an upstream one under the same alias.
    same_alias = _destination([_header(s, cluster="cluster-up") for s in range(100)])
    assert _find(same_alias, 10, sync_offset=0)[0].method == OFFSET_SYNC


def test_no_header_falls_back_to_the_offset_sync():
    records = _destination([None] * 100)
    point, reads = _find(records, 50, sync_offset=30)
    # Every record from D may be a re-read (nothing tells a re-sent copy from a new record).
    assert point == ResumePoint(30, OFFSET_SYNC, 70, 100)
    assert _find(records, 50)[0] is None  # no header and no sync: nothing to translate with


def test_sync_outside_the_readable_partition():
    records = [(o, None) for o in range(100, 200)]
    # A sync below the low watermark (records deleted by retention): the low watermark.
    point, reads = _find(records, 150, sync_offset=20, low={(TOPIC, 0): 100})
    assert point == ResumePoint(100, OFFSET_SYNC, 100, 200) and reads == [(TOPIC, 0, 100, 200)]
    # A sync past the end (the destination topic was re-created): no offset at all.
    assert _find(records, 150, sync_offset=900)[0] is None
    # With headers neither matters: the whole readable partition is read.
    point, reads = _find(_destination(range(100, 200), first=100), 150, sync_offset=900)
    assert point.destination_offset == 150 and reads == [(TOPIC, 0, 100, 200)]


def test_empty_partition_translates_with_a_sync_only():
    assert _find([], 10, sync_offset=0)[0] == ResumePoint(0, OFFSET_SYNC, 0, 0)
    assert _find([], 10)[0] is None


def test_bad_input_is_refused_with_one_line_errors():
    with pytest.raises(ValueError, match=r"^committed offset must be >= 0, got -1$"):
        resume_point(SOURCE, -1, [], 0, 0, None)
    with pytest.raises(ValueError, match=r"^low watermark 5 is after end 4$"):
        resume_point(SOURCE, 0, [], 5, 4, None)
    with pytest.raises(ValueError, match=r"^record at offset 9 outside \[0, 5\)$"):
        resume_point(SOURCE, 0, [(9, _header(0))], 0, 5, None)


def _random_destination(rng: random.Random) -> list:
    """A partition written by runs that each re-send from some earlier point (or anywhere at all), with
    records without header and other partitions' copies mixed in: no assumption on how it was written."""
    sequence, position = [], 0
    for _ in range(rng.randint(1, 5)):
        start = rng.randint(max(0, position - 30), position)
        stop = start + rng.randint(0, 40)
        sequence.extend(range(start, stop))
        position = max(position, stop)
    for _ in range(rng.randint(0, 3)):
        sequence.insert(rng.randint(0, len(sequence)), rng.choice([
            None, _header(5, partition=3), _header(6, alias="west", cluster="cid-west"), _header(7, **UPSTREAM)]))
    return _destination(sequence, gap_every=rng.choice([0, 0, 7]))


def test_never_a_record_missed_and_the_reread_count_is_exact_on_any_partition():
    rng = random.Random(15)
    for _ in range(300):
        records = _random_destination(rng)
        copies = [s for s in (_source(h) for _, h in records) if s is not FOREIGN]
        mirrored = {s for s in copies if s is not None}
        for committed in range(0, max(mirrored, default=0) + 3):
            # Any sync at all (a D after a crashed run's copies included) leaves the answer safe.
            point, _ = _find(records, committed, rng.choice([None, rng.randint(0, len(records))]))
            if point is None or point.method == OFFSET_SYNC:
                assert not any(_this_hops(h) for _, h in records), records  # only with no header of this hop
                continue
            read = _read_from(records, point.destination_offset)
            assert {s for s in mirrored if s >= committed} <= set(read), (records, committed, point)
            assert point.may_reread == sum(1 for s in read if s is None or s < committed)
            if all(s is not None for s in copies) and copies == sorted(set(copies)):
                assert point.may_reread == 0  # a clean run: nothing re-read


def _log(offsets_and_sources, partition: int = 0) -> list:
    from tests.unit.fakes import FakeMessage
    return [FakeMessage(TOPIC, partition, o,
                        headers=[("other", b"x")] + ([("mirror.source", _header(s))] if s is not None else []))
            for o, s in offsets_and_sources]


def test_partition_reader_yields_headers_over_gaps_up_to_the_end_and_releases_the_partition():
    from confluent_kafka import IsolationLevel
    from mirror_worker.dr.offset_translation import PartitionReader
    from tests.unit.fakes import FakeLogConsumer, FakeOffsetsAdmin

    # Offsets 3 and 6 hold transaction markers; 9 is past the last stable offset (an open transaction).
    consumer = FakeLogConsumer({(TOPIC, 0): _log([(1, 10), (2, None), (4, 11), (5, 12), (7, 13), (9, 14)])})
    admin = FakeOffsetsAdmin({(TOPIC, 0): (1, 8)})
    reader = PartitionReader(consumer, admin, timeout=1.0)
    assert reader.bounds(TOPIC, 0) == (1, 8)
    assert admin.isolation_levels == [IsolationLevel.READ_COMMITTED] * 2
    assert list(reader.records(TOPIC, 0, 2, 8)) == [(2, None), (4, _header(11)), (5, _header(12)), (7, _header(13))]
    assert consumer.unassigned == 1
    # The last readable record below the end is before it (a marker at 7): the end-of-partition event stops.
    consumer.logs[(TOPIC, 0)] = _log([(1, 10), (4, 11)])
    assert list(reader.records(TOPIC, 0, 1, 8)) == [(1, _header(10)), (4, _header(11))]
    assert list(reader.records(TOPIC, 0, 8, 8)) == []
    # Through the finder: a group committed at 12 resumes at destination offset 5.
    point = ResumeFinder(PartitionReader(FakeLogConsumer({(TOPIC, 0): _log([(1, 10), (4, 11), (5, 12), (7, 13)])}),
                                         FakeOffsetsAdmin({(TOPIC, 0): (1, 8)}))).find(SOURCE, TOPIC, 12, None)
    assert point == ResumePoint(5, PROVENANCE, 0, 8, 13)


def test_partition_reader_errors_are_one_line_translation_errors():
    from mirror_worker.dr.offset_translation import PartitionReader, TranslationError
    from tests.unit.fakes import FakeError, FakeMessage

    class Failing:
        def assign(self, partitions): pass
        def unassign(self): pass
        def consume(self, num_messages=1, timeout=-1):
            return [FakeMessage(TOPIC, 0, 0, error=FakeError(text="Broker: Not authorized"))]

    reader = PartitionReader(Failing(), None, timeout=1.0)
    with pytest.raises(TranslationError, match=r"^reading x\.t\[0\]: Broker: Not authorized$"):
        list(reader.records(TOPIC, 0, 0, 5))


def test_report_says_per_partition_how_the_offset_was_found_and_what_may_be_reread():
    from types import SimpleNamespace

    from mirror_worker.dr.offset_syncs import OffsetSync, PartitionTranslation, Translated
    from mirror_worker.dr.offset_translation import MissingPartitionError, place, report, translated_offsets

    class Partitions(FakeDestinationPartitions):
        def bounds(self, topic, partition):
            if partition == 3:
                raise MissingPartitionError(f"{topic}[{partition}] does not exist on the destination")
            return super().bounds(topic, partition)

    finder = ResumeFinder(Partitions({(TOPIC, 0): _destination(range(1000)),
                                      (TOPIC, 1): [(o, None) for o in range(100)]}))
    sync = OffsetSync("east", "t", 0, 0, 0)
    failovers = [
        place(finder, SourcePartition("east", "t", p, "cid"),
              PartitionTranslation("t", p, committed, TOPIC, result, why))
        for p, committed, result, why in [(0, 500, Translated(0, sync), ""), (1, 7, Translated(5, sync), ""),
                                          (2, 3, None, "no offset sync for this partition yet"), (3, 9, None, "")]
    ]
    document = report(SimpleNamespace(name="m"), "g", failovers, applied=False)
    assert document["offsets"] == [
        {"topic": TOPIC, "partition": 0, "offset": 500, "source_topic": "t", "source_offset": 500,
         "method": "provenance", "may_reread": 0, "end_offset": 1000, "last_mirrored_source_offset": 999,
         "sync": {"source_offset": 0, "destination_offset": 0}},
        {"topic": TOPIC, "partition": 1, "offset": 5, "source_topic": "t", "source_offset": 7,
         "method": "offset-sync", "may_reread": 95, "end_offset": 100, "last_mirrored_source_offset": None,
         "sync": {"source_offset": 0, "destination_offset": 0}},
    ]
    assert document["untranslated"] == [
        {"source_topic": "t", "partition": 2, "source_offset": 3,
         "reason": "no offset sync for this partition yet, and no provenance header on the destination"},
        {"source_topic": "t", "partition": 3, "source_offset": 9, "reason": "x.t[3] does not exist on the destination"},
    ]
    assert translated_offsets(failovers) == {(TOPIC, 0): 500, (TOPIC, 1): 5}


def test_partition_reader_names_a_missing_destination_partition():
    from confluent_kafka import KafkaError, KafkaException
    from mirror_worker.dr.offset_translation import MissingPartitionError, PartitionReader

    class Missing:
        def result(self, timeout=None):
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))

    class Admin:
        def list_offsets(self, requests, **kwargs):
            return {tp: Missing() for tp in requests}

    with pytest.raises(MissingPartitionError, match=r"^x\.t\[4\] does not exist on the destination$"):
        PartitionReader(None, Admin()).bounds(TOPIC, 4)


def test_partition_reader_reads_a_record_whose_header_name_is_not_utf8_as_one_without_provenance():
    """Issue #43: confluent-kafka cannot read such headers (clients/headers.py); the translation goes on."""
    from mirror_worker.dr.offset_translation import PartitionReader
    from tests.unit.fakes import FakeLogConsumer, FakeOffsetsAdmin, UnreadableHeadersMessage

    log = _log([(1, 10)]) + [UnreadableHeadersMessage(TOPIC, 0, 2)] + _log([(3, 11)])
    reader = PartitionReader(FakeLogConsumer({(TOPIC, 0): log}), FakeOffsetsAdmin({(TOPIC, 0): (1, 4)}), timeout=1.0)
    assert list(reader.records(TOPIC, 0, 1, 4)) == [(1, _header(10)), (2, None), (3, _header(11))]

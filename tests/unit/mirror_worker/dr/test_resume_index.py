"""The incremental resume index (resume_index.py) gives exactly resume_search.resume_point's answer, read
in slices, on random partitions: crash re-sends, destination gaps, records without a header, other
partitions' copies, retention moving the low watermark, a re-created topic."""

from __future__ import annotations

import random

import pytest

from mirror_worker.dr.resume_index import IncrementalFinder, PartitionIndex, Run
from mirror_worker.dr.resume_search import OFFSET_SYNC, PROVENANCE, PROVENANCE_END, ResumeFinder, ResumePoint
from tests.unit.fakes import FakeDestinationPartitions
from tests.unit.mirror_worker.dr.test_resume_search import SOURCE, TOPIC, _destination, _header, _random_destination


def _full(records, committed, sync_offset=None, low=None):
    fake = FakeDestinationPartitions({(TOPIC, 0): records}, low={(TOPIC, 0): low} if low is not None else None,
                                     ends={(TOPIC, 0): records[-1][0] + 1} if records else None)
    return ResumeFinder(fake).find(SOURCE, TOPIC, committed, sync_offset)


class GrowingPartition(FakeDestinationPartitions):
    """One destination partition whose records appear slice by slice (`show(n)`): its end is one past the
    last record shown; `low` can be moved (retention)."""

    def __init__(self, records) -> None:
        super().__init__({(TOPIC, 0): []})
        self.all, self.shown = records, 0

    def show(self, count: int) -> None:
        self.shown = count
        self.partitions[(TOPIC, 0)] = [r for r in self.all[:count] if r[0] >= self.low.get((TOPIC, 0), 0)]
        self.ends[(TOPIC, 0)] = self.all[count - 1][0] + 1 if count else self.ends.get((TOPIC, 0), 0)

    def retain_from(self, low: int) -> None:
        self.low[(TOPIC, 0)] = low
        self.show(self.shown)


def test_a_clean_run_is_one_run_whatever_its_length():
    index = PartitionIndex()
    for offset, header in _destination(range(10_000)):
        index.add(SOURCE, offset, header)
    assert index.steps == [Run(0, 0, 10_000)] and index.others == []
    assert index.resume(4_321, None) == ResumePoint(4_321, PROVENANCE, 0, 10_000, 9_999)
    assert index.resume(10_000, None) == ResumePoint(10_000, PROVENANCE_END, 0, 10_000, 9_999)


def test_a_crash_resend_adds_two_runs_and_the_answer_is_the_full_reads():
    records = _destination([*range(101), *range(50, 61), *range(101, 200)])
    index = PartitionIndex()
    for offset, header in records:
        index.add(SOURCE, offset, header)
    assert index.steps == [Run(0, 0, 101), Run(112, 101, 99)] and index.others == [Run(101, 50, 11)]
    for committed in (0, 52, 100, 101, 150, 200):
        assert index.resume(committed, None) == _full(records, committed)


def test_each_read_starts_where_the_last_ended():
    partition = GrowingPartition(_destination(range(300)))
    finder = IncrementalFinder(partition)
    for count in (0, 100, 100, 250, 300):
        partition.show(count)
        finder.find(SOURCE, TOPIC, 120, None)
    assert [(start, end) for _, _, start, end in partition.reads] == [(0, 0), (0, 100), (100, 100), (100, 250),
                                                                      (250, 300)]
    assert finder.find(SOURCE, TOPIC, 120, None) == ResumePoint(120, PROVENANCE, 0, 300, 299)


def _random_records(rng: random.Random) -> list:
    records = _random_destination(rng)
    if rng.random() < 0.2:  # a mirror that wrote no header for a while, then did
        records = [(o, None) for o, _ in records[: len(records) // 2]] + records[len(records) // 2:]
    return records


def test_incremental_index_equals_the_full_read_on_random_partitions():
    rng = random.Random(1502)
    checked = 0
    for _ in range(400):
        records = _random_records(rng)
        if not records:
            continue
        partition = GrowingPartition(records)
        finder = IncrementalFinder(partition)
        shown = 0
        while shown < len(records):
            shown = min(len(records), shown + rng.randint(1, 25))
            partition.show(shown)
            if rng.random() < 0.15:  # retention: the low watermark moves up, maybe past every record
                partition.retain_from(rng.randint(partition.low.get((TOPIC, 0), 0), records[shown - 1][0] + 1))
            visible = partition.partitions[(TOPIC, 0)]
            low, end = partition.bounds(TOPIC, 0)
            top = max((o for o, h in records), default=0) + 3
            for committed in {0, rng.randint(0, top), rng.randint(0, top), top}:
                sync = rng.choice([None, rng.randint(0, end + 2)])
                expected = ResumeFinder(FakeDestinationPartitions(
                    {(TOPIC, 0): visible}, low={(TOPIC, 0): low}, ends={(TOPIC, 0): end})).find(
                    SOURCE, TOPIC, committed, sync)
                assert finder.find(SOURCE, TOPIC, committed, sync) == expected, (records, shown, low, committed)
                checked += 1
    assert checked > 3_000


def test_no_header_left_after_retention_falls_back_to_the_sync():
    partition = GrowingPartition([*_destination(range(10)), *[(o, None) for o in range(10, 20)]])
    finder = IncrementalFinder(partition)
    partition.show(20)
    assert finder.find(SOURCE, TOPIC, 5, 12).method == PROVENANCE
    partition.retain_from(10)  # the records with a header are gone
    assert finder.find(SOURCE, TOPIC, 5, 12) == ResumePoint(12, OFFSET_SYNC, 8, 20)
    assert finder.find(SOURCE, TOPIC, 5, None) is None


def test_a_partition_whose_end_went_back_is_indexed_again():
    partition = GrowingPartition(_destination(range(100)))
    finder = IncrementalFinder(partition)
    partition.show(100)
    assert finder.find(SOURCE, TOPIC, 50, None).destination_offset == 50
    # The destination topic was re-created and holds a copy of source 40.. from offset 0.
    recreated = GrowingPartition(_destination(range(40, 60)))
    recreated.show(20)
    finder.reader = recreated
    assert finder.find(SOURCE, TOPIC, 50, None) == ResumePoint(10, PROVENANCE, 0, 20, 59)
    assert recreated.reads == [(TOPIC, 0, 0, 20)]


def test_records_before_the_indexed_end_are_refused():
    index = PartitionIndex()
    index.add(SOURCE, 5, _header(0))
    with pytest.raises(ValueError, match=r"^record at offset 5 is before the indexed end 6$"):
        index.add(SOURCE, 5, _header(1))
    with pytest.raises(ValueError, match=r"^committed offset must be >= 0, got -1$"):
        index.resume(-1, None)

"""Offset syncs without a broker: the slots, the translation arithmetic, the records, the writer's errors."""

from __future__ import annotations

import pytest

from mirror_worker.dr.offset_syncs import OffsetSync, slot_for, translate_offset, translate_positions


@pytest.mark.parametrize("sequence, slot", [(1, 0), (2, 1), (3, 0), (4, 2), (6, 1), (8, 3), (128, 7), (1024, 7)])
def test_slot_for_spaces_history_exponentially(sequence, slot):
    assert slot_for(sequence) == slot


def _sync(s: int, d: int, topic: str = "t", partition: int = 0, source: str = "src", topic_id: str = "") -> OffsetSync:
    return OffsetSync(source, topic, partition, s, d, topic_id)


# Syncs (S -> D) of one partition, drawn:
#
#   source       0 ... 9 | 10 ... 19 | 20 ... 29 | 30
#   destination  0 ... 9 | 10 ... 24 | 25 ... 34 | 35        (15..19 hold a re-sent copy of 10..14)
#   syncs        (10 -> 10), (20 -> 25), (30 -> 35)
SYNCS = [_sync(10, 10), _sync(20, 25), _sync(30, 35)]


@pytest.mark.parametrize("committed, expected", [
    (9, None),       # before the oldest sync: not translatable (9 < 10)
    (10, 10),        # exactly at a sync: resume at its D, nothing reread
    (11, 10),        # one past: reread source record 10 (and what was mirrored after it)
    (19, 10),        # just before the next sync: still the older one
    (20, 25),        # at the next sync
    (29, 25),
    (30, 35),        # caught up with the last sync
    (1000, 35),      # far ahead of every sync: the latest one
])
def test_translate_offset_picks_the_sync_at_or_below(committed, expected):
    result = translate_offset(committed, SYNCS)
    assert (result.destination_offset if result else None) == expected


def test_translate_offset_prefers_the_largest_destination_offset_after_a_resend():
    # A restart re-sent from 10 after a sync (20 -> 25) was written: (15 -> 40) is later and also true.
    result = translate_offset(22, [_sync(20, 25), _sync(15, 40)])
    assert result.destination_offset == 40


def test_translate_positions_per_partition_with_reasons_and_topic_ids():
    syncs = [
        _sync(5, 7, "a", 0, topic_id="id1"),
        _sync(8, 3, "a", 0, topic_id="old"),   # the topic's previous incarnation: ignored
        _sync(4, 4, "a", 1),                   # no id recorded: used
        _sync(4, 99, "a", 1, source="other"),  # another source cluster: ignored
        _sync(10, 10, "b", 0),
    ]
    out = translate_positions({("a", 0): 9, ("a", 1): 4, ("b", 0): 3, ("c", 0): 1}, syncs, "src",
                              lambda t: "dc." + t, {"a": "id1"})
    got = {(t.source_topic, t.partition): (t.destination_topic, t.result.destination_offset if t.result else None, t.reason)
           for t in out}
    assert got == {
        ("a", 0): ("dc.a", 7, ""),
        ("a", 1): ("dc.a", 4, ""),
        ("b", 0): ("dc.b", None, "committed offset 3 is older than the oldest offset sync kept (10)"),
        ("c", 0): ("dc.c", None, "no offset sync for this partition yet"),
    }


def test_sync_records_round_trip_and_foreign_records_are_ignored():
    sync = _sync(12, 34, "orders", 3, topic_id="abc")
    assert OffsetSync.decode(sync.key(slot_for(2)), sync.value()) == sync
    assert sync.key(0) != sync.key(1)  # each slot its own compacted key
    assert OffsetSync.decode(sync.key(0), None) is None
    assert OffsetSync.decode(b"junk", b"{}") is None


def test_an_unanswered_list_offsets_is_an_error_not_an_exception():
    """The destination down: ListOffsets futures time out; the syncs are reported as not written (counted by
    the commit cycle), and written at a later commit (issue 28: TimeoutError ended the worker)."""
    from concurrent.futures import Future

    from mirror_worker.dr.offset_syncs import OffsetSyncWriter

    class SilentAdmin:
        calls = 0

        def list_offsets(self, requests, request_timeout):
            self.calls += 1
            return {tp: Future() for tp in requests}  # never completed

    class Producer:
        def produce(self, *args):
            raise AssertionError("no sync without a high watermark")

        def poll(self, timeout):
            pass

    admin = SilentAdmin()
    writer = OffsetSyncWriter("syncs", admin, lambda t: t, timeout=0.05)
    syncs, errors = writer.write(Producer(), "source", {("orders", 0): 10}, {})
    assert syncs == [] and errors == {"orders[0]": "no answer within 0s"}
    assert admin.calls == 1  # unreachable: not retried now
    assert writer.written == {}  # the next commit tries again


def test_a_list_offsets_without_an_offset_writes_no_sync():
    """A destination leader killed and not yet fenced: ListOffsets answers -1001 instead of an error. No sync
    to a negative offset is written (the fault tests found them); the next commit tries again."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from mirror_worker.dr.offset_syncs import OffsetSyncWriter

    class DeadLeaderAdmin:
        def list_offsets(self, requests, request_timeout):
            futures = {tp: Future() for tp in requests}
            for future in futures.values():
                future.set_result(SimpleNamespace(offset=-1001))
            return futures

    class Producer:
        def produce(self, *args):
            raise AssertionError("no sync without a high watermark")

        def poll(self, timeout):
            pass

    writer = OffsetSyncWriter("syncs", DeadLeaderAdmin(), lambda t: t, timeout=0.05)
    syncs, errors = writer.write(Producer(), "source", {("orders", 0): 10}, {})
    assert syncs == [] and errors == {"orders[0]": "no high watermark (offset -1001)"}
    assert writer.written == {}

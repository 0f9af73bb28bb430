"""Failback without servers: where a reverse mirror starts, its naming and topics, the spec's `reverse-of`,
and records that came from the destination skipped (not halted) by a failback pair."""

from pathlib import Path

import pytest

from mirror_worker.config.spec import load_entries, select_mirror
from mirror_worker.dr.failback import FailbackStart, failback_start
from mirror_worker.dr.failback_translation import OffsetRuns, failback_resume_point
from mirror_worker.dr.resume_search import SourcePartition
from mirror_worker.exceptions import ConfigError
from mirror_worker.policy.filter import ReverseTopicFilter, TopicFilter
from mirror_worker.policy.naming import ExplicitMapPolicy, IdentityPolicy, InversePolicy, PrefixPolicy
from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
from tests.unit.fakes import FakeDestinationPartitions, FakeMessage, assign, make_worker, records

OLD_SOURCE, OTHER = "cluster-old-source", "cluster-elsewhere"


def _copy(offset: int, cluster: str = OLD_SOURCE) -> bytes:
    return provenance_value("east", cluster, "orders", 0, offset)


def _partition(copies: int, new: int, first: int = 0) -> FakeDestinationPartitions:
    """`copies` records from the old source, then `new` records written on the promoted cluster."""
    log = [(first + i, _copy(i)) for i in range(copies)] + [(first + copies + i, None) for i in range(new)]
    return FakeDestinationPartitions({("orders", 0): log})


def _start(reader: FakeDestinationPartitions, window: int = 1000):
    low, high = reader.bounds("orders", 0)
    return failback_start(reader.records, "orders", 0, low, high, OLD_SOURCE, window)


# ---------------------------------------------------------------- the start offset
def test_a_partition_starts_just_after_the_forward_mirrors_last_copy():
    point = _start(_partition(copies=500, new=30, first=100))
    assert (point.offset, point.last_copy) == (600, 599)


def test_the_scan_reads_backwards_in_doubling_windows_and_stops_at_the_last_copy():
    reader = _partition(copies=1000, new=10)
    point = _start(reader, window=4)
    assert point.offset == 1000
    # 1010 -> 1006 (4), -> 998 (8): the copy at 999 ends the scan; nothing before 998 is read.
    assert [(start, end) for _, _, start, end in reader.reads] == [(1006, 1010), (998, 1006)]
    assert point.records_read == 12


def test_a_partition_without_any_copy_holds_only_new_records_and_starts_at_its_beginning():
    assert _start(_partition(copies=0, new=7, first=40)).offset == 40


def test_an_empty_partition_starts_at_its_end_without_reading():
    reader = FakeDestinationPartitions({("orders", 0): []}, low={("orders", 0): 9}, ends={("orders", 0): 9})
    point = _start(reader)
    assert (point.offset, point.records_read, reader.reads) == (9, 0, [])


def test_copies_from_another_cluster_and_malformed_headers_are_new_records_here():
    log = [(0, _copy(0)), (1, _copy(1, OTHER)), (2, b"not-a-provenance"), (3, None)]
    assert _start(FakeDestinationPartitions({("orders", 0): log})).offset == 1


def test_a_header_an_application_forwarded_is_a_new_record_here():
    """An application that read a copy of the old source's `payments` wrote `orders` here after the failover:
    its header names the old source, but the record is new (the hot path mirrors it back, so starts before it)."""
    log = [(0, _copy(0)), (1, None), (2, provenance_value("east", OLD_SOURCE, "payments", 0, 3)), (3, None)]
    assert _start(FakeDestinationPartitions({("orders", 0): log})).offset == 1
    # Where the reverse mirror writes the topic back tells a copy too (a forward topic-map, read backwards).
    renamed = [(0, provenance_value("east", OLD_SOURCE, "payments", 0, 0)), (1, None)]
    reader = FakeDestinationPartitions({("orders", 0): renamed})
    assert failback_start(reader.records, "orders", 0, 0, 2, OLD_SOURCE, destination_topic="payments").offset == 1


def test_gaps_in_offsets_transaction_markers_do_not_move_the_start():
    log = [(0, _copy(0)), (2, _copy(1)), (5, None), (7, None)]  # 1, 3, 4, 6: markers
    assert _start(FakeDestinationPartitions({("orders", 0): log}, ends={("orders", 0): 8}), window=2).offset == 3


def test_failback_start_keeps_one_reader_per_source_and_closes_them():
    made = []

    class Reader(FakeDestinationPartitions):
        closed = False

        def close(self):
            self.closed = True

    def reader_for(stream):
        made.append(Reader({("orders", 0): [(0, _copy(0)), (1, None)]}))
        return made[-1]

    class Stream:
        alias = "west"

    start = FailbackStart(OLD_SOURCE, reader_for, {"mirror": "back"})
    assert start(Stream(), "orders", 0, 0, 2) == 1
    assert start(Stream(), "orders", 0, 0, 2) == 1
    start.close()
    assert len(made) == 1 and made[0].closed


# ---------------------------------------------------------------- naming and topics backwards
@pytest.mark.parametrize("forward, destination_name, home", [
    (PrefixPolicy("src."), "src.orders", "orders"),
    (IdentityPolicy(), "orders", "orders"),
    (ExplicitMapPolicy({"orders": "orders-copy"}), "orders-copy", "orders"),
])
def test_the_inverse_policy_takes_each_forward_name_home(forward, destination_name, home):
    inverse = InversePolicy(forward)
    assert inverse.remote_topic(destination_name) == home
    assert inverse.upstream_topic(home) == destination_name


def test_a_name_the_forward_mirror_never_makes_has_no_way_back():
    with pytest.raises(ConfigError, match="no way back"):
        InversePolicy(PrefixPolicy("src.")).remote_topic("payments")


def test_the_reverse_filter_selects_the_forward_mirrors_destination_names_of_its_topics():
    forward = TopicFilter.from_expressions("orders\\..*", None)
    reverse = ReverseTopicFilter(forward, PrefixPolicy("src.").upstream_topic)
    topics = ["src.orders.eu", "orders.eu", "src.payments", "src.__consumer_offsets", "mirror.heartbeats"]
    assert reverse.select(topics) == ["src.orders.eu"]


# ---------------------------------------------------------------- the spec's reverse-of
def _spec(tmp_path: Path, forward: str = "provenance-headers: true\n        preserve-partitions: true",
          reverse: str = "") -> Path:
    path = tmp_path / "mirrors.yaml"
    path.write_text(f"""
groups:
  - name: back
    source: {{name: west, kafka: {{bootstrap.servers: "b:1"}}}}
    destination: {{kafka: {{bootstrap.servers: "a:1"}}}}
    mirrors:
      - name: orders-back
        reverse-of: orders{reverse}
  - name: out
    source: {{name: east, kafka: {{bootstrap.servers: "a:1"}}}}
    destination: {{kafka: {{bootstrap.servers: "b:1"}}}}
    mirrors:
      - name: orders
        whitelist: "orders\\\\..*"
        prefix: "src."
        {forward}
""")
    return path


def test_a_reverse_mirror_takes_the_forward_mirrors_topics_names_and_partitioning(tmp_path):
    path = _spec(tmp_path)
    back = select_mirror(path, "orders-back")
    assert back.reverse_of.name == "orders" and back.preserve_partitions
    assert back.provenance_headers and back.origin_records == "skip"
    assert back.topic_filter().select(["src.orders.eu", "orders.eu"]) == ["src.orders.eu"]
    assert back.naming_policy().remote_topic("src.orders.eu") == "orders.eu"
    # The forward mirror, resumed after the failback, skips the reverse mirror's copies instead of halting.
    assert select_mirror(path, "orders").origin_records == "skip"
    assert [e.name for e in load_entries(path)] == ["orders-back", "orders"]  # the spec's order


@pytest.mark.parametrize("forward, reverse, error", [
    ("preserve-partitions: true", "", "mirror 'orders' must write provenance headers"),
    ("provenance-headers: true", "\n        whitelist: x", "reverse-of: mirror 'orders' decides the topics and their "
                                                           "names: remove whitelist"),
    ("provenance-headers: true", "\n        provenance-headers: false", "reverse-of needs provenance-headers"),
    ("provenance-headers: true", "\n        origin-records: halt", "reverse-of needs origin-records: skip"),
    ("provenance-headers: true\n        queue-size: 1", "", "reverse-of: mirror 'orders' is invalid"),
])
def test_a_reverse_mirror_that_cannot_work_is_refused_in_one_line(tmp_path, forward, reverse, error):
    with pytest.raises(ConfigError) as exc:
        select_mirror(_spec(tmp_path, forward, reverse), "orders-back")
    assert error in str(exc.value) and "\n" not in str(exc.value)


def test_reverse_of_names_a_forward_mirror_of_the_spec(tmp_path):
    path = _spec(tmp_path, reverse="\n      - name: twice\n        reverse-of: orders-back")
    with pytest.raises(ConfigError, match="reverse-of: mirror 'orders-back' is itself a reverse mirror"):
        select_mirror(path, "twice")
    text = path.read_text().replace("reverse-of: orders\n", "reverse-of: nothing\n")
    path.write_text(text)
    with pytest.raises(ConfigError, match="reverse-of: no mirror named 'nothing'"):
        select_mirror(path, "orders-back")


# ---------------------------------------------------------------- the hot path and the start rule
def _from_destination(offset: int, topic: str = "t") -> FakeMessage:
    """A record of `t` whose header names the destination's `topic`: a copy from there when `topic` is `t`
    (identity naming); else an application's record that forwarded a copy's header."""
    return FakeMessage("t", 0, offset, value=b"looped",
                       headers=[(PROVENANCE_HEADER, provenance_value("east", "dst-cluster", topic, 0, offset))])


@pytest.mark.parametrize("origin_records", ["skip", "halt"])
def test_records_from_the_destination_are_skipped_by_a_failback_pair_and_halt_anything_else(origin_records):
    log = [_from_destination(0), *records("t", 0, [1]), _from_destination(2), *records("t", 0, [3]),
           _from_destination(4)]
    worker, stream, consumer, producer = make_worker({("t", 0): log}, origin_records=origin_records,
                                                     provenance_headers=True)
    worker.destination_cluster_id = "dst-cluster"
    assign(worker, stream, ("t", 0))
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    skipped = worker.metrics.records_skipped.labels(reason="origin", mirror="m", source="src", topic="t")._value.get()
    if origin_records == "skip":
        assert [m.value() for m in producer.delivered] == [b"t-0-1", b"t-0-3"]
        assert consumer.commits[-1] == {("t", 0): 5} and not stream.ledger.halted  # past the last skipped one
        assert skipped == 3
    else:
        assert producer.delivered == [] and stream.ledger.halted[("t", 0)].offset == 0
        assert skipped == 0


@pytest.mark.parametrize("origin_records", ["skip", "halt"])
def test_a_forwarded_header_is_no_copy_from_the_destination(origin_records):
    """An application (Kafka Streams, Connect) that read a copy of the destination's `orders` and wrote `t`
    forwards its header: those records are new, and mirrored."""
    log = [_from_destination(0, "orders"), *records("t", 0, [1]), _from_destination(2, "orders")]
    worker, stream, consumer, producer = make_worker({("t", 0): log}, origin_records=origin_records,
                                                     provenance_headers=True)
    worker.destination_cluster_id = "dst-cluster"
    assign(worker, stream, ("t", 0))
    worker._consume_round(0)
    assert [m.value() for m in producer.delivered] == [b"looped", b"t-0-1", b"looped"] and not stream.ledger.halted


def test_a_partition_without_a_position_starts_where_the_fresh_start_rule_says():
    worker, stream, consumer, producer = make_worker({("t", 0): records("t", 0, range(6))})
    asked = []
    worker.assignment.fresh_start = lambda s, topic, partition, low, high: asked.append((topic, low, high)) or 4
    assign(worker, stream, ("t", 0))
    worker._consume_round(0)
    assert asked == [("t", 0, 6)] and [m.value() for m in producer.delivered] == [b"t-0-4", b"t-0-5"]


def test_a_partition_with_a_position_never_asks_the_fresh_start_rule():
    worker, stream, consumer, producer = make_worker({("t", 0): records("t", 0, range(6))},
                                                     committed={("t", 0): (2, "id-t")})
    worker.assignment.fresh_start = lambda *args: pytest.fail("asked for a partition with a position")
    assign(worker, stream, ("t", 0))
    assert consumer.positions[("t", 0)] == 2


# ---------------------------------------------------------------- a consumer group moving back
EAST, WEST = "cluster-east", "cluster-west"
REVERSE_SOURCE = SourcePartition("west", "dr.orders", 0, WEST)


def _f(s: int) -> bytes:  # the forward mirror's copy of east offset s (on west)
    return provenance_value("east", EAST, "orders", 0, s)


def _r(w: int) -> bytes:  # the reverse mirror's copy of west offset w (on east)
    return provenance_value("west", WEST, "dr.orders", 0, w)


def _place(committed: int, promoted: list, home: list, home_end: int | None = None, sync: int | None = None):
    end = home_end if home_end is not None else (home[-1][0] + 1 if home else 0)
    return failback_resume_point(committed, promoted, home, end, EAST, "orders", REVERSE_SOURCE, sync)


def _clean(copies: int = 100, new: int = 40):
    """West: F copies of east 0..copies-1, then `new` records; east: the originals, then R's copies of them."""
    promoted = [(s, _f(s)) for s in range(copies)] + [(copies + i, None) for i in range(new)]
    home = [(s, None) for s in range(copies)] + [(copies + i, _r(copies + i)) for i in range(new)]
    return promoted, home


@pytest.mark.parametrize("committed, expected", [(0, 0), (50, 50), (100, 100), (120, 120), (140, 140)])
def test_a_group_moving_back_after_a_clean_failback_resumes_exactly_where_it_was(committed, expected):
    point = _place(committed, *_clean())
    assert (point.destination_offset, point.may_reread, point.method) == (expected, 0, "failback")


def test_records_the_reverse_mirror_has_not_copied_yet_are_waited_for_at_the_end():
    promoted, home = _clean()
    point = _place(130, promoted, home[:120])  # R copied w 100..119 so far
    assert (point.destination_offset, point.may_reread) == (120, 0)


def test_a_forward_mirror_crash_resend_is_counted_as_what_the_group_may_reread():
    # F copied east 0..59, crashed with 40 committed, re-sent 40..99; then 20 new records on west.
    promoted = [(w, _f(w)) for w in range(60)] + [(60 + i, _f(40 + i)) for i in range(60)] + \
               [(120 + i, None) for i in range(20)]
    home = [(s, None) for s in range(100)] + [(100 + i, _r(120 + i)) for i in range(20)]
    point = _place(70, promoted, home)  # the group read east 0..59 and 40..49 again: next is the copy of 50
    assert (point.destination_offset, point.may_reread) == (50, 10)  # 50..59 again


def test_a_reverse_mirror_crash_resend_is_counted_as_what_the_group_may_reread():
    promoted, home = _clean()
    home = home[:130] + [(130 + i, _r(120 + i)) for i in range(20)]  # R re-sent w 120..139 at e 130..149
    point = _place(125, promoted, home)
    assert (point.destination_offset, point.may_reread) == (125, 5)  # copies of w 120..124 at e 130..134


def test_a_group_that_read_records_made_after_the_failback_resumes_at_their_originals():
    promoted, home = _clean()
    promoted += [(140 + i, _f(140 + i)) for i in range(20)]  # F, resumed, copied 20 new east records back
    home += [(140 + i, None) for i in range(20)]
    assert (_place(150, promoted, home).destination_offset, _place(150, promoted, home).may_reread) == (150, 0)


def test_other_clusters_records_decide_nothing_and_no_header_at_all_falls_back_to_the_sync():
    promoted, home = _clean()
    promoted = [(w, provenance_value("far", "cluster-far", "orders", 0, w) if h else h) for w, h in promoted]
    home = [(e, None) for e, _ in home]
    assert _place(120, promoted, home) is None
    point = _place(120, promoted, home, sync=100)
    assert (point.destination_offset, point.method, point.may_reread) == (100, "offset-sync", 40)


def test_offset_runs_count_a_multiset_from_an_offset():
    runs = OffsetRuns()
    for offset in [*range(0, 60), *range(40, 50), 70]:
        runs.add(offset)
    assert runs.runs == [[0, 60], [40, 50], [70, 71]]
    assert (runs.count_at_or_after(0), runs.count_at_or_after(45), runs.count_at_or_after(71)) == (71, 21, 0)

"""The consistency check's pure parts: window and offsets parsing, ranges, normalisation, mapping, counting."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from spark_jobs.check import window as check_window
from spark_jobs.check import job as cc
from spark_jobs.common.job_config import JobInputError, JobTarget
from spark_jobs.check.report import render_html, write_report

BASE = datetime(2024, 5, 1, tzinfo=timezone.utc)
BASE_MS = int(BASE.timestamp() * 1000)


def parse(*extra: str, report: str | None = None, tmp_path=None):
    report = report or str(tmp_path / "r.json")
    return cc._parse_arguments(["--source.bootstrap.servers", "s:9092", "--destination.bootstrap.servers", "d:9092",
                                "--report", report, *extra])


# ------------------------------------------------------------------ timestamps and windows


@pytest.mark.parametrize("text, expected", [
    ("1714521600000", BASE_MS),
    ("2024-05-01T00:00:00Z", BASE_MS),
    ("2024-05-01T00:00:00", BASE_MS),                 # no zone: UTC
    ("2024-05-01", BASE_MS),
    ("2024-05-01T02:00:00+02:00", BASE_MS),
    ("2024-05-01T00:00:00.250Z", BASE_MS + 250),
    ("2024-05-01T00:00:00.007Z", BASE_MS + 7),
    ("2024-05-01T00:00:00.0079Z", BASE_MS + 7),
])
def test_parse_timestamp_epoch_ms_or_iso(text, expected):
    assert check_window.parse_timestamp(text, "--from-timestamp") == expected


@pytest.mark.parametrize("text", ["yesterday", "-5", "1.5", "2024-13-01", ""])
def test_parse_timestamp_rejects_garbage(text):
    with pytest.raises(JobInputError, match=r"^--to-timestamp: .* is neither epoch milliseconds nor an ISO-8601 time$"):
        check_window.parse_timestamp(text, "--to-timestamp")


def test_parse_timestamp_rejects_times_before_the_epoch():
    with pytest.raises(JobInputError) as info:
        check_window.parse_timestamp("1969-12-31T23:59:59.999Z", "--from-timestamp")
    assert str(info.value) == "--from-timestamp: '1969-12-31T23:59:59.999Z' is before 1970-01-01T00:00:00Z"


def test_report_path_is_checked_without_creating_anything(tmp_path):
    cc.check_report_path(tmp_path / "new" / "deeper" / "r.json")
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(JobInputError, match="^--report: cannot write under "):
        cc.check_report_path(tmp_path / "file" / "r.json")
    with pytest.raises(JobInputError, match="is a directory$"):
        cc.check_report_path(tmp_path)


def test_default_window_is_everything(tmp_path):
    args = parse("--topics", "a", tmp_path=tmp_path)
    assert args.window == cc.CheckWindow("all")


def test_timestamp_window_with_one_or_both_bounds(tmp_path):
    both = parse("--topics", "a", "--from-timestamp", "2024-05-01", "--to-timestamp", str(BASE_MS + 1000),
                 tmp_path=tmp_path)
    assert both.window == cc.CheckWindow("timestamps", from_ms=BASE_MS, to_ms=BASE_MS + 1000)
    only_to = parse("--topics", "a", "--to-timestamp", "2024-05-01", tmp_path=tmp_path)
    assert only_to.window == cc.CheckWindow("timestamps", from_ms=None, to_ms=BASE_MS)


@pytest.mark.parametrize("start, end", [("2024-05-02", "2024-05-01"), ("2024-05-01", "2024-05-01")])
def test_from_not_before_to_is_a_bad_window(tmp_path, start, end):
    with pytest.raises(JobInputError) as info:
        parse("--topics", "a", "--from-timestamp", start, "--to-timestamp", end, tmp_path=tmp_path)
    assert str(info.value) == (f"bad window: --from-timestamp {start}T00:00:00.000Z is not before "
                               f"--to-timestamp {end}T00:00:00.000Z")


def test_offsets_cannot_be_combined_with_timestamps(tmp_path):
    with pytest.raises(JobInputError, match="^--offsets cannot be combined with --from-timestamp/--to-timestamp$"):
        parse("--topics", "a", "--offsets", "a:0:0-5", "--from-timestamp", "1", tmp_path=tmp_path)


def test_offsets_give_the_topics_when_none_are_listed(tmp_path):
    args = parse("--offsets", "b:1:5-9,a:0:0-5,b:0:1-2", tmp_path=tmp_path)
    assert args.topics == "b,a"
    assert args.window.offsets == (("b", 1, 5, 9), ("a", 0, 0, 5), ("b", 0, 1, 2))


# ------------------------------------------------------------------ --offsets


def test_parse_offsets():
    assert check_window.parse_offsets(" orders.eu-1:0:0-100 , orders.eu-1:2:50-51,x_y:10:7-8,") == (
        ("orders.eu-1", 0, 0, 100), ("orders.eu-1", 2, 50, 51), ("x_y", 10, 7, 8))


@pytest.mark.parametrize("text, message", [
    ("", "--offsets: no range given (topic:partition:from-to,...)"),
    (" , ", "--offsets: no range given (topic:partition:from-to,...)"),
    ("orders:0", "--offsets: 'orders:0' is not topic:partition:from-to"),
    ("orders:0:5", "--offsets: 'orders:0:5' is not topic:partition:from-to"),
    ("orders:x:1-5", "--offsets: 'orders:x:1-5' is not topic:partition:from-to"),
    ("orders:0:-1-5", "--offsets: 'orders:0:-1-5' is not topic:partition:from-to"),
    ("orders:0:1-5-7", "--offsets: 'orders:0:1-5-7' is not topic:partition:from-to"),
    ("a:b:0:1-5", "--offsets: 'a:b:0:1-5' is not topic:partition:from-to"),
    ("orders:0:9-5", "bad window: --offsets 'orders:0:9-5': from 9 is not below to 5"),
    ("orders:0:5-5", "bad window: --offsets 'orders:0:5-5': from 5 is not below to 5"),
    ("orders:0:1-5,orders:0:7-9", "--offsets: orders:0 is given twice"),
])
def test_parse_offsets_rejects(text, message):
    with pytest.raises(JobInputError) as info:
        check_window.parse_offsets(text)
    assert str(info.value) == message


@pytest.mark.parametrize("extra, message", [
    (["--topics", "a"], "the following arguments are required: --report"),
    (["--topics", "a", "--report", "x.json", "--bogus"], "unrecognized arguments: --bogus"),
    (["--topics", "a", "--report", "x.html"], "--report: give the JSON path; the HTML summary is written beside it"),
])
def test_bad_flags(extra, message):
    with pytest.raises(JobInputError) as info:
        cc._parse_arguments(["--source.bootstrap.servers", "s", "--destination.bootstrap.servers", "d", *extra])
    assert str(info.value) == message


# ------------------------------------------------------------------ ranges


WATERMARKS = {"a": {0: (0, 100), 1: (10, 50)}, "b": {0: (0, 0)}}


def test_ranges_default_to_the_watermarks():
    assert cc.source_ranges(cc.CheckWindow("all"), ["a", "b"], WATERMARKS) == {
        ("a", 0): (0, 100), ("a", 1): (10, 50), ("b", 0): (0, 0)}


def test_ranges_for_a_timestamp_window():
    times = {("a", 0): (20, 30), ("a", 1): (5, 40)}       # a:1 from below its low watermark
    window = cc.CheckWindow("timestamps", from_ms=1, to_ms=2)
    assert cc.source_ranges(window, ["a"], WATERMARKS, times) == {("a", 0): (20, 30), ("a", 1): (10, 40)}
    open_end = {("a", 0): (20, None), ("a", 1): (45, None)}
    assert cc.source_ranges(cc.CheckWindow("timestamps", from_ms=1), ["a"], WATERMARKS, open_end) == {
        ("a", 0): (20, 100), ("a", 1): (45, 50)}


def test_offset_ranges_are_clamped_and_only_listed_partitions_count():
    window = cc.CheckWindow("offsets", offsets=(("a", 1, 0, 70), ("a", 0, 5, 6)))
    assert cc.source_ranges(window, ["a", "b"], WATERMARKS) == {("a", 1): (10, 50), ("a", 0): (5, 6)}
    beyond = cc.CheckWindow("offsets", offsets=(("a", 1, 60, 70),))
    assert cc.source_ranges(beyond, ["a"], WATERMARKS) == {("a", 1): (50, 50)}


@pytest.mark.parametrize("offsets, message", [
    ((("c", 0, 0, 5),), "--offsets: topic 'c' is not among the checked topics"),
    ((("a", 2, 0, 5),), "--offsets: topic 'a' has 2 partitions on the source cluster; 2 is not one"),
])
def test_offset_ranges_must_name_checked_partitions(offsets, message):
    with pytest.raises(JobInputError) as info:
        cc.source_ranges(cc.CheckWindow("offsets", offsets=offsets), ["a", "b"], WATERMARKS)
    assert str(info.value) == message


def test_offset_options_are_exact_json():
    options = cc.offset_options({("t", 1): (5, 9), ("t", 0): (0, 3), ("u", 2): (7, 8)})
    assert json.loads(options["assign"]) == {"t": [0, 1], "u": [2]}
    assert json.loads(options["startingOffsets"]) == {"t": {"0": 0, "1": 5}, "u": {"2": 7}}
    assert json.loads(options["endingOffsets"]) == {"t": {"0": 3, "1": 9}, "u": {"2": 8}}


# ------------------------------------------------------------------ Spark: normalisation


def rows(spark, records):
    """Kafka-source-shaped rows: (topic, partition, offset, key, value, headers[, timestamp ms])."""
    data = []
    for record in records:
        topic, partition, offset, key, value, headers = record[:6]
        ts = record[6] if len(record) > 6 else BASE_MS + offset
        data.append((key, value, topic, partition, offset, datetime.fromtimestamp(ts / 1000, tz=timezone.utc), 0,
                     None if headers is None else [(k, v) for k, v in headers]))
    return spark.createDataFrame(data, cc.KAFKA_SCHEMA)


def digests(spark, records):
    """(normalised key, normalised value, canonical headers) per record, in offset order."""
    normalised = rows(spark, records).select(
        "offset", cc.normalise_schema_id("key").alias("k"), cc.normalise_schema_id("value").alias("v"),
        cc.normalise_headers("headers").alias("h"))
    return [(r.k, r.v, r.h) for r in normalised.orderBy("offset").collect()]


@pytest.mark.spark
def test_schema_id_is_ignored_only_in_registry_framing(spark):
    framed_1 = b"\x00\x00\x00\x00\x07payload"
    framed_2 = b"\x00\x00\x00\x01\x2apayload"
    values = [framed_1, framed_2, b"\x00\x00\x00\x00\x07", b"\x00\x00\x00\x01\x2a",   # 0-3: ids differ only
              b"\x00\x00\x00\x07", b"\x00\x00\x00\x08",                              # 4-5: 4 bytes: compared whole
              b"\x01\x00\x00\x00\x07payload", b"\x01\x00\x00\x01\x2apayload",        # 6-7: no magic byte
              b"\x00payload", b"", None, framed_1]                                     # 8-11
    got = [v for _, v, _ in digests(spark, [("t", 0, i, framed_1, value, None) for i, value in enumerate(values)])]
    assert got[0] == got[1] == got[11]
    assert got[2] == got[3]
    assert got[4] != got[5]
    assert got[6] != got[7]
    assert got[8] != got[0]                           # unframed bytes never equal a framed value minus its id
    assert got[9] is not None and got[9] != got[10] and got[10] is None
    keys = [k for k, _, _ in digests(spark, [("t", 0, 0, framed_1, b"v", None), ("t", 0, 1, framed_2, b"v", None)])]
    assert keys[0] == keys[1]


@pytest.mark.spark
def test_headers_compare_in_order_without_provenance(spark):
    prov = ("mirror.source", b"source:abc:t:0:5")
    headers = [
        [("a", b"1"), ("b", b"2")],
        [("a", b"1"), prov, ("b", b"2")],             # same once provenance is dropped
        [("b", b"2"), ("a", b"1")],                   # order counts
        [("a", b"1"), ("b", b"3")],
        [("a", None), ("b", b"2")],
        [("a", b""), ("b", b"2")],                    # empty value differs from a null one
        None,
        [],
        [prov],
    ]
    got = [h for _, _, h in digests(spark, [("t", 0, i, b"k", b"v", h) for i, h in enumerate(headers)])]
    assert got[0] == got[1]
    assert len({got[0], got[2], got[3], got[4], got[5]}) == 5
    assert got[6] == got[7] == got[8]
    spaced = [h for _, _, h in digests(spark, [("t", 0, 0, b"k", b"v", [("a:b", b"c")]),
                                               ("t", 0, 1, b"k", b"v", [("a", b"b:c")])])]
    assert spaced[0] != spaced[1]


@pytest.mark.spark
def test_content_digest_is_equal_only_when_key_value_and_headers_are(spark):
    records = [
        ("t", 0, 0, b"k", b"v", [("h", b"1")]),
        ("t", 0, 1, b"k", b"v", [("h", b"1"), ("mirror.source", b"a:b:t:0:0")]),
        ("t", 0, 2, None, b"v", [("h", b"1")]),
        ("t", 0, 3, b"", b"v", [("h", b"1")]),
        ("t", 0, 4, b"k", None, [("h", b"1")]),
        ("t", 0, 5, b"k", b"v", None),
        ("t", 0, 6, b"k", b"w", [("h", b"1")]),
    ]
    got = [r.content_d for r in cc.fingerprint(rows(spark, records)).orderBy("offset").collect()]
    assert got[0] == got[1]
    assert len(set(got[1:])) == 6 and all(got)


# ------------------------------------------------------------------ Spark: out of order


@pytest.mark.spark
@pytest.mark.parametrize("destination_order, expected", [
    ([0, 1, 2, 3, 4], 0),
    ([0, 2, 1, 3, 4], 1),                             # a swapped adjacent pair counts 1
    ([0, 1, 3, 4, 2], 1),
    ([3, 0, 1, 2, 4], 3),
    ([4, 3, 2, 1, 0], 4),
    ([0, 1, 3, 4], 0),                                # a missing record is not out of order
])
def test_out_of_order_counts_first_copies_below_the_highest_seen(spark, destination_order, expected):
    data = [("t", 0, offset, None) for offset in range(5)]
    position = {offset: i for i, offset in enumerate(destination_order)}
    data = [(t, p, o, (0, position[o]) if o in position else None) for t, p, o, _ in data]
    outcomes = spark.createDataFrame(
        data, "topic STRING, partition INT, offset BIGINT, first STRUCT<dest_partition: INT, dest_offset: BIGINT>")
    flagged = cc.with_out_of_order(outcomes).filter("out_of_order").count()
    assert flagged == expected


# ------------------------------------------------------------------ Spark: mapping and comparing


def prov(topic, partition, offset, cluster="CLUSTER"):
    return ("mirror.source", f"src:{cluster}:{topic}:{partition}:{offset}".encode())


def check(spark, source_records, destination_records, committed=None, preserve=True, topic_map=None):
    source = cc.fingerprint(rows(spark, source_records))
    destination = cc.fingerprint(rows(spark, destination_records), provenance=True)
    mapped = cc.map_to_source(destination, source, topic_map or {"dst.t": "t"}, preserve, "CLUSTER")
    committed = committed if committed is not None else {}
    # Cached as the job caches them (job._exact_check): the summary and the five example queries read the
    # outcomes once instead of planning and running the whole mapping six times.
    outcomes = cc.record_outcomes(source, mapped, committed).cache()
    try:
        summary = [r.asDict() for r in cc.summarise(outcomes).collect()]
        return summary, cc.offending_examples(outcomes)
    finally:
        outcomes.unpersist()


def source_partition(partition=0, count=10, topic="t"):
    return [(topic, partition, o, f"k{o}".encode(), f"v{o}".encode(), [("h", b"x")]) for o in range(count)]


def copy(record, dest_offset, provenance=True, **changes):
    topic, partition, offset, key, value, headers = record[:6]
    ts = record[6] if len(record) > 6 else BASE_MS + offset
    headers = list(changes.pop("headers", headers) or []) + ([prov(topic, partition, offset)] if provenance else [])
    fields = {"key": key, "value": value, "headers": headers, "partition": partition, **changes}
    return ("dst.t", fields["partition"], dest_offset, fields["key"], fields["value"], fields["headers"], ts)


def summary_of(summary, partition=0):
    row = next(r for r in summary if r["partition"] == partition)
    return {k: row[k] for k in cc.PARTITION_FIELDS}


@pytest.mark.spark
def test_provenance_mapping_counts_every_kind(spark):
    src = source_partition()
    order = [0, 1, 3, 2, 4, 5, 6, 8, 9]               # 7 missing, 2 and 3 swapped
    dst = [copy(src[o], i) for i, o in enumerate(order)]
    dst.append(copy(src[5], len(dst)))                # duplicate, later: not an order problem
    dst.append(copy(src[6], len(dst), value=b"changed"))   # a second, altered copy of 6
    dst[0] = copy(src[0], 0, headers=[("h", b"y")])   # altered headers
    dst.append(copy(("t", 0, 55, b"k", b"v", []), len(dst)))    # outside the window: ignored
    summary, examples = check(spark, src, dst)
    assert summary_of(summary) == {"source_count": 10, "destination_count": 11, "missing": 1, "duplicated": 2,
                                   "altered": 2, "out_of_order": 1, "wrong_schema": 0, "beyond_committed": 0}
    assert examples == {"missing": ["t:0:7"], "duplicated": ["t:0:5", "t:0:6"], "altered": ["t:0:0", "t:0:6"],
                        "out_of_order": ["t:0:2"], "wrong_schema": []}


@pytest.mark.spark
def test_records_beyond_the_committed_offset_are_not_missing(spark):
    src = source_partition(count=10) + source_partition(partition=1, count=4)
    dst = [copy(r, i) for i, r in enumerate(src[:6])] + [copy(r, i) for i, r in enumerate(src[10:12])]
    summary, _ = check(spark, src, dst, committed={("t", 0): 5, ("t", 1): None})
    assert summary_of(summary, 0) == {"source_count": 10, "destination_count": 6, "missing": 0, "duplicated": 0,
                                      "altered": 0, "out_of_order": 0, "wrong_schema": 0, "beyond_committed": 5}
    assert summary_of(summary, 1)["missing"] == 2     # no committed offset: nothing excluded


@pytest.mark.spark
def test_schema_ids_may_differ_between_clusters(spark):
    src = [("t", 0, 0, b"\x00\x00\x00\x00\x01k", b"\x00\x00\x00\x00\x02v", [])]
    dst = [copy(src[0], 0, key=b"\x00\x00\x00\x00\x09k", value=b"\x00\x00\x00\x00\x0av")]
    summary, _ = check(spark, src, dst)
    assert summary_of(summary)["altered"] == 0


@pytest.mark.spark
def test_unusable_provenance_falls_back_to_positional(spark):
    src = source_partition(count=3)
    dst = [
        copy(src[0], 0, provenance=False, headers=[prov("t", 0, 0, cluster="OTHER")]),   # another cluster's
        copy(src[1], 1, provenance=False, headers=[("mirror.source", b"garbage")]),
        copy(src[2], 2, provenance=False, headers=[prov("other-topic", 0, 2)]),
    ]
    summary, _ = check(spark, [(*r[:5], []) for r in src], dst)
    assert summary_of(summary) == {"source_count": 3, "destination_count": 3, "missing": 0, "duplicated": 0,
                                   "altered": 0, "out_of_order": 0, "wrong_schema": 0, "beyond_committed": 0}


@pytest.mark.spark
def test_positional_mapping_by_key_and_timestamp(spark):
    same = BASE_MS + 500
    src = [("t", 0, o, f"k{o}".encode(), f"v{o}".encode(), [], BASE_MS + o) for o in range(6)]
    src += [("t", 0, 6 + i, b"tie", f"tie{i}".encode(), [], same) for i in range(3)]   # same key and timestamp
    src += [("t", 1, 0, b"k0", b"p1", [], BASE_MS)]   # same key and timestamp as t:0:0, other partition
    plain = lambda r, i, **kw: copy(r, i, provenance=False, **kw)  # noqa: E731
    dst = [plain(src[o], i) for i, o in enumerate([0, 1, 2, 4, 3, 6, 7, 8])]   # 5 missing, 3/4 swapped
    dst.append(plain(src[6], len(dst)))              # a 4th tie copy cycles back to the first: a duplicate
    dst.append(plain(src[9], 0, partition=1))
    summary, examples = check(spark, src, dst)
    assert summary_of(summary, 0) == {"source_count": 9, "destination_count": 9, "missing": 1, "duplicated": 1,
                                      "altered": 0, "out_of_order": 1, "wrong_schema": 0, "beyond_committed": 0}
    assert summary_of(summary, 1)["missing"] == 0 and summary_of(summary, 1)["altered"] == 0
    assert examples["missing"] == ["t:0:5"] and examples["duplicated"] == ["t:0:6"]


@pytest.mark.spark
def test_positional_mapping_without_preserved_partitions(spark):
    src = source_partition(count=3) + source_partition(partition=1, count=3)
    src = [(t, p, o, f"k{p}{o}".encode(), v, h) for t, p, o, k, v, h in src]
    dst = [copy(r, i, provenance=False, partition=(r[1] + 1) % 2) for i, r in enumerate(src) if r[:3] != ("t", 1, 2)]
    summary, examples = check(spark, src, dst, preserve=False)
    assert [summary_of(summary, p)["missing"] for p in (0, 1)] == [0, 1]
    assert examples["missing"] == ["t:1:2"]


# ------------------------------------------------------------------ report


def test_complete_partitions_fills_empty_ones():
    got = cc.complete_partitions([{"topic": "t", "partition": 1, "source_count": 3, "destination_count": 3,
                                   "missing": 0, "duplicated": 0, "altered": 0, "out_of_order": 0,
                                   "beyond_committed": 0}], {("t", 0): (5, 5), ("t", 1): (0, 3)})
    assert [(r["partition"], r["source_count"]) for r in got] == [(0, 0), (1, 3)]
    assert set(got[0]) == {"topic", "partition", *cc.PARTITION_FIELDS}


def test_html_summary_shows_status_partitions_and_examples():
    report = {
        "status": "inconsistent",
        "totals": {"checked": 30, "missing": 25, "duplicated": 0, "altered": 0, "out_of_order": 0},
        "partitions": [{"topic": "<t>", "partition": 0, "source_count": 30, "destination_count": 5, "missing": 25,
                        "duplicated": 0, "altered": 0, "out_of_order": 0, "wrong_schema": 0, "beyond_committed": 0}],
        "window": {"kind": "all", "ranges": [], "open_transactions": [
            {"topic": "<t>", "partition": 0, "last_stable_offset": 22, "high_watermark": 27,
             "reason": "stopped at the last stable offset (a transaction is open)"}]},
        "source": {"bootstrap_servers": "s:1", "topics": ["<t>"], "group_id": None},
        "destination": {"bootstrap_servers": "d:1", "topics": ["<t>"]},
        "generated_at": "2024-05-01T00:00:00+00:00",
        "examples": {"missing": [f"<t>:0:{o}" for o in range(20)], "duplicated": []},
    }
    html = render_html(report)
    assert '<span class="status inconsistent">inconsistent</span>' in html
    assert "&lt;t&gt;:0:19" in html and "<t>" not in html
    assert "... and 5 more" in html
    assert "duplicated (" not in html
    assert ("&lt;t&gt;[0] stopped at the last stable offset (a transaction is open): last stable offset 22, "
            "high watermark 27<br>") in html


def plan(committed=None) -> cc.CheckPlan:
    ranges = {("t", 0): (0, 10), ("t", 1): (5, 5)}
    return cc.CheckPlan(
        target=JobTarget("s:1", "d:1", ("t",), group_id="g"), window=cc.CheckWindow("all"), topics=["t"],
        topic_map={"t": "t"}, source_ranges=ranges, destination_ranges=ranges,
        committed=committed or {("t", 0): 8, ("t", 1): None}, source_cluster_id="C", report=None)


def partition_rows(**counts):
    return cc.complete_partitions([{"topic": "t", "partition": 0, "source_count": 10, "destination_count": 10,
                                    **counts}], {("t", 0): (0, 10), ("t", 1): (5, 5)})


def test_report_is_ok_only_without_any_problem():
    clean = cc.build_report(plan(), partition_rows(beyond_committed=2), {}, now=0)
    assert clean["status"] == "ok"
    assert clean["totals"] == {"checked": 10, "missing": 0, "duplicated": 0, "altered": 0, "out_of_order": 0,
                               "wrong_schema": 0}
    assert clean["schemas"]["checked"] is False      # no registries in the plan: ids not proven, and said so
    assert clean["window"]["ranges"][0] == {"topic": "t", "partition": 0, "from": 0, "to": 10, "committed": 8}
    assert clean["generated_at"] == "1970-01-01T00:00:00+00:00"
    for kind in cc.KINDS:
        report = cc.build_report(plan(), partition_rows(**{kind: 1}), {kind: ["t:0:3"]}, now=0)
        assert report["status"] == "inconsistent" and report["totals"][kind] == 1
        assert report["examples"][kind] == ["t:0:3"]


def test_a_check_that_read_no_record_says_nothing_to_check():
    """Zero source records compared proves nothing: its own verdict, not "ok", not green, exit 0."""
    empty = cc.complete_partitions([], {("t", 0): (0, 0), ("t", 1): (5, 5)})
    report = cc.build_report(plan(), empty, {}, now=0)
    assert report["status"] == "nothing to check" and report["totals"]["checked"] == 0
    assert cc.exit_code(report) == 0
    html = render_html(report)
    assert '<span class="status nothing-to-check">nothing to check</span>' in html
    assert "No source record was in the window" in html
    assert ">ok<" not in html and "status ok" not in html
    # A problem wins even over an empty source window (the destination holds records it should not).
    assert cc.build_report(plan(), [{**empty[0], "duplicated": 1}, empty[1]], {}, now=0)["status"] == "inconsistent"
    assert cc.exit_code({"status": "inconsistent"}) == 1 and cc.exit_code({"status": "ok"}) == 0


def test_write_report_writes_json_and_html_beside_it(tmp_path):
    report = cc.build_report(plan(), partition_rows(missing=1), {"missing": ["t:0:4"]}, now=0)
    html = write_report(report, tmp_path / "out" / "check.json")
    assert html == tmp_path / "out" / "check.html"
    assert json.loads((tmp_path / "out" / "check.json").read_text()) == report
    assert '<span class="status inconsistent">inconsistent</span>' in html.read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["check.html", "check.json"]


def test_a_session_refused_for_its_protection_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """A Spark session already running in the process without RPC protection (session.py refuses it after
    creating it). Before: the check caught only Spark's and the read's errors around create_session, so the
    refusal (a JobInputError) ended in a traceback."""
    from spark_jobs.common.cluster_security import UnprotectedCredentials
    from types import SimpleNamespace

    from tests.unit.troubleshooting_cases import SPEC

    (tmp_path / "spec.yaml").write_text(SPEC)
    monkeypatch.setattr(cc, "plan_check", lambda args: SimpleNamespace(target=None))  # the clusters: not asked
    monkeypatch.setattr(cc, "target_secrets", lambda target: ())

    def refused(*_args, **_kwargs):
        raise UnprotectedCredentials("refused: the mirror's credentials would reach spark://h:7077 unprotected: "
                                     "spark.authenticate missing from the running session")

    monkeypatch.setattr(cc, "create_session", refused)
    code = cc.main(["--config", str(tmp_path / "spec.yaml"), "--report", str(tmp_path / "r.json")])
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]
    assert code == 2 and lines == [f"{cc.PROG}: refused: the mirror's credentials would reach spark://h:7077 "
                                   "unprotected: spark.authenticate missing from the running session"], lines

"""The check's proof of schema ids (spark_jobs/check/schemas.py, issue 43 defect 3) with in-memory registries:
a framed copy is the same only when its body is and its id names, on the destination, the schema the source id
names on the source; otherwise it is `wrong_schema`, apart from `altered`. And the epoch-0 timestamp rule of
positional mapping (issue 43 defect 9, the check's side)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

import spark_jobs.check.job as cc
from mirror_worker.batch_api import EPOCH_ZERO_STAMP_MS, expected_destination_timestamp
from mirror_worker.schemas.registry import SubjectVersion
from spark_jobs.check.compacted import compare_latest
from spark_jobs.check.digest_rows import PartitionDigest
from spark_jobs.check.digests import recheck_spans
from spark_jobs.check.records import expected_timestamp
from spark_jobs.check.report import render_html
from spark_jobs.check.schemas import SchemaCheck, framed_fields, schema_check, with_schema_meaning
from tests.unit.spark_jobs.check.test_job import copy, rows, summary_of

TIMESTAMP = {"type": "long", "logicalType": "timestamp-millis"}
MILLIS = json.dumps({"type": "record", "name": "E", "fields": [{"name": "ts", "type": TIMESTAMP}]})
PLAIN = json.dumps({"type": "record", "name": "E", "fields": [{"name": "ts", "type": "long"}]})
REGISTRIES = {  # the same schema is 1 on the source and 7 on the destination; 8 is another schema there
    "src-url": {1: MILLIS, 2: PLAIN},
    "dst-url": {7: MILLIS, 8: PLAIN, 1: PLAIN},
}


class FakeRegistry:
    def __init__(self, config, role):
        self.schemas, self.role = REGISTRIES[config["url"]], role

    def schema(self, schema_id):
        text = self.schemas.get(schema_id)
        return None if text is None else SubjectVersion(0, schema_id, "AVRO", text)

    def version(self, subject, number):
        return None

    def has_subject(self, subject):
        return subject in ("t-value", "u-key")


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


CHECK = SchemaCheck({"url": "src-url"}, {"url": "dst-url"}, {"t": (False, True)})


# ------------------------------------------------------------------ which fields are framed (pure)


def test_framed_fields_follow_the_workers_rewrite_rule():
    subjects = {"t-value", "u-key", "u-value"}.__contains__
    assert framed_fields("auto", ["t", "u", "raw"], subjects) == {
        "t": (False, True), "u": (True, True), "raw": (False, False)}
    assert framed_fields("force", ["raw"], subjects) == {"raw": (True, True)}
    assert framed_fields("off", ["u"], subjects) == {"u": (False, False)}


def test_no_registries_no_schema_check():
    assert schema_check(None, ["t"]) is None
    assert schema_check(SimpleNamespace(syncs_schemas=False), ["t"]) is None
    mirror = SimpleNamespace(syncs_schemas=True, sources=[object()], source_registry=lambda s: {"url": "src-url"},
                             destination_registry={"url": "dst-url"}, schema_id_rewrite="auto")
    check = schema_check(mirror, ["t", "u"], FakeRegistry)
    assert check.fields == {"t": (False, True), "u": (True, False)} and check.framed_topics() == {"t", "u"}
    assert check.summary() == {"checked": True, "schema_id_rewrite": "auto", "framed_keys": ["u"],
                               "framed_values": ["t"]}


# ------------------------------------------------------------------ the exact path


def exact(spark, source_records, destination_records, check=CHECK, preserve=True):
    source = cc.fingerprint(rows(spark, source_records))
    destination = cc.fingerprint(rows(spark, destination_records), provenance=True)
    source, destination = with_schema_meaning(source, destination, check, {"dst.t": "t"}, FakeRegistry)
    mapped = cc.map_to_source(destination, source, {"dst.t": "t"}, preserve, "CLUSTER")
    outcomes = cc.record_outcomes(source, mapped, {}).cache()  # as the job does: read once by the six queries
    try:
        return [r.asDict() for r in cc.summarise(outcomes).collect()], cc.offending_examples(outcomes)
    finally:
        outcomes.unpersist()


def source_records():
    return [("t", 0, o, f"k{o}".encode(), framed(1, f"body{o}".encode()), []) for o in range(6)]


@pytest.mark.spark
def test_ids_naming_other_schemas_are_wrong_schema_not_altered(spark):
    src = source_records()
    ids = {0: 7, 1: 7, 2: 8, 3: 1, 4: 12345, 5: 7}     # 8: another schema; 1: another schema there; 12345: unknown
    dst = [copy(r, i, value=framed(ids[i], r[4][5:])) for i, r in enumerate(src)]
    dst[5] = copy(src[5], 5, value=framed(7, b"changed"))   # the right schema, another body: altered
    summary, examples = exact(spark, src, dst)
    assert summary_of(summary) == {"source_count": 6, "destination_count": 6, "missing": 0, "duplicated": 0,
                                   "altered": 1, "out_of_order": 0, "wrong_schema": 3, "beyond_committed": 0}
    assert examples["wrong_schema"] == ["t:0:2", "t:0:3", "t:0:4"] and examples["altered"] == ["t:0:5"]


@pytest.mark.spark
def test_without_registries_ids_are_left_out_as_before(spark):
    src = source_records()
    dst = [copy(r, i, value=framed(8, r[4][5:])) for i, r in enumerate(src)]
    summary, _ = exact(spark, src, dst, check=None)
    assert summary_of(summary)["wrong_schema"] == 0 and summary_of(summary)["altered"] == 0


@pytest.mark.spark
def test_fields_that_are_not_framed_compare_as_before(spark):
    # Keys start with byte 0 but the topic has no key subject: the worker copies them as they are, and the
    # check leaves their bytes 1..4 out as before.
    src = [("t", 0, 0, framed(3, b"k"), framed(1, b"v"), [])]
    dst = [copy(src[0], 0, key=framed(4, b"k"), value=framed(7, b"v"))]
    summary, _ = exact(spark, src, dst)
    assert summary_of(summary)["wrong_schema"] == 0 and summary_of(summary)["altered"] == 0


@pytest.mark.spark
def test_positionally_mapped_copies_prove_their_ids_too(spark):
    src = source_records()[:2]
    dst = [copy(src[0], 0, provenance=False, value=framed(7, b"body0")),
           copy(src[1], 1, provenance=False, value=framed(8, b"body1"))]
    summary, examples = exact(spark, src, dst)
    assert summary_of(summary)["wrong_schema"] == 1 and examples["wrong_schema"] == ["t:0:1"]


# ------------------------------------------------------------------ compacted mode and the digest pass


@pytest.mark.spark
def test_compacted_mode_counts_wrong_schema(spark):
    src = [("t", 0, 0, b"a", framed(1, b"1"), None), ("t", 0, 1, b"b", framed(1, b"2"), None),
           ("t", 0, 2, b"c", framed(1, b"3"), None)]
    dst = [("dst.t", 0, 0, b"a", framed(7, b"1"), None), ("dst.t", 0, 1, b"b", framed(8, b"2"), None),
           ("dst.t", 0, 2, b"c", framed(7, b"x"), None)]
    counts, examples = compare_latest(rows(spark, src), rows(spark, dst), {"dst.t": "t"}, True, {("t", 0): None},
                                      CHECK, FakeRegistry)
    assert {k: counts[("t", 0)][k] for k in ("missing", "altered", "wrong_schema")} == {
        "missing": 0, "altered": 1, "wrong_schema": 1}
    assert examples["wrong_schema"] == ["t:0:1"] and examples["altered"] == ["t:0:2"]


def test_framed_topics_are_compared_record_by_record_whole():
    # The digest readers hash bodies without the ids: a window they call equal proves nothing about the ids.
    ranges = {("t", 0): (0, 100), ("u", 0): (0, 100)}
    digests = {tp: PartitionDigest(source_count=100, windows=2) for tp in ranges}
    assert recheck_spans(ranges, digests, 50, True, schema_topics={"t"}) == {("t", 0): (0, 100, "schemas")}


def test_the_report_counts_wrong_schema_and_says_what_was_proven():
    from tests.unit.spark_jobs.check.test_job import partition_rows, plan

    proven = cc.build_report(replace(plan(), schemas=CHECK), partition_rows(wrong_schema=2),
                             {"wrong_schema": ["t:0:3", "t:0:4"]}, now=0)
    assert proven["status"] == "inconsistent" and proven["totals"]["wrong_schema"] == 2
    assert proven["schemas"] == {"checked": True, "schema_id_rewrite": "auto", "framed_keys": [],
                                 "framed_values": ["t"]}
    html = render_html(proven)
    assert "<h3>wrong schema (2)</h3>" in html and "<th>wrong schema</th>" in html
    assert "schema ids: proven against both registries" in html
    unproven = render_html(cc.build_report(plan(), partition_rows(), {}, now=0))
    assert "schema ids: not proven: no schema registries in the mirror spec" in unproven


# ------------------------------------------------------------------ epoch-0 timestamps (defect 9)


@pytest.mark.spark
def test_expected_timestamp_is_the_workers_rule(spark):
    from pyspark.sql import functions as F

    stamps = [0, 1, 2, 1_714_521_600_000]
    df = spark.createDataFrame([(s,) for s in stamps], "ms BIGINT").select(
        "ms", F.unix_millis(expected_timestamp(F.timestamp_millis("ms"))).alias("expected"))
    assert {r.ms: r.expected for r in df.collect()} == {s: expected_destination_timestamp(s) for s in stamps}
    assert expected_destination_timestamp(0) == EPOCH_ZERO_STAMP_MS


@pytest.mark.spark
@pytest.mark.parametrize("preserve", [True, False])
def test_a_source_record_at_the_epoch_matches_its_copy_stamped_1_ms(spark, preserve):
    src = [("t", 0, 0, b"k", b"v0", [], 0), ("t", 0, 1, b"k", b"v1", [], 5)]
    dst = [(*copy(src[0], 0, provenance=False)[:6], EPOCH_ZERO_STAMP_MS), copy(src[1], 1, provenance=False)]
    summary, _ = exact(spark, src, dst, check=None, preserve=preserve)
    assert summary_of(summary) == {"source_count": 2, "destination_count": 2, "missing": 0, "duplicated": 0,
                                   "altered": 0, "out_of_order": 0, "wrong_schema": 0, "beyond_committed": 0}

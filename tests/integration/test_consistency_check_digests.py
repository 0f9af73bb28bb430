"""The consistency check's digest-first pass on the real stack: only what differs is compared record by record."""

from __future__ import annotations

import pytest

from tests.integration.test_consistency_check import (
    PARTITIONS, _Altered, assert_html, cluster_id, make_source, mirror_copy, run_check, source_records, zero_counts,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # the check's CLI starts Spark

PER_PARTITION, WINDOW = 2000, 100             # 20 windows per partition


@pytest.fixture(scope="module")
def differing(stack):
    """A source topic of 2000 records per partition and its provenance-headed copy with one altered and one lost
    record in window 12 of partition 1 and two records swapped in partition 2. The check only reads it: each
    reader's run checks this one copy (building it took three produce-and-read rounds of 6000 records)."""
    import uuid

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"cc-digest-{uuid.uuid4().hex[:12]}"
    messages = make_source(src, topic, source_records(per_partition=PER_PARTITION))
    altered, lost = (1, 1234), (1, 1250)      # both in window 12 of partition 1
    swapped = (2, 1500)                       # 1500 and 1501 change places: same window, same digests
    copies = []
    for p in range(PARTITIONS):
        ordered = list(messages[p])
        if p == swapped[0]:
            i = swapped[1]
            ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
        for m in ordered:
            coord = (p, m.offset())
            if coord != lost:
                copies.append(_Altered(m) if coord == altered else m)
    mirror_copy(dst, "dc1." + topic, copies, cluster_id(src))
    return topic


@pytest.mark.parametrize("reader", ["jvm", "librdkafka", "spark"])
def test_only_the_differing_window_is_compared_record_by_record(stack, differing, tmp_path, reader):
    topic = differing
    run = run_check(stack, tmp_path, "--topics", topic, "--prefix", "dc1.", "--digest-window", str(WINDOW),
                    "--digest-reader", reader)

    assert run.rc == 1, run.stderr[-3000:]
    read = [e for e in run.logs() if e.get("msg") in ("digest pass read with librdkafka", "digest pass read on the JVM")]
    assert [(e["msg"].rsplit(" ", 1)[-1], e["tasks"]) for e in read] == (
        [] if reader == "spark" else [(reader.replace("jvm", "JVM"), 2 * PARTITIONS)])
    assert run.report["totals"] == {"checked": PARTITIONS * PER_PARTITION, "missing": 1, "duplicated": 0,
                                    "altered": 1, "out_of_order": 1, "wrong_schema": 0}
    assert run.counts(topic, 0) == zero_counts(PER_PARTITION)
    assert run.counts(topic, 1) == zero_counts(PER_PARTITION, destination_count=PER_PARTITION - 1, missing=1,
                                               altered=1)
    assert run.counts(topic, 2) == zero_counts(PER_PARTITION, out_of_order=1)
    assert run.report["examples"] == {"missing": [f"{topic}:1:1250"], "duplicated": [],
                                      "altered": [f"{topic}:1:1234"], "out_of_order": [f"{topic}:2:1500"],
                                      "wrong_schema": []}
    digest = run.report["digest"]
    assert digest["window_offsets"] == WINDOW
    by_partition = {p["partition"]: p for p in digest["partitions"]}
    assert by_partition[0] == {"topic": topic, "partition": 0, "windows": 20, "windows_differing": 0,
                               "differing_windows": [], "windows_by_digest": 20, "windows_record_by_record": 0,
                               "record_by_record": None}
    assert by_partition[1] == {"topic": topic, "partition": 1, "windows": 20, "windows_differing": 1,
                               "differing_windows": [12], "windows_by_digest": 19, "windows_record_by_record": 1,
                               "record_by_record": {"from": 1200, "to": 1300, "reason": "windows"}}
    assert by_partition[2]["windows_differing"] == 0
    assert by_partition[2]["record_by_record"] == {"from": 0, "to": PER_PARTITION, "reason": "order"}
    assert (digest["windows"], digest["windows_by_digest"], digest["records_record_by_record"]) == (60, 39, 2100)
    exact = [e for e in run.logs() if e.get("msg") == "destination read for the exact check"]
    assert [e["records"] for e in exact] == [100 + PER_PARTITION]
    assert_html(run)
    html = run.report_path.with_suffix(".html").read_text()
    assert html.count("<svg") == PARTITIONS and html.count('class="differs"') == 1


def test_a_clean_copy_needs_no_record_by_record_pass(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cc-digest-clean")
    messages = make_source(src, topic, source_records(per_partition=300))
    mirror_copy(dst, "dc1." + topic, [m for p in range(PARTITIONS) for m in messages[p]], cluster_id(src))

    run = run_check(stack, tmp_path, "--topics", topic, "--prefix", "dc1.", "--digest-window", str(WINDOW))

    assert run.rc == 0, run.stderr[-3000:]
    assert [run.counts(topic, p) for p in range(PARTITIONS)] == [zero_counts(300)] * PARTITIONS
    assert (run.report["digest"]["windows"], run.report["digest"]["windows_by_digest"]) == (9, 9)
    assert not [e for e in run.logs() if e.get("msg") == "destination read for the exact check"]
    assert [e["tasks"] for e in run.logs() if e.get("msg") == "digest pass read on the JVM"] == [2 * PARTITIONS]

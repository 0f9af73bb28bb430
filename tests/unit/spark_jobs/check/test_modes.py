"""The consistency check's mode per topic (spark_jobs/check/modes.py): chosen from each source topic's
cleanup.policy under --mode auto, forced by --mode records|compacted; narrowed plans; the report names them."""

from __future__ import annotations

import pytest

from spark_jobs.check import job as cc
from spark_jobs.check.modes import TopicMode, choose_modes, topic_modes
from spark_jobs.check.plan import CheckPlan
from spark_jobs.check.report import render_html
from spark_jobs.common.job_config import JobTarget
from spark_jobs.common.stable_offsets import OpenTransaction
from tests.unit.spark_jobs.check.test_job import parse


@pytest.mark.parametrize("configs, mode, reason", [
    ({"cleanup.policy": "compact"}, "compacted", "cleanup.policy=compact set on the topic: the latest value per key"),
    ({"cleanup.policy": "compact,delete"}, "compacted",
     "cleanup.policy=compact,delete set on the topic: the latest value per key"),
    ({"cleanup.policy": "delete, compact"}, "compacted",
     "cleanup.policy=delete, compact set on the topic: the latest value per key"),
    ({"cleanup.policy": "delete"}, "records", "cleanup.policy=delete set on the topic: every record"),
    ({"retention.ms": "-1"}, "records", "cleanup.policy not set on the topic (the broker's default): every record"),
    (None, "records", "topic configs not readable: every record"),
])
def test_auto_follows_each_topics_cleanup_policy(configs, mode, reason):
    found = {"t": configs} if configs is not None else {}
    assert choose_modes("auto", ["t"], found) == {"t": TopicMode(mode, reason)}


@pytest.mark.parametrize("forced", ["records", "compacted"])
def test_a_forced_mode_applies_to_every_topic_whatever_its_policy(forced):
    configs = {"a": {"cleanup.policy": "compact"}, "b": {"cleanup.policy": "delete"}}
    assert choose_modes(forced, ["a", "b"], configs) == {
        "a": TopicMode(forced, f"--mode {forced}"), "b": TopicMode(forced, f"--mode {forced}")}


def test_topic_configs_are_read_only_in_auto_mode():
    class Admin:
        def describe_configs(self, *args, **kwargs):
            raise AssertionError("a forced mode reads no config")

    assert topic_modes(Admin(), "compacted", ["t"], 1.0) == {"t": TopicMode("compacted", "--mode compacted")}


def test_auto_is_the_default_and_the_modes_are_checked(tmp_path):
    assert parse("--topics", "t", tmp_path=tmp_path).mode == "auto"
    assert parse("--topics", "t", "--mode", "records", tmp_path=tmp_path).mode == "records"
    with pytest.raises(cc.JobInputError, match="--mode: invalid choice: 'latest'"):
        parse("--topics", "t", "--mode", "latest", tmp_path=tmp_path)


def _plan() -> CheckPlan:
    ranges = {("a", 0): (0, 10), ("b", 0): (0, 5), ("b", 1): (2, 4)}
    return CheckPlan(
        target=JobTarget("s:1", "d:1", ("a", "b"), group_id="g"), window=cc.CheckWindow("all"), topics=["a", "b"],
        topic_map={"m.a": "a", "m.b": "b"}, source_ranges=ranges,
        destination_ranges={("m.a", 0): (0, 10), ("m.b", 0): (0, 9), ("m.b", 1): (0, 2)},
        committed={("a", 0): 8, ("b", 0): None, ("b", 1): 3}, source_cluster_id="C", report=None,
        open_transactions=[OpenTransaction("b", 1, 4, 6)],
        modes={"a": TopicMode("records", "r"), "b": TopicMode("compacted", "c")})


def test_a_plan_narrowed_to_some_topics_keeps_only_theirs():
    narrowed = _plan().only(["b"])
    assert narrowed.topics == ["b"] and narrowed.topic_map == {"m.b": "b"}
    assert narrowed.source_ranges == {("b", 0): (0, 5), ("b", 1): (2, 4)}
    assert narrowed.destination_ranges == {("m.b", 0): (0, 9), ("m.b", 1): (0, 2)}
    assert narrowed.committed == {("b", 0): None, ("b", 1): 3}
    assert narrowed.open_transactions == [OpenTransaction("b", 1, 4, 6)]
    assert narrowed.modes == {"b": TopicMode("compacted", "c")} and narrowed.mode_of("b") == "compacted"


def test_the_report_names_each_topics_mode_and_why_in_json_and_html():
    plan = _plan()
    rows = cc.complete_partitions([], plan.source_ranges)
    report = cc.build_report(plan, rows, {}, now=0)
    assert report["mode"] == "auto"
    assert report["modes"] == {"a": {"mode": "records", "reason": "r"}, "b": {"mode": "compacted", "reason": "c"}}
    html = render_html(report)
    assert "<h2>Topics (mode auto)</h2>" in html
    assert "<tr><td>a</td><td>records</td><td>r</td></tr><tr><td>b</td><td>compacted</td><td>c</td></tr>" in html

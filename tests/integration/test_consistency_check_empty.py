"""The consistency check over topics that hold no record yet (a demo's verify before its first order): it says
"nothing to check", in the report, its HTML and the exit code, never "ok"."""

from __future__ import annotations

import pytest

from tests.integration.test_consistency_check import KEEP, PARTITIONS, run_check, zero_counts
from tests.kafka_util import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # the check's CLI starts Spark


def test_a_check_of_empty_topics_says_nothing_to_check(stack, topic_name, tmp_path):
    topic = topic_name("cc-empty")
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=PARTITIONS, config=KEEP)
    create_topic(stack["destination"].kafka.bootstrap_servers, "dc1." + topic, partitions=PARTITIONS, config=KEEP)

    run = run_check(stack, tmp_path, "--topics", topic, "--prefix", "dc1.")

    assert run.rc == 0, run.stderr[-3000:]           # nothing wrong was found: the task is not failed
    assert run.report["status"] == "nothing to check"
    assert run.report["totals"]["checked"] == 0
    assert [run.counts(topic, p) for p in range(PARTITIONS)] == [zero_counts(0)] * PARTITIONS
    html = run.report_path.with_suffix(".html").read_text()
    assert '<span class="status nothing-to-check">nothing to check</span>' in html
    assert "status ok" not in html and "<title>Consistency check: ok" not in html
    (finished,) = [e for e in run.logs() if e.get("msg") == "check finished"]
    assert finished["status"] == "nothing to check"

"""The failover runbook DAG without servers: its shape per spec mirror, the group selection, the impact
summary the approver reads, the apply task's one-line refusal and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror_airflow.failover import (
    GroupSelectionError, failover_report, group_impact, impact_markdown, not_applied_message, not_mirrored,
    report_markdown, select_groups,
)
from mirror_worker.dr.offset_translation import GroupActiveError
from tests.unit.mirror_airflow.test_dagbag import HEAD, _dagbag, _structure, dags_dir  # noqa: F401  (fixture)

FAILOVER = {"impact": ["approve"], "approve": ["stop_mirror"], "stop_mirror": ["apply_offsets"],
            "apply_offsets": ["report"], "report": []}

SPEC = HEAD + """
    mirrors:
      - name: orders
        whitelist: "orders"
        preserve-partitions: true
        airflow: {api-conn-id: my_api, verify-report-dir: /var/reports}
      - name: logs
        whitelist: "logs"
"""


def test_a_preserve_partitions_mirror_gets_a_manual_failover_dag(tmp_path, dags_dir, monkeypatch):  # noqa: F811
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    from mirror_airflow.dag_factory import render

    spec = tmp_path / "mirrors.yaml"
    spec.write_text(SPEC)
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert bag.import_errors == {}
    dag = bag.dags["mirror__orders__failover"]
    assert _structure(dag) == FAILOVER
    assert dag.schedule is None and dag.max_active_runs == 1 and dag.is_paused_upon_creation is False
    assert set(dag.params.keys()) == {"groups", "group_pattern", "source"}
    approve = dag.get_task("approve")
    assert isinstance(approve, ApprovalOperator) and approve.ignore_downstream_trigger_rules is True
    assert "xcom_pull(task_ids='impact', key='summary')" in approve.body
    assert dag.get_task("stop_mirror").lifecycle_dag_id == "mirror__orders"
    assert dag.get_task("stop_mirror").api_conn_id == "my_api"
    report = dag.get_task("report")
    assert report.trigger_rule == "all_done" and report.report_dir == "/var/reports"
    # Translation needs destination partition = source partition: no failover DAG otherwise.
    assert "mirror__logs__failover" not in bag.dag_ids and "mirror__logs" in bag.dag_ids


@pytest.mark.parametrize("ids, pattern, expected", [
    ("b, a", "", ["a", "b"]),
    (["a"], "", ["a"]),
    ("", r"app-.*", ["app-1", "app-2"]),
    ("a", r"app-1", ["a", "app-1"]),
    ("", r"app", []),                 # a full match: "app" selects no "app-1"
    ("", r".*", ["a", "app-1", "app-2"]),  # the mirror's own group is never selected by a regex
])
def test_group_selection(ids, pattern, expected):
    available = ["a", "app-1", "app-2", "mirror.group"]
    if not expected:
        with pytest.raises(GroupSelectionError, match="no consumer group selected"):
            select_groups(ids, pattern, available, {"mirror.group"})
        return
    assert select_groups(ids, pattern, available, {"mirror.group"}) == expected


def test_group_selection_refuses_the_mirrors_group_and_a_bad_regex():
    with pytest.raises(GroupSelectionError, match="group mirror.group: the mirror's own group"):
        select_groups("mirror.group", "", [], {"mirror.group"})
    with pytest.raises(GroupSelectionError, match=r"param group_pattern: not a regex .*'app\['"):
        select_groups("", "app[", ["app"], set())


def _translation(group: str = "app") -> dict:
    """offset_translation.report's shape for two partitions: one exact, one from the offset sync."""
    return {"mirror": "orders", "group": group, "applied": False, "offsets": [
        {"topic": "dc1.orders", "partition": 0, "offset": 480, "source_topic": "orders", "source_offset": 500,
         "method": "provenance", "may_reread": 0, "end_offset": 990, "last_mirrored_source_offset": 989, "sync": None},
        {"topic": "dc1.orders", "partition": 1, "offset": 1200, "source_topic": "orders", "source_offset": 1250,
         "method": "offset-sync", "may_reread": 30, "end_offset": 1230, "last_mirrored_source_offset": None,
         "sync": {"source_offset": 1240, "destination_offset": 1200}},
    ], "untranslated": [{"source_topic": "orders", "partition": 2, "source_offset": 7,
                         "reason": "orders[2] does not exist on the destination"}]}


def test_impact_per_partition_and_totals():
    impact = group_impact(_translation(), {("orders", 0): 1000, ("orders", 1): 1300}, destination_members=0)
    first, second = impact["partitions"]
    assert (first["committed"], first["offset"], first["may_reread"], first["not_mirrored"]) == (500, 480, 0, 10)
    assert second["not_mirrored"] is None  # no provenance header: nothing names the source offset
    assert (impact["may_reread"], impact["not_mirrored"]) == (30, None)
    assert not_mirrored(1000, 999) == 0 and not_mirrored(1000, None) is None and not_mirrored(None, 5) is None


def test_impact_summary_the_approver_reads():
    impact = {"mirror": "orders", "groups": [
        group_impact(_translation(), {("orders", 0): 1000, ("orders", 1): 1300}, destination_members=0),
        group_impact({**_translation("busy"), "offsets": [], "untranslated": []}, {}, destination_members=2)]}
    assert impact_markdown(impact) == (
        "**Failover of mirror `orders`**: after approval the mirror is paused (its workers stop with offsets "
        "committed) and these groups get the translated offsets on the destination.\n"
        "\n"
        "### Group `app`\n"
        "- records a consumer may re-read: **30**\n"
        "- records not mirrored yet (recovery point): **unknown**\n"
        "- untranslated orders[2] (committed 7): orders\\[2\\] does not exist on the destination\n"  # a reason, escaped
        "\n"
        "| destination partition | committed (source) | translated offset | method | re-read | not mirrored |\n"
        "|---|---:|---:|---|---:|---:|\n"
        "| dc1.orders[0] | 500 | 480 | provenance | 0 | 10 |\n"
        "| dc1.orders[1] | 1,250 | 1,200 | offset-sync | 30 | unknown |\n"
        "\n"
        "### Group `busy`\n"
        "- records a consumer may re-read: **0**\n"
        "- records not mirrored yet (recovery point): **0**\n"
        "- **REFUSED at apply**: destination group 'busy' has 2 active member(s): its offsets will be refused "
        "(stop its consumers on the destination first)\n"
        "- no committed offset on a partition this mirror replicates: nothing to apply\n"
    )


class _Ti:
    def __init__(self, pulled: dict):
        self.pulled, self.pushed = pulled, {}

    def xcom_pull(self, task_ids, key="return_value"):
        return self.pulled.get((task_ids, key))

    def xcom_push(self, key, value):
        self.pushed[key] = value


class _Hook:
    """The offsets hook with the destination group `busy` active (apply_group_offsets' own refusal)."""

    def translation(self, group, apply=False):
        if group == "busy":
            raise GroupActiveError(f"destination group {group!r} has 1 active member(s): stop its consumers "
                                   "before applying translated offsets")
        return {**_translation(group), "applied": apply}


def test_apply_refuses_a_group_active_on_the_destination_in_one_line(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from mirror_airflow.operators.failover import ApplyTranslatedOffsetsOperator

    op = ApplyTranslatedOffsetsOperator(task_id="apply_offsets", spec_path="s.yaml", mirror_name="orders")
    monkeypatch.setattr(op, "hook", lambda context: _Hook())
    ti = _Ti({("impact", "return_value"): {"mirror": "orders", "groups": [{"group": "app"}, {"group": "busy"}]}})
    with pytest.raises(AirflowFailException) as failed:
        op.execute({"ti": ti, "params": {}})
    assert str(failed.value) == ("mirror 'orders': offsets not applied for 1 group(s): destination group 'busy' has "
                                 "1 active member(s): stop its consumers before applying translated offsets")
    assert "\n" not in str(failed.value)
    outcome = ti.pushed["outcome"]
    assert [a["group"] for a in outcome["applied"]] == ["app"] and outcome["applied"][0]["applied"] is True
    assert [n["group"] for n in outcome["not_applied"]] == ["busy"]
    assert not_applied_message("m", []) == "mirror 'm': offsets not applied for 0 group(s): "


def test_report_json_and_markdown(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from mirror_airflow.operators.failover import FailoverReportOperator

    impact = {"mirror": "orders", "groups": [group_impact(_translation(), {("orders", 0): 1000}, 0)]}
    approval = {"chosen_options": ["Approve"], "responded_by_user": {"id": "admin", "name": "admin"},
                "responded_at": "2026-11-25T03:00:00+00:00"}
    outcome = {"applied": [{**_translation(), "applied": True}],
               "not_applied": [{"group": "busy", "reason": "destination group 'busy' has 1 active member(s)"}]}
    report = failover_report(impact, approval, {"paused_here": True}, outcome, "mirror__orders")
    assert (report["status"], report["approved_by"], report["paused_here"]) == ("partly applied", "admin", True)
    text = report_markdown(report)
    assert text.startswith("# Failover of mirror `orders`: partly applied\n")
    assert "- lifecycle DAG `mirror__orders`: paused by this failover (unpause it to mirror again)" in text
    assert "| dc1.orders[0] | 480 | provenance | 0 |" in text
    assert "## Group `busy`: NOT applied\n\ndestination group 'busy' has 1 active member(s)" in text

    op = FailoverReportOperator(task_id="report", spec_path="s.yaml", mirror_name="orders",
                                lifecycle_dag_id="mirror__orders", report_dir=str(tmp_path))
    ti = _Ti({("impact", "return_value"): impact, ("approve", "return_value"): approval,
              ("stop_mirror", "return_value"): {"paused_here": True}, ("apply_offsets", "outcome"): outcome})
    # Written, then failed: the report is the run's only leaf, and the run must not end "success".
    with pytest.raises(AirflowFailException, match=r"^failover of mirror 'orders': partly applied \(report .*\.md\)$"):
        op.execute({"ti": ti, "params": {}})
    folder = tmp_path / "orders"
    (json_path,), (md_path,) = folder.glob("failover-*.json"), folder.glob("failover-*.md")
    assert json.loads(json_path.read_text())["not_applied"] == outcome["not_applied"]
    assert md_path.read_text() == text

    ti.pulled[("apply_offsets", "outcome")] = {"applied": outcome["applied"], "not_applied": []}
    written = op.execute({"ti": ti, "params": {}})
    assert written["status"] == "applied" and Path(written["report"]).is_file() and Path(written["summary"]).is_file()
    # No approval (rejected runs skip the report anyway): nothing to report.
    with pytest.raises(AirflowSkipException):
        op.execute({"ti": _Ti({("impact", "return_value"): impact}), "params": {}})


def test_a_reverse_mirror_gets_the_dags_of_a_mirror_and_its_own_failover(tmp_path, dags_dir, monkeypatch):  # noqa: F811
    """Failback (README): `reverse-of` in the spec, `make dags`, and the reverse mirror is run, checked and its
    consumer groups moved back by the same DAGs as any mirror."""
    from mirror_airflow.dag_factory import render

    spec = tmp_path / "mirrors.yaml"
    spec.write_text(SPEC.replace('preserve-partitions: true', 'preserve-partitions: true\n        provenance-headers: '
                                 'true') + """
  - name: back
    source: {kafka: {bootstrap.servers: "10.255.255.2:9092"}}
    destination: {kafka: {bootstrap.servers: "10.255.255.1:9092"}}
    mirrors:
      - name: orders-back
        reverse-of: orders
""")
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert bag.import_errors == {}
    assert {d for d in bag.dag_ids if d.startswith("mirror__orders-back")} == {
        "mirror__orders-back", "mirror__orders-back__lag", "mirror__orders-back__verify",
        "mirror__orders-back__catchup", "mirror__orders-back__failover"}
    assert _structure(bag.dags["mirror__orders-back__failover"]) == FAILOVER
    assert bag.dags["mirror__orders-back"].is_paused_upon_creation is True


# ------------------------------------------------------------------ issue 46 item 6: spoofing and a second approver
FORGED = "All consumers already on the destination: nothing will be lost."


def _rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


@pytest.mark.parametrize("group", [
    f"evil`\n**{FORGED}**",
    f"evil``\n\n**{FORGED}**\n\n`",
    f"evil\r\n### {FORGED}",
    f"evil <b>{FORGED}</b> [click](http://x.example)",
    f"evil|\n| **{FORGED}** |",
])
def test_a_group_id_cannot_forge_text_in_the_approval(group):
    translation = {**_translation(group), "untranslated": [
        {"source_topic": "orders", "partition": 2, "source_offset": 7, "reason": f"group {group!r}: {group}"}]}
    impact = {"mirror": "orders", "groups": [group_impact(translation, {("orders", 0): 1000}, destination_members=1)]}
    for markdown in (impact_markdown(impact), report_markdown(failover_report(
            impact, {"responded_by_user": {"name": group}}, None,
            {"applied": [], "not_applied": [{"group": group, "reason": group}]}, "mirror__orders"))):
        html = _rendered(markdown)
        assert "<strong>All consumers" not in html and "<h3>All consumers" not in html
        assert "<b>" not in html and "<a href" not in html
        # Every line the approver reads is one the text produced, the group id held inside one of them.
        assert all(not line.startswith(("**All", "### All", "| **All")) for line in markdown.splitlines())


def test_the_failover_approval_is_assigned_to_the_configured_approvers(tmp_path, dags_dir, monkeypatch):  # noqa: F811
    from mirror_airflow.dag_factory import render

    spec = tmp_path / "mirrors.yaml"
    spec.write_text(SPEC.replace("airflow: {api-conn-id: my_api, verify-report-dir: /var/reports}",
                                 "airflow: {api-conn-id: my_api, failover-approvers: [ops-a, {id: '17', name: ops-b}]}"))
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert bag.import_errors == {}
    approve = bag.dags["mirror__orders__failover"].get_task("approve")
    assert approve.assigned_users == [{"id": "ops-a", "name": "ops-a"}, {"id": "17", "name": "ops-b"}]


class _Run:
    def __init__(self, user):
        self.triggering_user_name = user


@pytest.mark.parametrize("triggered_by, assigned", [
    ("ops-a", [{"id": "17", "name": "ops-b"}]),          # whoever triggered does not approve
    ("someone", [{"id": "ops-a", "name": "ops-a"}, {"id": "17", "name": "ops-b"}]),
    ("ops-b", [{"id": "ops-a", "name": "ops-a"}]),       # matched by name too (an auth manager's numeric ids)
])
def test_the_triggering_user_is_not_an_approver(monkeypatch, triggered_by, assigned):
    from mirror_airflow.operators.failover import FailoverApprovalOperator

    op = FailoverApprovalOperator(task_id="approve", subject="s", body="b",
                                  approvers=[{"id": "ops-a", "name": "ops-a"}, {"id": "17", "name": "ops-b"}])
    sent = {}
    monkeypatch.setattr("airflow.providers.standard.operators.hitl.ApprovalOperator.execute",
                        lambda self, context: sent.update(users=self.assigned_users))
    op.execute({"dag_run": _Run(triggered_by)})
    assert sent["users"] == assigned


def test_an_approval_only_the_triggering_user_could_give_fails_in_one_line(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from mirror_airflow.operators.failover import FailoverApprovalOperator

    op = FailoverApprovalOperator(task_id="approve", subject="s", body="b", approvers=[{"id": "ops-a", "name": "ops-a"}])
    with pytest.raises(AirflowFailException, match="^the failover needs an approver other than ops-a, who triggered "
                                                   "it: add one to airflow.failover-approvers$"):
        op.execute({"dag_run": _Run("ops-a")})

"""The failover runbook's operators (the DAG: dag_factory.failover_dag), one role each:

- FailoverImpactOperator: the selected groups' impact (XCom), and its summary (XCom key `summary`) that
  the approval task shows;
- ApplyTranslatedOffsetsOperator: translates each group again, the mirror stopped, and writes the offsets
  on the destination; a group with active members there is refused (the task fails with one line);
- FailoverReportOperator: the JSON report and its markdown beside it, in the mirror's report folder.

The approval is FailoverApprovalOperator, the standard provider's ApprovalOperator assigned to the mirror's
`failover-approvers` minus the run's triggering user; the stop is StopMirrorOperator (handover.py).
"""

from __future__ import annotations

import json

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from mirror_airflow.failover import (
    GroupSelectionError, failover_report, group_impact, impact_markdown, not_applied_message, report_markdown,
    select_groups,
)
from mirror_airflow.hooks.offsets import MirrorOffsetsHook
from mirror_airflow.operators.base import MirrorOperator
from mirror_airflow.reports import new_report_path

SUMMARY_KEY = "summary"
OUTCOME_KEY = "outcome"


class FailoverApprovalOperator(ApprovalOperator):
    """The approval of a failover by someone else than who asked for it (four eyes): Airflow lets only the
    assigned users answer (its HITL endpoint checks them), and the triggering user is taken out of them at run
    time (matched by id or name: an auth manager's ids need not be the names). No approvers configured: anyone
    with the DAG's HITL permission may answer, as before, and the task log says so."""

    def __init__(self, *, approvers: list[dict[str, str]] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.approvers = list(approvers or [])

    def execute(self, context):
        if not self.approvers:
            self.log.warning("no airflow.failover-approvers: any user with this DAG's HITL permission may approve, "
                             "the one who triggered the run included")
            return super().execute(context)
        triggered_by = getattr(context.get("dag_run"), "triggering_user_name", None)
        others = [u for u in self.approvers if triggered_by not in (u["id"], u["name"])]
        if not others:
            raise AirflowFailException(f"the failover needs an approver other than {triggered_by}, who triggered it: "
                                       "add one to airflow.failover-approvers")
        self.assigned_users = others
        self.log.info("approval assigned to %s", ", ".join(u["name"] for u in others))
        return super().execute(context)


class FailoverOperator(MirrorOperator):
    """A failover task: the run's params (groups, group_pattern, source) and the offsets hook."""

    def hook(self, context) -> MirrorOffsetsHook:
        source = str((context.get("params") or {}).get("source") or "").strip()
        return MirrorOffsetsHook(self.spec_path, self.mirror_name, source or None)


class FailoverImpactOperator(FailoverOperator):
    """XCom: {"mirror", "groups": [group_impact ...]}; key `summary`: the same as markdown."""

    def execute(self, context) -> dict:
        params = context.get("params") or {}
        hook = self.hook(context)
        pattern = str(params.get("group_pattern") or "")
        try:
            groups = select_groups(params.get("groups"), pattern, hook.source_groups() if pattern.strip() else [],
                                   exclude={hook.config.group_id})
        except GroupSelectionError as exc:
            raise AirflowFailException(str(exc)) from None
        impacts = []
        for group in groups:
            translation = hook.translation(group)
            ends = hook.source_ends([(o["source_topic"], o["partition"]) for o in translation["offsets"]])
            impacts.append(group_impact(translation, ends, hook.destination_members(group)))
        impact = {"mirror": self.mirror_name, "groups": impacts}
        summary = impact_markdown(impact)
        self.log.info("failover impact of mirror %s:\n%s", self.mirror_name, summary)
        context["ti"].xcom_push(key=SUMMARY_KEY, value=summary)
        return impact


class ApplyTranslatedOffsetsOperator(FailoverOperator):
    """Writes each approved group's translated offsets (translated now: the mirror has stopped). A group
    that cannot take them (active on the destination, or an error) is left unchanged and named in the
    task's one-line failure; the others are applied. XCom key `outcome`: {"applied", "not_applied"}."""

    def __init__(self, *, impact_task_id: str = "impact", **kwargs) -> None:
        super().__init__(**kwargs)
        self.impact_task_id = impact_task_id

    def execute(self, context) -> dict:
        from mirror_worker.api import MirrorError

        impact = context["ti"].xcom_pull(task_ids=self.impact_task_id) or {}
        hook = self.hook(context)
        applied, not_applied = [], []
        for group in (g["group"] for g in impact.get("groups", [])):
            try:
                applied.append(hook.translation(group, apply=True))
            except MirrorError as exc:  # GroupActiveError (refused), TranslationError
                not_applied.append({"group": group, "reason": str(exc)})
                self.log.error("group %s: not applied: %s", group, exc)
                continue
            self.log.info("group %s: %d partition offset(s) written on the destination", group,
                          len(applied[-1]["offsets"]))
        outcome = {"applied": applied, "not_applied": not_applied}
        context["ti"].xcom_push(key=OUTCOME_KEY, value=outcome)  # the report reads it, whatever happens next
        if not_applied:
            raise AirflowFailException(not_applied_message(self.mirror_name, not_applied))
        return outcome


class FailoverReportOperator(FailoverOperator):
    """Writes `failover-<time>.json` and `.md` in the mirror's report folder (as the verify report) and
    logs where; runs after the apply task whatever its outcome, skipped when nobody approved. Fails (after
    writing) when not every group was applied, so that the run ends failed too."""

    def __init__(self, *, lifecycle_dag_id: str, report_dir: str | None = None, impact_task_id: str = "impact",
                 approve_task_id: str = "approve", stop_task_id: str = "stop_mirror",
                 apply_task_id: str = "apply_offsets", **kwargs) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.lifecycle_dag_id = lifecycle_dag_id
        self.report_dir = report_dir
        self.task_ids = (impact_task_id, approve_task_id, stop_task_id, apply_task_id)

    def execute(self, context) -> dict:
        ti = context["ti"]
        impact_id, approve_id, stop_id, apply_id = self.task_ids
        impact, approval = ti.xcom_pull(task_ids=impact_id), ti.xcom_pull(task_ids=approve_id)
        if not impact or not approval:
            raise AirflowSkipException("no approved failover in this run: nothing to report")
        report = failover_report(impact, approval, ti.xcom_pull(task_ids=stop_id),
                                 ti.xcom_pull(task_ids=apply_id, key=OUTCOME_KEY), self.lifecycle_dag_id)
        path = new_report_path(self.report_dir, self.mirror_name, "failover")
        path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        readable = path.with_suffix(".md")
        readable.write_text(report_markdown(report), encoding="utf-8")
        self.log.info("failover of mirror %s: %s; report %s (readable: %s)", self.mirror_name, report["status"],
                      path, readable)
        if report["status"] != "applied":
            # This task is the run's only leaf: failing here is what makes the run failed, not just this task.
            raise AirflowFailException(f"failover of mirror {self.mirror_name!r}: {report['status']} "
                                       f"(report {readable})")
        return {"status": report["status"], "report": str(path), "summary": str(readable)}

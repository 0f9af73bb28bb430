"""The failover runbook's pure parts: which groups, what failing over costs them, and the texts people read.

The numbers come from the mirror's own translation (mirror_worker.dr.offset_translation.report: per partition
the destination `offset`, the `method`, `may_reread` and `last_mirrored_source_offset`) and the source
partitions' log ends. Every value from a cluster or a person enters the Markdown through md_text.py. Per
partition:

    source      ... C (group's next record) ......... M (last mirrored) | not mirrored yet | E (log end)
    destination ... offset (first copy of an s >= C) ... end_offset

- re-read: `may_reread`, at most that many records from `offset` on were already read on the source;
- not mirrored (the recovery point): E - (M + 1) records of the source are not on the destination; they
  are lost to consumers of the destination unless the source comes back. Unknown (None) without
  provenance headers (nothing on the destination names its source offset).
"""

from __future__ import annotations

import re

from mirror_airflow.md_text import md_code, md_text


class GroupSelectionError(ValueError):
    """The DAG run's params select no group, or an unusable regex."""


def select_groups(ids: str | list | None, pattern: str | None, available: list[str], exclude: set[str]) -> list[str]:
    """Sorted union of the given ids and the `available` groups the regex fully matches, minus `exclude`
    (the mirror's own group: its offsets are the mirror's, not a consumer's)."""
    named = [g.strip() for g in (ids.split(",") if isinstance(ids, str) else ids or []) if str(g).strip()]
    chosen = set(named)
    if pattern and pattern.strip():
        try:
            regex = re.compile(pattern.strip())
        except re.error as exc:
            raise GroupSelectionError(f"param group_pattern: not a regex ({exc}): {pattern!r}") from None
        chosen |= {g for g in available if regex.fullmatch(g)}
    if own := sorted(set(named) & exclude):
        raise GroupSelectionError(f"group {', '.join(own)}: the mirror's own group, not a consumer group")
    chosen -= exclude
    if not chosen:
        raise GroupSelectionError("no consumer group selected: give param groups (comma list) and/or group_pattern "
                                  "(a regex matching group ids on the source)")
    return sorted(chosen)


def not_mirrored(source_end: int | None, last_mirrored: int | None) -> int | None:
    """Records of a source partition not on the destination (None: unknown)."""
    if source_end is None or last_mirrored is None:
        return None
    return max(0, source_end - (last_mirrored + 1))


def group_impact(translation: dict, source_ends: dict[tuple[str, int], int], destination_members: int) -> dict:
    """One group's impact from its translation report (offset_translation.report, not applied) and the
    source log ends {(source topic, partition): end}."""
    partitions = []
    for entry in translation.get("offsets", []):
        end = source_ends.get((entry["source_topic"], entry["partition"]))
        partitions.append({
            "topic": entry["topic"], "partition": entry["partition"], "source_topic": entry["source_topic"],
            "committed": entry["source_offset"], "offset": entry["offset"], "method": entry["method"],
            "may_reread": entry["may_reread"], "source_end": end,
            "last_mirrored_source_offset": entry.get("last_mirrored_source_offset"),
            "not_mirrored": not_mirrored(end, entry.get("last_mirrored_source_offset")),
        })
    unknown = [p for p in partitions if p["not_mirrored"] is None]
    return {
        "group": translation["group"],
        "destination_members": destination_members,
        "partitions": partitions,
        "untranslated": list(translation.get("untranslated", [])),
        "may_reread": sum(p["may_reread"] for p in partitions),
        "not_mirrored": None if unknown else sum(p["not_mirrored"] for p in partitions),
    }


def _count(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def active_warning(group: dict) -> str | None:
    members = group["destination_members"]
    if not members:
        return None
    return (f"destination group {group['group']!r} has {members} active member(s): its offsets will be refused "
            "(stop its consumers on the destination first)")


def impact_markdown(impact: dict) -> str:
    """What the approver reads: per group its totals, warnings and one row per partition."""
    lines = [f"**Failover of mirror {md_code(impact['mirror'])}**: after approval the mirror is paused (its workers stop "
             "with offsets committed) and these groups get the translated offsets on the destination.", ""]
    for group in impact["groups"]:
        lines += [f"### Group {md_code(group['group'])}",
                  f"- records a consumer may re-read: **{_count(group['may_reread'])}**",
                  f"- records not mirrored yet (recovery point): **{_count(group['not_mirrored'])}**"]
        if (warning := active_warning(group)):
            lines.append(f"- **REFUSED at apply**: {md_text(warning)}")
        for item in group["untranslated"]:
            lines.append(f"- untranslated {md_text(item['source_topic'])}[{item['partition']}] (committed "
                         f"{item['source_offset']}): {md_text(item['reason'])}")
        if group["partitions"]:
            lines += ["", "| destination partition | committed (source) | translated offset | method | re-read "
                          "| not mirrored |", "|---|---:|---:|---|---:|---:|"]
            lines += [f"| {md_text(p['topic'])}[{p['partition']}] | {p['committed']:,} | {p['offset']:,} | {p['method']} "
                      f"| {p['may_reread']:,} | {_count(p['not_mirrored'])} |" for p in group["partitions"]]
        else:
            lines.append("- no committed offset on a partition this mirror replicates: nothing to apply")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def not_applied_message(mirror: str, not_applied: list[dict]) -> str:
    """The apply task's one-line failure: each group left unchanged and why."""
    reasons = "; ".join(item["reason"] for item in not_applied)
    return f"mirror {mirror!r}: offsets not applied for {len(not_applied)} group(s): {reasons}"


def failover_report(impact: dict, approval: dict | None, stop: dict | None, outcome: dict | None,
                    lifecycle_dag_id: str) -> dict:
    """The JSON report: what was approved (the impact), by whom, whether the mirror was paused here, and
    per group the offsets applied (as translated after the stop) or why not."""
    outcome = outcome or {}
    user = (approval or {}).get("responded_by_user") or {}
    return {
        "mirror": impact["mirror"],
        "lifecycle_dag_id": lifecycle_dag_id,
        "approved_by": user.get("name") or user.get("id"),
        "approved_at": None if approval is None else str(approval.get("responded_at")),
        "paused_here": bool((stop or {}).get("paused_here")),
        "impact": impact,
        "applied": outcome.get("applied", []),
        "not_applied": outcome.get("not_applied", []),
        "status": ("applied" if outcome and not outcome.get("not_applied") else
                   "partly applied" if outcome.get("applied") else "nothing applied"),
    }


def report_markdown(report: dict) -> str:
    """The report for people: status, approval, per group the applied offsets or the reason."""
    lines = [f"# Failover of mirror {md_code(report['mirror'])}: {report['status']}", "",
             f"- approved by {md_text(report['approved_by'] or '?')} at {md_text(report['approved_at'] or '?')}",
             f"- lifecycle DAG `{report['lifecycle_dag_id']}`: "
             + ("paused by this failover (unpause it to mirror again)" if report["paused_here"] else
                "was already paused"), ""]
    for applied in report["applied"]:
        lines += [f"## Group {md_code(applied['group'])}: applied", "",
                  "| destination partition | offset | method | may re-read |", "|---|---:|---|---:|"]
        lines += [f"| {md_text(o['topic'])}[{o['partition']}] | {o['offset']:,} | {o['method']} | {o['may_reread']:,} |"
                  for o in applied["offsets"]]
        lines += [f"- untranslated {md_text(u['source_topic'])}[{u['partition']}]: {md_text(u['reason'])}"
                  for u in applied["untranslated"]]
        lines.append("")
    for item in report["not_applied"]:
        lines += [f"## Group {md_code(item['group'])}: NOT applied", "", md_text(item["reason"]), ""]
    lines += ["## Impact approved", "", impact_markdown(report["impact"])]
    return "\n".join(lines).rstrip() + "\n"

"""bench.airflow_breadth's results: the JSON as measured, and the Markdown tables the docs page includes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _s(value) -> str:
    return "–" if value is None else f"{value:g}"


def parse_table(parse: dict) -> list[str]:
    per_file = parse["parse_s_per_file"]
    return [
        "| DAG files | DAGs | parse s per file: median / p95 / max | import errors | all new files parsed after |",
        "|---:|---:|---|---:|---:|",
        f"| {parse['files']} | {parse['all']['dags']} | {_s(per_file.get('median'))} / {_s(per_file.get('p95'))} / "
        f"{_s(per_file.get('max'))} | {len(parse['import_errors'])} | {_s(parse['all_parsed_s'])} s |",
    ]


def scheduler_table(parse: dict) -> list[str]:
    rows = ["| DAG files in the folder | DAGs | scheduler loop ms: median / p95 | loops/s | CPU share of a core: "
            "scheduler / dag-processor / api-server / triggerer |", "|---:|---:|---|---:|---|"]
    for key in ("few", "all"):
        phase = parse[key]
        loop, cpu = phase["loop_ms"], phase["cpu_share"]
        rows.append(f"| {phase['mirrors']} mirrors | {phase['dags']} | {_s(loop.get('median'))} / {_s(loop.get('p95'))} "
                    f"| {_s(phase['loops_per_s'])} | " + " / ".join(_s(cpu.get(c)) for c in (
                        "scheduler", "dag-processor", "api-server", "triggerer")) + " |")
    return rows


def dashboard_table(board: dict, in_process: list[dict] | None) -> list[str]:
    rows = ["| view | seconds | mirrors listed | still being measured |", "|---|---:|---:|---:|"]
    cold = board["cold"]
    rows.append(f"| first view, nothing measured yet (API) | {cold['s']:g} | {cold.get('mirrors')} | "
                f"{cold.get('still_measuring')} |")
    for label, key in (("page, samples kept (< 10 s old), median of 5", "kept"),
                       ("API, every mirror measured again, median of 5", "remeasured")):
        looks = board[key]
        rows.append(f"| {label} | {board[key + '_median_s']:g} | {min(look.get('mirrors', 0) for look in looks)} | "
                    f"{max(look.get('still_measuring', 0) for look in looks)} |")
    page = board["page_remeasured"]
    rows.append(f"| page, every mirror measured again | {page['s']:g} | {page.get('mirrors')} | "
                f"{page.get('still_measuring')} |")
    for run in in_process or []:
        if "error" in run:
            rows.append(f"| in-process, {run['plugins']} | error | | |")
            continue
        seconds = ", ".join(f"{view['s']:g}" for view in run["views"])
        rows.append(f"| in-process overview, code of `{run['plugins']}` (every view measures) | {seconds} | "
                    f"{run['views'][0]['mirrors']} | {max(v['still_measuring'] for v in run['views'])} |")
    return rows


def pause_table(pause: dict) -> list[str]:
    rss = pause["rss_mib_per_running_mirror"]
    return [
        "| running mirrors | worker tasks running (pool slots held, of default_pool) | executor parallelism | "
        "RSS per running mirror MiB: task tree / worker | pause to task end s | others copied after s | "
        "records reaching the paused mirror's destination |",
        "|---:|---|---:|---|---:|---|---:|",
        f"| {len(pause['mirrors'])} | {sum(1 for t in pause['running_tasks'] if t[1] == 'run_worker')} "
        f"(of {pause['default_pool_slots']}) | {pause['parallelism']} | "
        + ", ".join(f"{v['task']:g} / {v['worker_only']:g}" for v in rss.values() if v["task"] is not None)
        + f" | {pause['pause_to_stop_s']:g} | "
        + ", ".join(f"{v:g}" for v in pause["others_copied_after_pause_s"].values())
        + f" | {pause['paused_destination_records'] - 20} of 20 |",
    ]


def markdown(results: dict) -> str:
    runs = "; ".join(f"{', '.join(run['parts'])} on {run['when']} (load average at the end {run['load_average']})"
                     for run in results["runs"])
    lines = [f"{results['mirrors']} mirrors, {results['topics']} source topics, {results['runs'][-1]['host_cpus']} "
             f"shared cores. Measured: {runs}.", ""]
    parse = results.get("parse")
    if parse:
        lines += ["**Parsing** (the dag-processor's own durations, `dag.last_parse_duration`):", "",
                  *parse_table(parse), "", "**Scheduler and components** (each over "
                  f"{parse['all']['seconds']:g} s):", "", *scheduler_table(parse), ""]
    if results.get("dashboard"):
        lines += ["**Dashboard overview** (HTTP with a bearer token):", "",
                  *dashboard_table(results["dashboard"], results.get("overview_in_process")), ""]
    if results.get("pause"):
        lines += ["**Running mirrors and a pause**:", "", *pause_table(results["pause"]), ""]
    return "\n".join(lines)


def write_results(results: dict, out: Path, parts: list[str], merge: bool = False) -> None:
    """`out`.json and `out`.md; with `merge`, the parts measured now replace theirs in what `out`.json holds."""
    run = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "parts": parts, "host_cpus": os.cpu_count(),
           "load_average": [round(x, 1) for x in os.getloadavg()]}
    json_file = Path(f"{out}.json")
    kept = json.loads(json_file.read_text(encoding="utf-8")) if merge and json_file.is_file() else {}
    results = {**kept, **results, "runs": [*kept.get("runs", []), run]}
    out.parent.mkdir(parents=True, exist_ok=True)
    json_file.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    Path(f"{out}.md").write_text(markdown(results) + "\n", encoding="utf-8")

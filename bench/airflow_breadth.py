"""Breadth in Airflow (issue #42, item 5): a spec of 100 mirrors, most small, on a real Airflow.

    .venv/bin/python -m bench.airflow_breadth [--mirrors 100] [--few 3] [--running 3] [--window-s 60]
        [--compare-plugins /path/to/older/plugins] [--skip-pause] [--out bench/results/airflow-breadth]

On two Kafka nodes and an `airflow standalone` (devstack.airflow: LocalExecutor, SQLite, parallelism 4, one
parsing process) started for the run, with a spec of `--mirrors` mirrors (one topic each; every tenth mirror
four topics) and every DAG left paused as the spec creates them:

  parse       the dag-processor's own parse duration per DAG file (the metadata DB's dag.last_parse_duration,
              per file), import errors (import_error table), and how long until every DAG of the new files is
              in the DB; set against core.dagbag_import_timeout and dag_processor.dag_file_processor_timeout;
  scheduler   over `--window-s` seconds with only `--few` mirrors' DAG files, then with all of them: the
              scheduler's loop durations (its DEBUG line "Ran scheduling loop in N ms") and the CPU share of
              each component's process tree;
  dashboard   GET /mirror-dashboard/api/mirrors and /mirror-dashboard/ with a bearer token: the first (cold:
              nothing measured yet), then 5 within 10 s (kept samples), then 5 more 11 s apart (each view
              measures every mirror again, as the page's own 15-s refresh does); with --compare-plugins, the
              same overview built in-process by that plugins folder's code and by this one's;
  pause       `--running` mirrors' lifecycle DAGs unpaused with records waiting: the pool and executor slots
              their worker tasks hold and each task tree's RSS; then one is paused: seconds until its
              run_worker task ends, and records produced afterwards reach the others' destinations, not its own.

Writes `--out`.json (everything) and `--out`.md (the tables docs/benchmarks/airflow-breadth.md includes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from mirror_airflow.dag_factory import render, stub_name, stub_text

from bench.airflow_overview import compare_plugins, measure_overview
from bench.airflow_probe import (
    MetadataDb,
    component_pids,
    cpu_share,
    logged_in,
    loop_durations_ms,
    summary,
    tree_rss_mib,
    wait_parsed,
    worker_task_trees,
)
from bench.airflow_report import write_results
from bench.common import bench_stack
from bench.harness import RESULTS, create_topics
from devstack import Stack
from devstack.airflow import USERNAME, Airflow
from devstack.demo import end_offsets  # a topic's records: the sum of its partitions' high watermarks

DAG_KINDS = ("", "__lag", "__verify", "__catchup")
RECORDS = 20


class BreadthAirflow(Airflow):
    """devstack's Airflow, with the scheduler's loop durations logged (its DEBUG line) and, if given, another
    number of parsing processes (devstack's: 1)."""

    parsing_processes: int | None = None

    def environment(self, ports: dict | None = None) -> dict[str, str]:
        env = super().environment(ports)
        env["AIRFLOW__LOGGING__NAMESPACE_LEVELS"] = "airflow.jobs.scheduler_job_runner=DEBUG"
        if self.parsing_processes:
            env["AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES"] = str(self.parsing_processes)
        return env


def mirror_names(count: int) -> list[str]:
    return [f"b{i:03d}" for i in range(count)]


def topics_of(name: str, wide: bool, prefix: str = "breadth") -> list[str]:
    return [f"{prefix}.{name}.t{i}" for i in range(4)] if wide else [f"{prefix}.{name}"]


def breadth_spec(source: str, destination: str, names: list[str], topic_prefix: str = "breadth") -> dict:
    """One group, `names` mirrors: each selects its topics `<topic_prefix>.<name>` (every tenth four topics
    `<topic_prefix>.<name>.t0..3`, see topics_of); all created paused."""
    mirrors = [{"name": name, "whitelist": rf"{topic_prefix}\.{name}(\..*)?", "prefix": "m.", "commit-interval-s": 1}
               for name in names]
    return {"group-id-prefix": "breadth.", "groups": [{
        "name": "breadth",
        "source": {"name": "source", "kafka": {"bootstrap.servers": source}},
        "destination": {"kafka": {"bootstrap.servers": destination}},
        "settings": {"airflow": {"pause-check-interval-s": 5, "worker-retries": 0}},
        "mirrors": mirrors}]}


def dag_ids(names: list[str]) -> set[str]:
    return {f"mirror__{name}{kind}" for name in names for kind in DAG_KINDS}


def produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for record in records:
        producer.produce(topic, value=record["value"])
    if producer.flush(30):
        raise RuntimeError(f"{topic}: not every record was delivered")


def wait_total(bootstrap: str, topic: str, expected: int, timeout: float) -> float:
    started = time.monotonic()
    while end_offsets(bootstrap, topic) < expected:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{topic}: fewer than {expected} records after {timeout:.0f} s")
        time.sleep(2)
    return round(time.monotonic() - started, 1)


def scheduler_window(airflow: Airflow, seconds: float) -> dict:
    """The scheduler's loop durations and each component's CPU share over the next `seconds`."""
    offset = airflow.process.log_file.stat().st_size
    shares = cpu_share(component_pids(airflow.process.pid()), seconds)
    loops, _ = loop_durations_ms(airflow.process.log_file, offset)
    return {"seconds": seconds, "loop_ms": summary(loops, 1), "loops_per_s": round(len(loops) / seconds, 2),
            "cpu_share": shares}


def parse_phase(airflow: Airflow, db: MetadataDb, spec: Path, names: list[str], few: int, window_s: float | None) -> dict:
    """Airflow started with `few` mirrors' DAG files, then all of them; with `window_s`, the scheduler measured
    over that long with each."""
    dags = airflow.dags_folder
    for name in names[:few if window_s else len(names)]:
        (dags / stub_name(name)).write_text(stub_text(name, spec), encoding="utf-8")
    airflow.start()
    airflow.wait_ready(timeout=900)
    result = {"startup_s": round(airflow.startup_seconds or 0, 1)}
    if window_s:
        result["few_parsed_s"] = round(wait_parsed(db, dag_ids(names[:few]), timeout=600), 1)
        result["few"] = {"mirrors": few, "dags": len(db.dag_ids()), **scheduler_window(airflow, window_s)}
        render(spec, dags)
    result["all_parsed_s"] = round(wait_parsed(db, dag_ids(names), timeout=1200), 1)
    if window_s:
        result["all"] = {"mirrors": len(names), "dags": len(db.dag_ids()), **scheduler_window(airflow, window_s)}
    durations = db.parse_durations()
    result["airflow_rss_mib"] = tree_rss_mib(airflow.process.pid())
    result["files"] = len(durations)
    result["parse_s_per_file"] = summary([d for d, _ in durations.values()])
    result["slowest_files"] = sorted(((round(d, 2), f) for f, (d, _) in durations.items()), reverse=True)[:5]
    result["import_errors"] = db.import_errors()
    return result


def pause_phase(airflow: Airflow, db: MetadataDb, clusters, names: list[str], running: int) -> dict:
    source, destination = clusters
    api = airflow.api()
    chosen = [n for n in names if int(n[1:]) % 10][:running]  # one-topic mirrors
    started = time.monotonic()
    for name in chosen:
        api.set_paused(f"mirror__{name}", False)
    copied = {name: wait_total(destination, f"m.breadth.{name}", RECORDS, timeout=600) for name in chosen}
    result = {"mirrors": chosen, "first_copy_s": round(time.monotonic() - started, 1), "copied_after_s": copied}
    time.sleep(10)
    tasks = db.running_tasks()
    result["running_tasks"] = [list(t) for t in tasks]
    result["default_pool_slots"] = db.pool_slots()
    result["parallelism"] = int(airflow.environment()["AIRFLOW__CORE__PARALLELISM"])
    trees = {name: worker_task_trees(name) for name in chosen}
    result["rss_mib_per_running_mirror"] = {name: {"task": tree_rss_mib(pids[0]) if pids else None,
                                                   "worker_only": tree_rss_mib(pids[-1]) if pids else None}
                                            for name, pids in trees.items()}
    stopped, others = chosen[0], chosen[1:]
    paused_at = time.monotonic()
    api.set_paused(f"mirror__{stopped}", True)
    while "success" not in db.task_states(f"mirror__{stopped}", "run_worker"):
        if time.monotonic() - paused_at > 180:
            raise TimeoutError(f"mirror {stopped}: run_worker did not end within 180 s of the pause")
        time.sleep(1)
    result["pause_to_stop_s"] = round(time.monotonic() - paused_at, 1)
    for name in chosen:
        produce(source, f"breadth.{name}", [{"value": f"after-{i}".encode()} for i in range(RECORDS)])
    result["others_copied_after_pause_s"] = {n: wait_total(destination, f"m.breadth.{n}", 2 * RECORDS, 300)
                                             for n in others}
    time.sleep(15)
    result["paused_destination_records"] = end_offsets(destination, f"m.breadth.{stopped}")
    result["others_still_running"] = sorted({t[0] for t in db.running_tasks() if t[1] == "run_worker"})
    for name in others:
        api.set_paused(f"mirror__{name}", True)
    deadline = time.monotonic() + 180
    while any(t[1] == "run_worker" for t in db.running_tasks()) and time.monotonic() < deadline:
        time.sleep(2)
    return result


PARTS = ("parse", "dashboard", "pause")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.airflow_breadth", description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=int, default=100)
    parser.add_argument("--few", type=int, default=3, help="mirrors whose DAG files are there first")
    parser.add_argument("--running", type=int, default=3, help="mirrors whose workers run in the pause phase")
    parser.add_argument("--window-s", type=float, default=60.0, help="each scheduler measurement window")
    parser.add_argument("--compare-plugins", type=Path, help="also build the overview with this plugins folder")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which of {','.join(PARTS)} to measure (the "
                        "DAG files are always parsed first; without `parse` the scheduler is not measured)")
    parser.add_argument("--parsing-processes", type=int, help="the dag-processor's (default devstack's: 1)")
    parser.add_argument("--merge", action="store_true", help="keep the other parts' results already in --out")
    parser.add_argument("--out", type=Path, default=RESULTS / "airflow-breadth")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        print(f"airflow_breadth: --parts: unknown {', '.join(sorted(parts - set(PARTS)))}", file=sys.stderr)
        return 2
    names = mirror_names(args.mirrors)
    root = Path(tempfile.mkdtemp(prefix="bench-airflow-breadth-"))
    results: dict = {"mirrors": args.mirrors, "topics": sum(len(topics_of(n, int(n[1:]) % 10 == 0)) for n in names)}
    airflow = None
    try:
        with bench_stack(kafka_only=True, reuse_running=False) as stack:
            source, destination = (stack[c].kafka.bootstrap_servers for c in ("source", "destination"))
            spec = root / "mirrors.yaml"
            spec.write_text(json.dumps(breadth_spec(source, destination, names), indent=1), encoding="utf-8")
            create_topics(source, [t for n in names for t in topics_of(n, int(n[1:]) % 10 == 0)], 1)
            for name in names[1:1 + 2 * args.running]:
                produce(source, f"breadth.{name}", [{"value": f"r{i}".encode()} for i in range(RECORDS)])
            airflow = BreadthAirflow(Stack(root / "stack"), root=root / "airflow-root", spec=spec,
                                     dags_folder=root / "dags")
            airflow.parsing_processes = args.parsing_processes
            (root / "dags").mkdir()
            db = MetadataDb(airflow.home / "airflow.db")
            parsed = parse_phase(airflow, db, spec, names, args.few, args.window_s if "parse" in parts else None)
            parsed["parsing_processes"] = args.parsing_processes or 1
            print(json.dumps(parsed, indent=1), flush=True)
            if "parse" in parts:
                results["parse"] = parsed
            if "dashboard" in parts:
                session = logged_in(airflow.url, USERNAME, airflow.password)
                results["dashboard"] = measure_overview(session, airflow.url, args.mirrors)
                print(json.dumps(results["dashboard"], indent=1), flush=True)
                if args.compare_plugins:
                    here = Path(__file__).resolve().parents[1] / "plugins"
                    results["overview_in_process"] = compare_plugins(airflow, [args.compare_plugins, here])
                    print(json.dumps(results["overview_in_process"], indent=1), flush=True)
            if "pause" in parts:
                results["pause"] = pause_phase(airflow, db, (source, destination), names, args.running)
                print(json.dumps(results["pause"], indent=1), flush=True)
    finally:
        if airflow is not None:
            airflow.stop()
        shutil.rmtree(root, ignore_errors=True)
    write_results(results, args.out, sorted(parts), merge=args.merge)
    print(f"wrote {args.out}.json and {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

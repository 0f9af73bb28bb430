"""Catch-up throughput against the worker's, on the same data in the same run: msgs/s of each.

    .venv/bin/python -m bench.catchup_throughput [--records 5000000] [--size 100] [--masters local[1],local[2]]
        [--repeats 1]

Preloads one topic (6 partitions, keyed records, lz4) into `source` once, with one producer process per
core. Then, on that same topic, each with its own group and destination prefix:
- the mirror worker (`python -m mirror_worker`, at-least-once, --preserve.partitions), timed as in
  bench/worker_throughput.py: from its first mirrored record until the destination holds them all
  (its start-up left out), and from its launch;
- `python -m spark_jobs.catchup` once per Spark master: end to end (process launch to exit, Spark start-up
  included: the goal), the copy phase (its summary: from the first record copied to the last, the driver's
  copy while Spark starts and Spark's tasks after it), the Spark start-up time (the session; null when the
  driver copied everything first) and the driver's share of the records.
With --repeats N the systems run N times, interleaved, and the medians are printed. Writes
bench/results/catchup_throughput.json (one row per run, with the 1-minute load average when it started;
catch-up rows carry their ratios to the worker of the same run: msgs/s of the copy phase and end to end,
and CPU seconds of the copy (Spark's tasks and the driver's copy) vs the worker's). --driver-copy-limit is
passed to the catch-up (0: Spark copies every range, as before the driver's copy), and so is
--driver-threads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack, standalone
from bench.worker_throughput import PARTITIONS, RESULTS, watch_worker
from devstack import Stack, paths


def _produce_partitions(bootstrap: str, topic: str, partitions: list[int], records: int, size: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 2_000_000})
    produce, poll = producer.produce, producer.poll
    payload = os.urandom(size)
    keys = [f"key-{i}".encode() for i in range(10_000)]
    for i in range(records):
        partition = partitions[i % len(partitions)]
        while True:
            try:
                produce(topic, payload, keys[i % 10_000], partition)
                break
            except BufferError:
                poll(0.05)
    assert producer.flush(300) == 0
    return records


def preload(bootstrap: str, topic: str, records: int, size: int, processes: int) -> float:
    """`records` records of `size` bytes over PARTITIONS partitions; seconds taken."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    started = time.monotonic()
    shares = [list(range(PARTITIONS))[i::processes] for i in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        counts = [records // processes + (1 if i < records % processes else 0) for i in range(processes)]
        done = sum(pool.map(_produce_partitions, [bootstrap] * processes, [topic] * processes, shares, counts,
                            [size] * processes))
    assert done == records
    return time.monotonic() - started


def measure_worker(stack: Stack, topic: str, records: int, size: int, workdir: Path, run: int) -> dict:
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    consumer_cfg = workdir / "source.properties"
    consumer_cfg.write_text(f"bootstrap.servers={src}\ngroup.id=bench-w{run}-{topic}\n")
    producer_cfg = workdir / "destination.properties"
    producer_cfg.write_text(f"bootstrap.servers={dst}\n")
    watcher = Consumer({"bootstrap.servers": dst, "group.id": "bench-watch"})
    load = os.getloadavg()[0]
    launched = time.monotonic()
    worker = subprocess.Popen(
        [sys.executable, "-m", "mirror_worker", "--consumer.config", str(consumer_cfg), "--producer.config",
         str(producer_cfg), "--whitelist", topic, "--prefix", f"w{run}.", "--preserve.partitions",
         "--offset.commit.interval.ms", "5000"],
        cwd=paths.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    first, first_count, finished, cpu, rss = watch_worker(worker, watcher, f"w{run}.{topic}", records, 1800)
    mirrored = records - first_count
    return {
        "system": "worker", "run": run, "record_bytes": size, "records": records,
        "msgs_per_s": round(mirrored / (finished - first)), "mb_per_s": round(mirrored * size / (finished - first) / 1e6, 2),
        "end_to_end_msgs_per_s": round(records / (finished - launched)), "wall_s": round(finished - launched, 1),
        "cpu_s": round(cpu, 2), "peak_rss_mib": round(rss, 1), "load_1m": load,
    }


def measure_catchup(stack: Stack, topic: str, records: int, size: int, master: str, workdir: Path, run: int,
                    driver_limit: int | None = None, driver_threads: int | None = None) -> dict:
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    prefix = f"cu{run}-{re.sub(r'[^0-9a-z]', '', master.removeprefix('local'))}."
    summary_file = workdir / f"summary-{prefix}json"
    load = os.getloadavg()[0]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "spark_jobs.catchup", "--source.bootstrap.servers", src, "--master", master,
         "--destination.bootstrap.servers", dst, "--topics", topic, "--group.id", f"bench-{prefix}{topic}",
         "--prefix", prefix, "--summary", str(summary_file),
         *(["--driver-copy-limit", str(driver_limit)] if driver_limit is not None else []),
         *(["--driver-threads", str(driver_threads)] if driver_threads is not None else [])],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=3600,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    summary = json.loads(summary_file.read_text())
    assert summary["records"] == records, summary
    tasks = sorted(r["seconds"] for r in summary["ranges"])
    driver = summary["driver"]
    return {
        "system": "catchup", "run": run, "master": master, "record_bytes": size, "records": records,
        "msgs_per_s": round(records / wall), "mb_per_s": round(records * size / wall / 1e6, 2), "wall_s": round(wall, 1),
        "job_seconds": summary["seconds"],
        "spark_startup_s": summary["spark_startup_s"], "spark_ready_s": summary["spark_ready_s"],
        "spark_job_s": summary["spark_job_s"], "copy_phase_s": summary["copy_phase_s"],
        "copy_phase_msgs_per_s": summary["copy_phase_msgs_per_s"],
        "driver_records": driver["records"], "driver_s": driver["seconds"],
        "driver_ranges_handed_over": driver["ranges_handed_over"], "driver_threads": driver_threads or 1,  # catchup.py's default
        "task_seconds_median": tasks[len(tasks) // 2], "task_seconds_sum": round(sum(tasks), 2),
        # Spark's tasks and the driver's process while it copied (its Spark start-up thread included).
        "tasks_cpu_s": round(sum(r["cpu_s"] for r in summary["ranges"]) + driver["cpu_s"], 2),
        "task_msgs_per_s_median": round(sorted(r["copied"] / r["seconds"] for r in summary["ranges"]
                                               if r["seconds"])[len(tasks) // 2]),
        "load_1m": load,
    }


def medians(rows: list[dict]) -> list[dict]:
    """Per system (and master): the median of each measured figure over the runs."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["system"], row.get("master")), []).append(row)
    out = []
    for (system, master), group in groups.items():
        figures = {key for row in group for key, value in row.items()
                   if isinstance(value, (int, float)) and key not in ("run", "records", "record_bytes")}
        out.append({"system": system, "master": master, "runs": len(group), "median": {
            key: statistics.median(row[key] for row in group if isinstance(row.get(key), (int, float)))
            for key in sorted(figures)}})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--masters", default="local[1],local[2]",
                        help="Spark masters; `standalone`: a devstack cluster started for the run (a master, two "
                             "1-core workers; rows go to catchup_throughput_standalone.json)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every system, interleaved")
    parser.add_argument("--preload-processes", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--driver-copy-limit", type=int, help="passed to the catch-up (0: Spark copies every range)")
    parser.add_argument("--driver-threads", type=int, help="passed to the catch-up (default: its own, 4)")
    parser.add_argument("--append", action="store_true", help="add the rows to the results file (another record size)")
    args = parser.parse_args(argv)
    rows = []
    with bench_stack() as stack, tempfile.TemporaryDirectory() as workdir, standalone(args.masters, workdir) as masters:
        topic = f"bench-cu-{args.size}-{uuid.uuid4().hex[:8]}"
        seconds = preload(stack["source"].kafka.bootstrap_servers, topic, args.records, args.size, args.preload_processes)
        print(json.dumps({"preload_s": round(seconds, 1), "records": args.records}), flush=True)
        # Interleaved, so that the machine's load (shared cores) hits every system alike.
        for run in range(args.repeats):
            worker = measure_worker(stack, topic, args.records, args.size, Path(workdir), run)
            rows.append(worker)
            print(json.dumps(worker), flush=True)
            for master in masters:
                row = measure_catchup(stack, topic, args.records, args.size, master, Path(workdir), run,
                                      args.driver_copy_limit, args.driver_threads)
                row["copy_phase_ratio_vs_worker"] = round(row["copy_phase_msgs_per_s"] / worker["msgs_per_s"], 2)
                row["end_to_end_ratio_vs_worker"] = round(row["msgs_per_s"] / worker["end_to_end_msgs_per_s"], 2)
                row["cpu_ratio_vs_worker"] = round(row["tasks_cpu_s"] / worker["cpu_s"], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
    for line in medians(rows):
        print(json.dumps(line))
    RESULTS.mkdir(exist_ok=True)
    results = RESULTS / ("catchup_throughput_standalone.json" if "standalone" in args.masters
                         else "catchup_throughput.json")
    earlier = json.loads(results.read_text()) if args.append and results.exists() else []
    results.write_text(json.dumps(earlier + rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

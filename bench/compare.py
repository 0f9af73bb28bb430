"""The worker against Apache MirrorMaker 2 and a bare confluent-kafka copy loop, side by side (`make bench`).

    .venv/bin/python -m bench.compare [--records 1000000] [--sizes 100,1024] [--repeats 3]
        [--systems worker,mm2,bare,worker-eos,mm2-eos] [--procs 1] [--latency-s 5] [--latency-rate 10000,half]
        [--rss-records 10000000]

`--procs N` runs every system with N processes/tasks; a system may set its own as `system@N`
(`--systems worker@1,worker@2`). With `--procs N` > 1 and `worker` among the systems, `worker@1` runs
too, as the one-process baseline: the ratio `worker/worker@1` says whether N processes beat one.

On two Kafka nodes started for the run (or, --running-stack, the running stack), for each record size:
preload `--records` keyed records (10,000 keys, `--partitions` partitions; distinct JSON-ish values that
lz4 compresses 2-3x, see record_values) into a `source` topic, then
run each system in turn, alternating (worker mm2 bare worker-eos worker mm2 ...), each on the same
brokers and the same preloaded topic, each as a fresh process with a fresh group writing to its own
destination topics (`<run>.<topic>`). Per run:

  throughput  timed from the launch of the mirror process until the destination's high watermarks
              sum to all preloaded records (polled every 50 ms): msgs_per_s = records / that time.
              It includes the process start-up (JVM, group join, topic creation); copy_msgs_per_s is
              the rate from the first record seen on the destination to the last, without start-up.
  cpu_s       user+system CPU seconds of the mirror's process tree over that same interval.
  broker_cpu_s  the same for the two Kafka nodes (they share the cores: a system that makes the brokers
              work harder per record is slower on this machine even at the same cpu_s).
  peak_rss    the largest sum of RSS over the process tree, sampled every 50 ms while copying.
  latency     then, with the same process still running, records are produced live into a second
              topic at each rate of --latency-rate (default: 10,000 msgs/s, an ordinary rate, then half
              of the worker's copy rate measured by the first worker run at this size) for --latency-s
              seconds each; a separate process reads partition 0 of its destination topic and takes
              now - produce time (written in each value) per record; the first second is warm-up and
              not counted. p50/p99 in ms. Exactly-once systems (worker-eos, mm2-eos) are read read_committed.
  transactions  (exactly-once systems) partition 0 of the destination read read_committed holds exactly
              the source's records and its high watermark is past them (transaction markers): a run
              that copied at-least-once fails the bench (bench.common.check_transactional).

Then (worker only) RSS over --rss-records records at 100 B, sampled every second. The figures are
medians over the repeats, after --warm-up-runs (1) uncounted runs of every system at the first size
(each system's first run on fresh brokers was its slowest: WARM_UP_RUNS); the machine's load average is
recorded with them, since the machine is shared and the figures are noisy. Writes
bench/results/latest.json (median rows), latest-runs.json (every run, settings, load, RSS series, the
warm-up runs marked) and latest.md (the table docs/benchmarks/index.md includes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer

from bench.charts import redraw
from bench.common import bench_stack
from bench.harness import (
    DEFAULT_SYSTEMS,
    RESULTS,
    SYSTEMS,
    Clusters,
    delete_topics,
    end_total,
    latency_labels,
    launch,
    preload,
    refuse_missing_flags,
    run_one,
    stop,
    system_procs,
    tree_rss_mib,
    warm_up,
)
from bench.report import markdown, medians, ratios

# Why a warm-up run of each system before the first size's repeats (--warm-up-runs, not in the medians): on the
# brokers started for the run, every system's first run was its slowest, however warm_up had primed them. In the
# two `make bench` runs of stop 41, at 100 B and 10,000 msgs/s, repeat 0's p99 against the next two: worker
# 138 / 130 ms vs 13-19, mm2 194 / 170 vs 16-30, worker-eos 146 / 217 vs 73-122, mm2-eos 183 / 119 vs 62-69;
# and on 300k x 100 B runs the first exactly-once run's p50 was 276-846 ms, the second's 45-60.
WARM_UP_RUNS = 1


# ------------------------------------------------------------------------------------------- RSS over many records
def rss_over_records(clusters: Clusters, records: int, workdir: Path, args, size: int = 100,
                     mirror: Clusters | None = None) -> dict:
    """The worker's RSS, sampled each second while it copies `records` of `size` B. `mirror`: the addresses the
    worker reaches the clusters at (bench.wan: through the proxies), when not `clusters` (the bench's own)."""
    topic = f"bench-rss-{uuid.uuid4().hex[:6]}"
    preload(clusters.source, topic, records, size, args.partitions)
    alias = f"r{uuid.uuid4().hex[:6]}"
    watcher = Consumer({"bootstrap.servers": clusters.destination, "group.id": "bench-watch"})
    proc = launch("worker", mirror or clusters, [topic], alias, workdir, args)
    series = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.run_timeout * 4 and proc.poll() is None:
            total = end_total(watcher, f"{alias}.{topic}", args.partitions)
            series.append((round(time.monotonic() - started, 1), total, round(tree_rss_mib(proc.pid), 1)))
            if total >= records:
                break
            time.sleep(1.0)
    finally:
        stop(proc)
        watcher.close()
        delete_topics(clusters.destination, f"{alias}.")
        delete_topics(clusters.source, topic)
    copying = [rss for _, total, rss in series if 0 < total]
    return {"records": records, "record_bytes": size, "series": series,
            "rss_mib_max": max(copying, default=None),
            "rss_mib_at_quarters": [_rss_at(series, records * q / 4) for q in (1, 2, 3, 4)]}


def _rss_at(series: list, records: float) -> float | None:
    return next((rss for _, total, rss in series if total >= records), None)


def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    """This bench's flags (bench.wan takes them too, with its own defaults)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="preloaded records per size")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm-up-runs", type=int, default=WARM_UP_RUNS,
                        help="runs of every system before the first size's repeats, not counted (see WARM_UP_RUNS)")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                        help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--procs", type=int, default=1, help="worker --num.streams, MM2 tasks.max, bare processes")
    parser.add_argument("--worker-args", default="", help="extra worker flags, e.g. '--queue.size 20000'")
    parser.add_argument("--latency-s", type=float, default=5.0, help="live-record seconds per run; 0: no latency")
    parser.add_argument("--latency-rate", default="10000,half",
                        help="live msgs/s for the latency runs, comma-separated; 'half': half the worker's copy rate")
    parser.add_argument("--rss-records", type=int, default=10_000_000, help="worker RSS run over this many records; 0: skip")
    parser.add_argument("--base-tree", default=None, metavar="DIR",
                        help="system worker-base runs the worker from this checkout (e.g. a git worktree of main)")
    parser.add_argument("--mm2-heap-mb", type=int, default=512)
    parser.add_argument("--mm2-poll-records", type=int, default=2500, help="MM2 max.poll.records (the worker's batch)")
    parser.add_argument("--kafka-heap-mb", type=int, default=768, help="heap of the brokers this run starts")
    parser.add_argument("--kafka-gc", choices=["serial", "g1"], default="serial", help="the brokers' collector")
    parser.add_argument("--consumer-props", default="",
                        help="k=v,... added to the worker's consumer .properties (to try a client setting)")
    parser.add_argument("--producer-props", default="", help="k=v,... added to the worker's producer .properties")
    parser.add_argument("--running-stack", action="store_true",
                        help="measure on the running stack (make stack-up) instead of two private Kafka nodes")
    parser.add_argument("--logs", default=None, help="keep each run's configs and logs here (default: a temp dir)")
    parser.add_argument("--run-timeout", type=float, default=300)
    parser.add_argument("--out", default=str(RESULTS / "latest"), help="output path without extension")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.procs > 1 and "worker" in systems and "worker@1" not in systems:
        systems.insert(systems.index("worker") + 1, "worker@1")  # the one-process baseline
    unknown = {system_procs(s, args.procs)[0] for s in systems} - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    refuse_missing_flags(parser, systems, args)
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict] = []
    rss = None
    with bench_stack(kafka_only=True, kafka_heap_mb=args.kafka_heap_mb, reuse_running=args.running_stack,
                     kafka_gc=args.kafka_gc) as stack, \
            tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        clusters = Clusters(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        args.broker_pids = [pid for pid in (stack[c].kafka.process.pid() for c in ("source", "destination")) if pid]
        workdir = Path(args.logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"brokers warm: produce->consume p50 {warm_up(clusters, args.partitions)} ms", flush=True)
        for size in sizes:
            topic = f"bench-{size}-{uuid.uuid4().hex[:6]}"
            took = preload(clusters.source, topic, args.records, size, args.partitions)
            print(f"preloaded {args.records:,} x {size} B into {topic} in {took:.1f}s", flush=True)
            half_rate = None
            # Warm-up runs (negative repeats) on the first size: kept in the runs, not in the medians.
            for repeat in range(-args.warm_up_runs if size == sizes[0] else 0, args.repeats):
                for system in systems:
                    row = run_one(system, size, repeat, clusters, topic, workdir, args, half_rate)
                    if repeat < 0:
                        row["warm_up"] = True
                    elif system == "worker" and half_rate is None and row.get("copy_msgs_per_s"):
                        half_rate = row["copy_msgs_per_s"] / 2  # half the worker's rate, for every system
                    runs.append(row)
                    print(json.dumps(row), flush=True)
            delete_topics(clusters.source, topic)
        if args.rss_records > 0 and "worker" in systems:
            rss = rss_over_records(clusters, args.rss_records, workdir, args)
            print(json.dumps({k: v for k, v in rss.items() if k != "series"}), flush=True)
    labels = latency_labels(args.latency_rate) if args.latency_s > 0 else []
    rows = medians(runs, systems, sizes, labels)
    ratio_rows = ratios(rows)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(), "records": args.records,
        "repeats": args.repeats, "procs": args.procs, "partitions": args.partitions, "worker_args": args.worker_args,
        "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()], "rss": rss,
        "latency_labels": labels, "latency_rate": args.latency_rate, "warm_up_runs": args.warm_up_runs,
        "kafka": {"heap_mb": args.kafka_heap_mb, "gc": args.kafka_gc},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    out.with_name(out.name + "-runs.json").write_text(
        json.dumps({"meta": meta, "ratios": ratio_rows, "runs": runs}, indent=2) + "\n")
    table = markdown(rows, ratio_rows, meta)
    out.with_suffix(".md").write_text(table)
    redraw(out.name, out.parent)  # the docs' charts of this result, when a page shows it (bench/charts.py)
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

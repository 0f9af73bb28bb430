"""What librdkafka's statistics cost at width: one consumer reading `--width` partitions for `--seconds`, in a
fresh process per variant, side by side (issue 42).

    .venv/bin/python -m bench.stats_width [--width 5000] [--seconds 40] [--interval-ms 5000] [--repeats 2]

Variants: `none` (statistics.interval.ms unset), `empty` (statistics on, a callback that does nothing: what
librdkafka spends building the report and handing it over) and `parse` (json.loads of each report). Per variant:
the process's CPU-seconds (every thread), the callbacks' own CPU, reports seen and their size, peak RSS. Two
private Kafka nodes; 200,000 records of 100 B preloaded over topics of 10 partitions. (The worker's own callback,
health and per-partition lag gauges, is not run here: the benchmarks reach the worker only through its public
surfaces. The probe this was tidied from ran it too: `bench/results/width-stats-5000/consumer-probe.jsonl`.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid

VARIANTS = ("none", "empty", "parse")


def child(variant: str, bootstrap: str, topics: list[str], interval_ms: str, seconds: float) -> dict:
    import psutil
    from confluent_kafka import Consumer

    spent = {"cb_cpu_s": 0.0, "reports": 0, "report_bytes": 0}
    settings = {"bootstrap.servers": bootstrap, "group.id": f"stats-width-{variant}-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.max.bytes": 4 * 2**20}
    if variant != "none":
        def stats(report: str) -> None:
            started = time.process_time()
            spent["report_bytes"] = max(spent["report_bytes"], len(report))
            if variant == "parse":
                json.loads(report)
            spent["cb_cpu_s"] += time.process_time() - started
            spent["reports"] += 1

        settings.update({"statistics.interval.ms": interval_ms, "stats_cb": stats})
    consumer = Consumer(settings)
    consumer.subscribe(topics)
    me, records, peak = psutil.Process(), 0, 0
    cpu_start, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        records += len(consumer.consume(5000, 0.5))
        peak = max(peak, me.memory_info().rss)
    cpu = time.process_time() - cpu_start
    consumer.close()
    return {"variant": variant, "records": records, "cpu_s": round(cpu, 2), "cb_cpu_s": round(spent["cb_cpu_s"], 2),
            "reports": spent["reports"], "report_bytes": spent["report_bytes"], "peak_rss_mib": round(peak / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--interval-ms", default="5000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=4, metavar=("VARIANT", "BOOTSTRAP", "TOPICS", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        variant, bootstrap, topics, seconds = args.child
        print(json.dumps(child(variant, bootstrap, topics.split(","), args.interval_ms, float(seconds))), flush=True)
        return 0
    from bench.common import bench_stack
    from bench.width import preload, topics_for

    with bench_stack(kafka_only=True, kafka_heap_mb=1024, reuse_running=False) as stack:
        source = stack["source"].kafka.bootstrap_servers
        topics, partitions = topics_for(args.width, uuid.uuid4().hex[:4])
        preload(source, topics, partitions, 200_000, 100)
        for _ in range(args.repeats):
            for variant in VARIANTS:
                out = subprocess.run([sys.executable, "-m", "bench.stats_width", "--interval-ms", args.interval_ms,
                                      "--child", variant, source, ",".join(topics), str(args.seconds)],
                                     capture_output=True, text=True)
                print(out.stdout.strip() or f"{variant}: failed: {out.stderr[-500:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

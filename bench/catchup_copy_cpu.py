"""The catch-up's copy alone (no Spark) against the worker: CPU seconds per million records, same topic, same run.

    .venv/bin/python -m bench.catchup_copy_cpu [--records 2000000] [--size 100] [--threads 1,4] [--repeats 2]

Preloads one topic (6 partitions) into `source`, then per repeat runs the worker (`bench.catchup_throughput`'s
measure_worker) and `spark_jobs.api.copy_task` over the 6 whole ranges in this process, on each
thread count (the driver's copy: one range per thread at a time), each into a destination topic of its own.
The copy's CPU is this process's (librdkafka's threads included); the worker's, its process's. Prints one
JSON line per run; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.catchup_throughput import measure_worker, preload
from bench.common import bench_stack
from bench.worker_throughput import PARTITIONS
from mirror_worker.batch_api import consumer_settings, producer_settings
from spark_jobs.api import COPY_CONSUMER, CopySettings, CopyTask, copy_task


def copy_settings(src: str, dst: str, group: str) -> CopySettings:
    """The catch-up's client settings (spark_jobs.catchup.job.reader_conf / producer_conf) for plain clusters."""
    consumer = {**consumer_settings({"bootstrap.servers": src, "group.id": group}, "bench"),
                "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error",
                "isolation.level": "read_committed", **COPY_CONSUMER}
    return CopySettings(consumer=consumer, producer=producer_settings({"bootstrap.servers": dst}, "bench", 100_000),
                        progress_interval_s=3600)


def measure_copy(src: str, dst: str, topic: str, ends: dict[int, int], threads: int, prefix: str) -> dict:
    admin = AdminClient({"bootstrap.servers": dst})
    admin.create_topics([NewTopic(prefix + topic, PARTITIONS, 1)])[prefix + topic].result(30)
    settings = copy_settings(src, dst, f"bench-copy-{prefix}{topic}")
    tasks = [CopyTask(topic, p, 0, ends[p], prefix + topic, p) for p in range(PARTITIONS)]
    cpu, started = time.process_time(), time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        copied = sum(r[0] for r in pool.map(lambda task: copy_task(task, settings, emit=lambda _e: None), tasks))
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    return {"system": f"copy_task x{threads}", "records": copied, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "cpu_s_per_million": round(cpu / copied * 1e6, 2), "msgs_per_s": round(copied / wall)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    with bench_stack() as stack:
        src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
        topic = f"copy-cpu-{uuid.uuid4().hex[:8]}"
        preload(src, topic, args.records, args.size, 2)
        probe = Consumer({"bootstrap.servers": src, "group.id": "bench-probe"})
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        probe.close()
        for run in range(args.repeats):
            worker = measure_worker(stack, topic, args.records, args.size, Path(tempfile.mkdtemp()), 100 + run)
            print(json.dumps({"system": "worker", "run": run, "cpu_s": worker["cpu_s"],
                              "cpu_s_per_million": round(worker["cpu_s"] / args.records * 1e6, 2),
                              "msgs_per_s_from_first_record": worker["msgs_per_s"], "wall_s": worker["wall_s"]}))
            for threads in (int(t) for t in args.threads.split(",")):
                print(json.dumps({**measure_copy(src, dst, topic, ends, threads, f"cc{run}x{threads}."), "run": run}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

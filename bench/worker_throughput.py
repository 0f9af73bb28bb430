"""Throughput of the mirror worker on the local stack: msgs/s, MB/s, CPU seconds, peak RSS.

    .venv/bin/python -m bench.worker_throughput [--records 500000] [--sizes 100,1024] [--repeats 1] [--schemas]

Preloads keyed records (6 partitions) into `source`, starts `python -m mirror_worker` (at-least-once,
--preserve.partitions) with a fresh group and times it from the first mirrored record until the
destination holds them all. Uses the running stack (`make stack-up`) or starts one for the run.
--schemas: values in schema-registry framing (an id registered on the source registry), the worker given
both registries, so every record's schema id is rewritten. Writes bench/results/worker_throughput.json. The Benchmark issue (#7) compares with MirrorMaker 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack
from devstack import Stack, paths

PARTITIONS = 6
RESULTS = Path(__file__).resolve().parent / "results"


def preload(bootstrap: str, topic: str, records: int, size: int, header: bytes = b"") -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    payload = header + os.urandom(size - len(header))
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, f"key-{i % 10_000}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def end_total(consumer: Consumer, topic: str) -> int:
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))


def watch_until(watcher: Consumer, topic: str, records: int, timeout_s: float) -> tuple[float | None, int, float]:
    """Poll the destination topic's log ends until they hold `records`: (when the first record showed up,
    how many were there then, when the last one did)."""
    first, first_count = None, 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            done = end_total(watcher, topic)
        except Exception:  # the destination topic does not exist yet
            done = 0
        now = time.monotonic()
        if done and first is None:
            first, first_count = now, done
        if done >= records:
            break
        time.sleep(0.05)
    return first, first_count, time.monotonic()


def watch_worker(worker: subprocess.Popen, watcher: Consumer, topic: str, records: int, timeout_s: float):
    """`watch_until`, then the worker's CPU seconds and peak RSS; the worker is stopped and the watcher closed
    whatever happens: (first, first_count, finished, cpu_s, rss_mib)."""
    try:
        first, first_count, finished = watch_until(watcher, topic, records, timeout_s)
        cpu, rss = proc_stats(worker.pid)
    finally:
        worker.terminate()
        worker.wait(60)
        watcher.close()
    return first, first_count, finished, cpu, rss


def proc_stats(pid: int) -> tuple[float, float]:
    """(cpu seconds of the process and its children, peak RSS MiB of the process)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sum(int(x) for x in stat[11:15]) / ticks
    hwm = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    return cpu, hwm / 1024


def measure(stack: Stack, records: int, size: int, workdir: Path, schemas: bool = False) -> dict:
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"bench-{size}-{uuid.uuid4().hex[:8]}"
    header, registry_flags = b"", []
    if schemas:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        from mirror_worker.batch_api import wire_format

        schema_id = SchemaRegistryClient({"url": stack["source"].registry.url}).register_schema(
            f"{topic}-value", Schema('{"type": "bytes"}', "AVRO"))
        header = wire_format.header(schema_id)
        registry_flags = ["--schema.registry.url", stack["source"].registry.url,
                          "--destination.schema.registry.url", stack["destination"].registry.url]
    preload(src, topic, records, size, header)
    consumer_cfg = workdir / "source.properties"
    consumer_cfg.write_text(f"bootstrap.servers={src}\ngroup.id=bench-{topic}\n")
    producer_cfg = workdir / "destination.properties"
    producer_cfg.write_text(f"bootstrap.servers={dst}\n")
    watcher = Consumer({"bootstrap.servers": dst, "group.id": "bench-watch"})
    worker = subprocess.Popen(
        [sys.executable, "-m", "mirror_worker", "--consumer.config", str(consumer_cfg), "--producer.config",
         str(producer_cfg), "--whitelist", topic, "--preserve.partitions", "--offset.commit.interval.ms", "5000", *registry_flags],
        cwd=paths.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    first, first_count, finished, cpu, rss = watch_worker(worker, watcher, topic, records, 600)
    elapsed = finished - first
    mirrored = records - first_count
    return {
        "system": "worker", "schemas": schemas, "record_bytes": size, "records": records,
        "msgs_per_s": round(mirrored / elapsed), "mb_per_s": round(mirrored * size / elapsed / 1e6, 2),
        "cpu_s": round(cpu, 2), "peak_rss_mib": round(rss, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--schemas", action="store_true", help="framed values, schema ids rewritten")
    args = parser.parse_args(argv)

    rows = []
    with bench_stack() as stack, tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.repeats):
            for size in (int(s) for s in args.sizes.split(",")):
                row = measure(stack, args.records, size, Path(workdir), args.schemas)
                rows.append(row)
                print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "worker_throughput.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| record bytes | msgs/s | MB/s | CPU s | peak RSS MiB |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['record_bytes']} | {row['msgs_per_s']:,} | {row['mb_per_s']} | {row['cpu_s']} | {row['peak_rss_mib']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

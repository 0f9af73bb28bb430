"""Throughput of the consistency check on the local stack: source records verified per second.

    .venv/bin/python -m bench.verify_throughput [--records 200000] [--size 100] [--partitions 6]

Preloads keyed records with a header into `source` and a clean copy (same partition, key, value,
headers, timestamp, plus the provenance header) into `destination`, then times one run of
`python spark_jobs/consistency_check.py` over the whole topic (local[*]). Reports records/s over the
whole run (JVM start included) and over the check alone (after the Spark session is up). Uses the
running stack (`make stack-up`) or starts one for the run. Writes bench/results/verify_throughput.json.
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
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack
from devstack import Stack, paths
from mirror_worker.worker import PROVENANCE_HEADER, provenance_value

RESULTS = Path(__file__).resolve().parent / "results"
PREFIX = "bench."


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all",
                     "enable.idempotence": True, "compression.type": "lz4",
                     "queue.buffering.max.messages": 1_000_000})


def _send(producer: Producer, *args, **kwargs) -> None:
    while True:
        try:
            producer.produce(*args, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def preload(source: str, destination: str, topic: str, records: int, size: int, partitions: int) -> None:
    """Source records and their clean copy. Offsets are known without reading back: the topic is new and
    each partition is written in order by one idempotent producer."""
    for bootstrap, name in ((source, topic), (destination, PREFIX + topic)):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    cluster_id = AdminClient({"bootstrap.servers": source}).list_topics(timeout=10).cluster_id
    src, dst = _producer(source), _producer(destination)
    padding = os.urandom(size)
    base_ms = int(time.time() * 1000) - records
    next_offset = [0] * partitions
    for i in range(records):
        partition = i % partitions
        key, value = f"key-{i}".encode(), str(i).encode() + padding[: max(0, size - 8)]
        headers = [("n", str(i).encode())]
        _send(src, topic, value, key, partition, timestamp=base_ms + i, headers=headers)
        offset = next_offset[partition]
        provenance = (PROVENANCE_HEADER, provenance_value("source", cluster_id, topic, partition, offset))
        _send(dst, PREFIX + topic, value, key, partition, timestamp=base_ms + i, headers=[*headers, provenance])
        next_offset[partition] += 1
    assert src.flush(120) == 0 and dst.flush(120) == 0
    watcher = Consumer({"bootstrap.servers": source, "group.id": "bench-verify-watch"})
    try:
        ends = [watcher.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        watcher.close()
    if ends != next_offset:
        raise RuntimeError(f"source offsets {ends} differ from the ones the copy assumed {next_offset}")


def _log_time(entries: list[dict], message: str) -> float:
    entry = next(e for e in entries if e.get("msg") == message)
    return datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()


def measure(stack: Stack, records: int, size: int, partitions: int, workdir: Path) -> dict:
    source, destination = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"bench-verify-{uuid.uuid4().hex[:8]}"
    report = workdir / f"{topic}.json"
    try:
        preload(source, destination, topic, records, size, partitions)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "spark_jobs/consistency_check.py", "--source.bootstrap.servers", source,
             "--destination.bootstrap.servers", destination, "--topics", topic, "--prefix", PREFIX,
             "--report", str(report)],
            cwd=paths.ROOT, capture_output=True, text=True, timeout=1800,
        )
        wall = time.monotonic() - started
    finally:
        for bootstrap, name in ((source, topic), (destination, PREFIX + topic)):
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.delete_topics([name])[name].exception(30)
    if proc.returncode != 0:
        raise RuntimeError(f"check exited {proc.returncode}: {proc.stderr[-2000:]}")
    result = json.loads(report.read_text())
    if result["totals"]["checked"] != records or result["status"] != "ok":
        raise RuntimeError(f"unexpected report totals {result['totals']}")
    entries = []
    for line in proc.stdout.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            pass
    check_s = _log_time(entries, "check finished") - _log_time(entries, "spark session ready")
    return {
        "system": "consistency_check", "records": records, "record_bytes": size, "partitions": partitions,
        "wall_s": round(wall, 1), "check_s": round(check_s, 1),
        "records_per_s": round(records / wall), "records_per_s_check_only": round(records / check_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args(argv)

    with bench_stack() as stack, tempfile.TemporaryDirectory() as workdir:
        row = measure(stack, args.records, args.size, args.partitions, Path(workdir))
    print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "verify_throughput.json").write_text(json.dumps([row], indent=2) + "\n")
    print("\n| records | record bytes | partitions | wall s | records/s | check s | records/s (check only) |\n"
          "|---|---|---|---|---|---|---|")
    print(f"| {row['records']:,} | {row['record_bytes']} | {row['partitions']} | {row['wall_s']} | "
          f"{row['records_per_s']:,} | {row['check_s']} | {row['records_per_s_check_only']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

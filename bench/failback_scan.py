"""What a failback mirror's start costs: the backward scan for the forward mirror's last copy, at volume.

    .venv/bin/python -m bench.failback_scan [--copies 1000000] [--after 0,100000,1000000] [--size 100]

On a Kafka node started for the run (the promoted cluster), one single-partition topic per --after value
holds --copies records carrying a provenance header that names the old source cluster (the forward
mirror's copies), then that many records without one (written after the failover). Per topic, the
reverse mirror's start rule (`mirror_worker.dr.failback.failback_start` through the worker's own
read_committed reader) finds where to start; the table gives the seconds, the records it read and the
start it found. The scan's cost should follow the records written since the failover, not the topic.
Writes bench/results/failback_scan.json.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from datetime import datetime
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.common import bench_stack
from bench.harness import create_topics
from mirror_worker.batch_api import PROVENANCE_HEADER, committed_reader, failback_start, provenance_value

RESULTS = Path(__file__).resolve().parent / "results"
OLD_SOURCE = "old-source-cluster-id"


def fill(bootstrap: str, topic: str, copies: int, after: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for offset in range(copies + after):
        headers = [(PROVENANCE_HEADER, provenance_value("east", OLD_SOURCE, "orders", 0, offset))] \
            if offset < copies else None
        while True:
            try:
                producer.produce(topic, value, partition=0, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if offset % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit(f"{topic}: records left unflushed")


def scan(bootstrap: str, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    reader = committed_reader({"bootstrap.servers": bootstrap}, admin, "bench-failback-scan", where="the node")
    try:
        low, high = reader.bounds(topic, 0)
        started = time.monotonic()
        point = failback_start(reader.records, topic, 0, low, high, OLD_SOURCE)
        seconds = time.monotonic() - started
    finally:
        reader.close()
    return {"start": point.offset, "last_copy": point.last_copy, "records_read": point.records_read,
            "seconds": round(seconds, 2), "end": high}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1_000_000)
    parser.add_argument("--after", default="0,100000,1000000", help="comma list: records after the last copy")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    args = parser.parse_args()
    runs = []
    with bench_stack(kafka_only=True, reuse_running=False) as stack:
        bootstrap = stack["destination"].kafka.bootstrap_servers
        for after in (int(a) for a in args.after.split(",")):
            topic = f"failback-scan-{uuid.uuid4().hex[:8]}"
            create_topics(bootstrap, [topic], 1)
            fill(bootstrap, topic, args.copies, after, args.size)
            result = {"copies": args.copies, "after": after, **scan(bootstrap, topic)}
            assert result["start"] == args.copies, result  # just after the last copy
            runs.append(result)
            print(json.dumps(result), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "failback_scan.json").write_text(json.dumps(
        {"when": datetime.now().isoformat(timespec="seconds"), "size": args.size, "runs": runs}, indent=2) + "\n")
    print(f"\n| records in the topic | written after the failover | records read | seconds | records read/s |")
    print("|---|---|---|---|---|")
    for r in runs:
        rate = r["records_read"] / r["seconds"] if r["seconds"] else 0
        print(f"| {r['copies'] + r['after']:,} | {r['after']:,} | {r['records_read']:,} | {r['seconds']} | {rate:,.0f} |")


if __name__ == "__main__":
    main()

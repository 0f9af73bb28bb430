"""What one record waiting in a producer's queue costs in memory, beyond its bytes (librdkafka + confluent-kafka).

    .venv/bin/python -m bench.record_cost [--records 180000] [--sizes 100,1024]

Why: the worker's in-flight budget counts RECORD_OVERHEAD_BYTES for every record queue.size allows
(mirror_worker/config/inflight.py), and 100 B records 200 ms away need 180,000 of them in flight. Each case runs in
a fresh process: a producer whose bootstrap server does not answer (nothing is sent, so every record stays queued)
is handed --records records of the size, produced as the hot path does (key, value, partition, delivery callback,
timestamp, by position), and the growth of the process's RSS is divided by the records. What this does not see:
a record in flight also sits, encoded, in a produce request's buffer (and compressed, in a second one).
Writes bench/results/record-cost.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer

from devstack.process import rss_mib

RESULTS = Path(__file__).resolve().parent / "results"
KEY_BYTES = 10


def queued_cost(records: int, size: int) -> float:
    """Bytes of RSS a queued record of `size` bytes (key included) adds, in this process."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": records + 10,
                         "queue.buffering.max.kbytes": 2 ** 21, "linger.ms": 60000, "enable.idempotence": True,
                         "logger": lambda *_: None})
    key, value = b"k" * KEY_BYTES, b"v" * max(0, size - KEY_BYTES)
    produce = producer.produce

    def delivered(err, msg) -> None:
        pass

    before = rss_mib(os.getpid())
    for i in range(records):
        produce("t", value, key, i % 6, delivered, None, 1_700_000_000_000 + i)
    grown = rss_mib(os.getpid()) - before
    producer.purge()
    return grown * 1024 * 1024 / records


def table(rows: list[tuple[int, int, float]]) -> str:
    lines = ["| record bytes | records queued | RSS a record (B) | beyond its bytes (B) |", "|---:|---:|---:|---:|"]
    lines += [f"| {size:,} | {records:,} | {cost:,.0f} | {cost - size:,.0f} |" for size, records, cost in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=180_000)
    parser.add_argument("--sizes", default="100,1024", help="record sizes in bytes (key and value), comma-separated")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: measure this size, print the cost
    args = parser.parse_args(argv)
    if args.one is not None:
        print(queued_cost(args.records, args.one))
        return
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, "-m", "bench.record_cost", "--records", str(args.records),
                              "--one", str(size)], check=True, capture_output=True, text=True).stdout
        rows.append((size, args.records, float(out.strip().splitlines()[-1])))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"# A queued record's memory ({when})\n\n`.venv/bin/python -m bench.record_cost --records " \
           f"{args.records} --sizes {args.sizes}`\n\n{table(rows)}\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "record-cost.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""End-to-end latency on the destination: now minus the produce time written into each record's value.

    .venv/bin/python -m bench.latency_probe --bootstrap HOST:PORT --topic T --partitions 0 [--timeout 60]
    (prints "ready" once connected, then reads "FROM_TS UNTIL_TS" from stdin)

Reads the given partitions of T from the beginning; each value starts with the produce time
(little-endian double, seconds since the epoch, see bench.harness.live_value). Records produced in
[FROM_TS, UNTIL_TS) count (the caller starts producing only after "ready": the probe's own start-up,
slow on a loaded machine, never counts as latency); the probe stops at the first record produced at or after until-ts (or at
the timeout) and prints one JSON line {"count", "p50_ms", "p99_ms", "max_ms"}. A separate process,
so its work never competes for the GIL with the producer of the live records.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", default="0")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--read-committed", action="store_true", help="see only committed transactions")
    args = parser.parse_args(argv)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-latency", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
                         "isolation.level": "read_committed" if args.read_committed else "read_uncommitted"})
    consumer.assign([TopicPartition(args.topic, int(p), OFFSET_BEGINNING) for p in args.partitions.split(",")])
    # Connected, and the partitions' positions known, before the live records start.
    deadline = time.monotonic() + args.timeout
    for partition in args.partitions.split(","):
        while True:
            try:
                consumer.get_watermark_offsets(TopicPartition(args.topic, int(partition)), timeout=10)
                break
            except KafkaException:  # a topic created a moment ago: its leader is still being elected
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    consumer.consume(1, 0.1)
    print("ready", flush=True)
    from_ts, until_ts = (float(x) for x in sys.stdin.readline().split())
    unpack = struct.Struct("<d").unpack_from
    latencies: list[float] = []
    deadline = time.monotonic() + args.timeout
    done = False
    while not done and time.monotonic() < deadline:
        batch = consumer.consume(500, 0.005)  # returns after 5 ms at most: the receive time is exact to 5 ms
        now = time.time()
        for msg in batch:
            if msg.error() or len(msg.value() or b"") < 8:
                continue
            produced = unpack(msg.value())[0]
            if produced >= until_ts:
                done = True
            elif produced >= from_ts:
                latencies.append((now - produced) * 1000)
    consumer.close()
    print(json.dumps({
        "count": len(latencies), "complete": done,
        "p50_ms": _round(percentile(latencies, 0.50)), "p99_ms": _round(percentile(latencies, 0.99)),
        "max_ms": _round(max(latencies) if latencies else None),
    }), flush=True)
    return 0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


if __name__ == "__main__":
    sys.exit(main())

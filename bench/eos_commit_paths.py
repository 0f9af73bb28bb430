"""The exactly-once commit cycle alone, by the way a partition's position joins its transaction (issue 30).

    .venv/bin/python -m bench.eos_commit_paths [--destination HOST:PORT] [--source HOST:PORT]
        [--paths group,group-per-partition,record] [--window-s 20] [--rounds 4] [--rate 10000] [--partitions 6]
        [--producer KEY=VALUE ...] [--busy-threads N] [--switch-interval-ms MS]

One transactional producer per partition, as the worker has, each in its own thread. Every cycle all partitions
produce the records due at `--rate` (100 B), add their position, commit, and open the next transaction; then
they wait ~30 ms (the worker's cadence while caught up). A barrier starts each cycle on every partition at once,
as the worker's commit_many does. The position joins the transaction by one of three paths:

    group                send_offsets_to_transaction to one group for every partition (the worker today)
    group-per-partition  the same, each partition's offsets in a group of its own (no shared group coordinator)
    record               a record in a one-partition compacted topic, produced inside the transaction

Windows of `--window-s` per path, in the order given and then reversed (round by round), on the same brokers,
so drift of a warming broker falls on every path. `--source` adds the source side of a mirror at the same rate
(a producer and a consumer on that cluster, sharing the machine as in `make bench`). Without --destination the
stack of `make stack-up` is used. Prints one line per window and per path over all windows: commit-path time
(position + commit_transaction) p50 / p90 / p99 / max in ms, and its two parts.

What it measured (stop 44, `make stack-up`, 6 partitions, 10,000 msgs/s): see docs/benchmarks/index.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import produce_paced
from bench.latency_probe import percentile

PATHS = ("group", "group-per-partition", "record")
CADENCE_S = 0.03
PAYLOAD = b"x" * 100


def window_order(paths: list[str], rounds: int) -> list[str]:
    """Each round measures every path once, even rounds in the given order and odd ones reversed."""
    return [p for r in range(rounds) for p in (paths if r % 2 == 0 else paths[::-1])]


def summary(cycles: list[tuple[float, float]]) -> dict:
    """Of (position s, commit s) per cycle: the commit path's percentiles in ms, and of each part."""
    total = [a + b for a, b in cycles]
    ms = lambda values, q: round(percentile(values, q) * 1000, 1)  # noqa: E731
    return {"cycles": len(cycles), "p50_ms": ms(total, .5), "p90_ms": ms(total, .9), "p99_ms": ms(total, .99),
            "max_ms": round(max(total) * 1000, 1),
            "position_p99_ms": ms([a for a, _ in cycles], .99), "commit_p99_ms": ms([b for _, b in cycles], .99)}


class Probe:
    def __init__(self, destination: str, partitions: int, rate: int, producer_settings: dict | None = None) -> None:
        self.destination, self.partitions, self.rate = destination, partitions, rate
        self.producer_settings = producer_settings or {}
        run = uuid.uuid4().hex[:8]
        self.data, self.positions, self.group = f"eos-paths-{run}", f"eos-paths-{run}.positions", f"eos-paths-{run}"
        self.admin = AdminClient({"bootstrap.servers": destination})
        created = self.admin.create_topics([NewTopic(self.data, partitions, 1),
                                            NewTopic(self.positions, 1, 1, config={"cleanup.policy": "compact"})])
        for future in created.values():
            future.result(30)
        # Group metadata without joining, as the worker's PositionStore has it.
        self.readers = [Consumer({"bootstrap.servers": destination, "group.id": g})
                        for g in [self.group] + [f"{self.group}-{p}" for p in range(partitions)]]
        self.producers = [self._producer(f"{self.group}-{p}") for p in range(partitions)]
        # Records each partition's windows produced so far: the position its next commit writes (a window's
        # records after its last commit go with the next window's first one).
        self.sent = [0] * partitions

    def _producer(self, transactional_id: str) -> Producer:
        producer = Producer({"bootstrap.servers": self.destination, "transactional.id": transactional_id,
                             "linger.ms": 1, "retry.backoff.ms": 10, "acks": "all", "enable.idempotence": True,
                             **self.producer_settings})
        producer.init_transactions(30)
        producer.begin_transaction()
        return producer

    def _position(self, path: str, partition: int, offset: int) -> None:
        producer = self.producers[partition]
        if path == "record":
            producer.produce(self.positions, json.dumps([self.data, partition, offset]).encode(),
                             json.dumps([self.data, partition]).encode(), partition=0)
            return
        reader = self.readers[0] if path == "group" else self.readers[1 + partition]
        producer.send_offsets_to_transaction([TopicPartition(self.data, partition, offset, "{}")],
                                             reader.consumer_group_metadata(), 30)

    def window(self, path: str, seconds: float) -> list[tuple[float, float]]:
        barrier = threading.Barrier(self.partitions)
        cycles: list[tuple[float, float]] = []
        stop = time.monotonic() + seconds

        def run(partition: int) -> None:
            producer, started, produced = self.producers[partition], time.monotonic(), 0
            while time.monotonic() < stop:
                due = int((time.monotonic() - started) * self.rate / self.partitions) - produced
                for _ in range(due):
                    producer.produce(self.data, PAYLOAD, partition=partition)
                produced += due
                try:
                    barrier.wait(5)
                except threading.BrokenBarrierError:
                    break  # another partition's window ended first
                began = time.monotonic()
                self._position(path, partition, self.sent[partition] + produced)
                positioned = time.monotonic()
                producer.commit_transaction(30)
                cycles.append((positioned - began, time.monotonic() - positioned))
                producer.begin_transaction()
                time.sleep(CADENCE_S)
            barrier.abort()
            self.sent[partition] += produced

        threads = [threading.Thread(target=run, args=(p,)) for p in range(self.partitions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return cycles


def source_load(source: str, partitions: int, rate: int) -> None:
    """The source side of a mirror at `rate`: a producer and a consumer of one topic, in daemon threads."""
    topic = f"eos-paths-source-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": source, "linger.ms": 5})
        produce_paced(producer, topic, rate, time.time(), lambda _now: False, lambda _i: (PAYLOAD, None))

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": source, "group.id": topic, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        while True:
            consumer.consume(500, 0.1)

    for target in (produce, consume):
        threading.Thread(target=target, daemon=True).start()


def producer_settings(pairs: list[str]) -> dict:
    """KEY=VALUE pairs; true and false as bools (confluent-kafka refuses a string for its own boolean keys,
    such as delivery.report.only.error)."""
    settings: dict = {}
    for key, value in (pair.split("=", 1) for pair in pairs):
        settings[key] = {"true": True, "false": False}.get(value, value)
    return settings


def busy_python() -> None:
    """Pure Python work that holds the GIL between switches, as the worker's hot path does while it copies."""
    while True:
        sum(i * i for i in range(1000))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--destination", help="bootstrap servers (default: the stack of make stack-up)")
    parser.add_argument("--source", help="bootstrap servers of a cluster to load as a mirror's source")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--busy-threads", type=int, default=0,
                        help="threads of pure Python work in this process (the GIL shared as in the worker)")
    parser.add_argument("--switch-interval-ms", type=float,
                        help="sys.setswitchinterval for this process (Python's default: 5 ms)")
    parser.add_argument("--producer", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka setting of the transactional producers (repeatable)")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; known: {', '.join(PATHS)}")
    bad = [s for s in args.producer if "=" not in s]
    if bad:
        parser.error(f"--producer takes KEY=VALUE, got {bad[0]!r}")
    destination = args.destination
    if destination is None:
        from devstack import Stack, paths as stack_paths
        stack = Stack(stack_paths.default_stack_dir())
        if not stack.is_up():
            parser.error("no --destination and no stack running: make stack-up, or name the brokers")
        destination = stack["destination"].kafka.bootstrap_servers
    if args.source:
        source_load(args.source, args.partitions, args.rate)
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    for _ in range(args.busy_threads):
        threading.Thread(target=busy_python, daemon=True).start()
    probe = Probe(destination, args.partitions, args.rate, producer_settings(args.producer))
    measured: dict[str, list] = {path: [] for path in paths}
    for index, path in enumerate(window_order(paths, args.rounds)):
        cycles = probe.window(path, args.window_s)
        measured[path].extend(cycles)
        print(json.dumps({"window": index, "path": path, **summary(cycles)}), flush=True)
    for path, cycles in measured.items():
        print(json.dumps({"path": path, "windows": args.rounds, **summary(cycles)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

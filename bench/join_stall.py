"""What adding a worker to a running mirror costs the worker already running, per assignment strategy.

    .venv/bin/python -m bench.join_stall [--rate 20000] [--partitions 6] [--before-s 10] [--after-s 15]
        [--strategies roundrobin,cooperative-sticky,consumer:range,consumer:uniform] [--repeats 1]

Per strategy, on two Kafka nodes started for the run: a live producer writes --rate records/s of 100 B
(the produce time in each value) into a `busy` topic of --partitions partitions; an `idle` topic of as many
partitions gets nothing (a mirror's topics rarely carry the same load). Worker A (one process, static
membership, slot 0) mirrors both; after --before-s, worker B joins the same group (slot 1); --after-s later
both stop. A reader process follows the destination's `busy` partitions live and keeps, per 100 ms of
arrival time and per partition, the largest latency (arrival minus produce time). From the workers' logs:
which partitions A kept through the join (held before and after), and the share of the busy topic each
worker holds at the end.

Per run: p99 and max latency before the join (A alone); after the join, the largest latency of the
partitions A kept (the stall the join caused to the worker already running: the issue's "must not stall
the others") and of all partitions (the moved ones wait for their new owner); the busy-topic partitions
per worker at the end (balance: a strategy that balances partition counts can leave a whole busy topic on
one worker). `consumer:ASSIGNOR` is the KIP-848 consumer protocol with that broker-side assignor.
Writes bench/results/join_stall.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.common import bench_stack, produce_paced
from bench.harness import create_topics
from devstack import paths

RESULTS = Path(__file__).resolve().parent / "results"
BUCKET_S = 0.1


# ------------------------------------------------------------------ the reader (a separate process)
def read(bootstrap: str, topic: str, partitions: int, seconds: float) -> None:
    """Follow `topic` live; print one JSON line per 100 ms bucket: {"t": bucket start, "max": {p: ms}}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-join-stall", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5, "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    consumer.consume(1, 1.0)
    print("ready", flush=True)
    unpack = struct.Struct("<d").unpack_from
    until = time.time() + seconds
    bucket, worst = int(time.time() / BUCKET_S), {}
    while time.time() < until:
        for msg in consumer.consume(1000, 0.05):
            if msg.error() is None:
                now = time.time()
                latency = (now - unpack(msg.value())[0]) * 1000
                if worst.get(msg.partition(), 0.0) < latency:
                    worst[msg.partition()] = latency
        now_bucket = int(time.time() / BUCKET_S)
        if now_bucket != bucket:
            print(json.dumps({"t": bucket * BUCKET_S, "max": worst}), flush=True)
            bucket, worst = now_bucket, {}
    consumer.close()


# ------------------------------------------------------------------ one run
def produce_live(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    produce_paced(producer, topic, rate, time.time(), lambda _now: stop.is_set(),
                  lambda i: (struct.pack("<d", time.time()) + bytes(92), str(i).encode()))
    producer.flush(30)


def strategy_settings(strategy: str) -> str:
    if strategy.startswith("consumer:"):
        return f"group.protocol=consumer\ngroup.remote.assignor={strategy.split(':', 1)[1]}\n"
    return f"partition.assignment.strategy={strategy}\n"


def start_worker(slot: int, clusters, topics: list[str], group: str, strategy: str, workdir: Path) -> subprocess.Popen:
    source = workdir / f"source-{slot}.properties"
    source.write_text(f"bootstrap.servers={clusters[0]}\ngroup.id={group}\n{strategy_settings(strategy)}")
    destination = workdir / f"destination-{slot}.properties"
    destination.write_text(f"bootstrap.servers={clusters[1]}\n")
    log = open(workdir / f"worker-{slot}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "mirror_worker", "--name", f"stall{slot}", "--consumer.config", str(source),
         "--producer.config", str(destination), "--whitelist", "|".join(topics), "--preserve.partitions",
         "--static.membership", "--worker.slot", str(slot)],
        cwd=paths.ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def holdings(log: Path, until: float | None = None) -> set[str]:
    """Partitions a worker holds (at `until`, epoch seconds; else at the end), from its JSON logs."""
    held: set[str] = set()
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if until is not None and _epoch(entry.get("ts", "")) > until:
            break
        if entry.get("msg") == "partitions assigned":
            held |= set(entry["partitions"])
        elif entry.get("msg") in ("partitions revoked", "partitions lost (not committed)"):
            held -= set(entry["partitions"])
    return held


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() if ts else 0.0


def run_once(strategy: str, clusters: tuple[str, str], args, workdir: Path) -> dict:
    tag = uuid.uuid4().hex[:6]
    busy, idle = f"a-busy-{tag}", f"b-idle-{tag}"  # the busy topic first in name order, as in the bench
    create_topics(clusters[0], [busy, idle], args.partitions)
    group = f"bench-stall-{tag}"
    stop = threading.Event()
    producer = threading.Thread(target=produce_live, args=(clusters[0], busy, args.rate, stop), daemon=True)
    a = start_worker(0, clusters, [busy, idle], group, strategy, workdir)
    b = None
    try:
        _wait_for_topic(clusters[1], busy)
        reader = subprocess.Popen([sys.executable, "-m", "bench.join_stall", "--read", clusters[1], busy,
                                   str(args.partitions), str(args.before_s + args.after_s + 5)],
                                  cwd=paths.ROOT, stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "ready"
        producer.start()
        time.sleep(args.before_s)
        joined = time.time()
        b = start_worker(1, clusters, [busy, idle], group, strategy, workdir)
        time.sleep(args.after_s)
        stop.set()
        buckets = [json.loads(line) for line in reader.stdout]
        reader.wait(30)
    finally:
        stop.set()
        for worker in (a, b):
            if worker is not None:
                worker.terminate()
                worker.wait(60)
    log_a, log_b = workdir / "worker-0.log", workdir / "worker-1.log"
    before = {p for p in holdings(log_a, joined) if p.startswith(busy)}
    after_a = {p for p in holdings(log_a, joined + args.after_s - 0.5) if p.startswith(busy)}
    after_b = {p for p in holdings(log_b, joined + args.after_s - 0.5) if p.startswith(busy)}
    kept = {int(p[p.index("[") + 1:-1]) for p in before & after_a}
    warm = [b for b in buckets if joined - args.before_s + 2 <= b["t"] < joined]
    since = [b for b in buckets if b["t"] >= joined]
    base = sorted(v for b in warm for v in b["max"].values())
    return {
        "strategy": strategy, "rate": args.rate, "partitions": args.partitions,
        "before_p99_ms": round(base[int(0.99 * (len(base) - 1))], 1) if base else None,
        "before_max_ms": round(max(base), 1) if base else None,
        "kept_partitions": sorted(kept),
        "after_join_max_ms_kept": round(max((v for b in since for p, v in b["max"].items() if int(p) in kept),
                                            default=0.0), 1),
        "after_join_max_ms_all": round(max((v for b in since for v in b["max"].values()), default=0.0), 1),
        "busy_partitions_a_b": [len(after_a), len(after_b)],
    }


def _wait_for_topic(bootstrap: str, topic: str, timeout: float = 60) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-join-stall-meta"})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if topic in consumer.list_topics(timeout=5).topics:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the worker did not create {topic} within {timeout}s")
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--read"]:
        read(argv[1], argv[2], int(argv[3]), float(argv[4]))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=20_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--before-s", type=float, default=10)
    parser.add_argument("--after-s", type=float, default=15)
    parser.add_argument("--strategies", default="roundrobin,cooperative-sticky,consumer:range,consumer:uniform")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "join_stall.json"))
    args = parser.parse_args(argv)
    rows = []
    with bench_stack(kafka_only=True, reuse_running=False) as stack:
        clusters = (stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        for repeat in range(args.repeats):
            for strategy in args.strategies.split(","):
                with tempfile.TemporaryDirectory(prefix="join-stall-") as tmp:
                    row = {"repeat": repeat, **run_once(strategy, clusters, args, Path(tmp))}
                print(json.dumps(row), flush=True)
                rows.append(row)
    Path(args.out).write_text(json.dumps({"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                          "rows": rows}, indent=2) + "\n")
    print(f"\n| strategy | before p99 / max ms | after join, max ms: kept / all | busy partitions A, B |")
    print("|---|---:|---:|---:|")
    for strategy in args.strategies.split(","):
        mine = [r for r in rows if r["strategy"] == strategy]
        med = lambda k: statistics.median(r[k] or 0 for r in mine)  # noqa: E731
        print(f"| {strategy} | {med('before_p99_ms'):.0f} / {med('before_max_ms'):.0f} | "
              f"{med('after_join_max_ms_kept'):.0f} / {med('after_join_max_ms_all'):.0f} | "
              f"{', '.join(str(r['busy_partitions_a_b']) for r in mine)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

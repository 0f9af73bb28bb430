"""The measuring harness of bench.compare, which bench.wan and bench.profile_worker use too: the pieces a
measured run of a mirroring system is made of.

Two Kafka clusters (Clusters); topics created, preloaded with distinct keyed records (record_values, preload)
and deleted; the destination's progress (end_total); a system (the worker, MirrorMaker 2 or the bare copy loop,
at-least-once or exactly-once) launched as its own process group (launch) and stopped (stop); its process
tree's CPU and RSS (tree_cpu_s, tree_rss_mib); live records' latency through bench.latency_probe
(measure_latency); one measured run (run_one); the brokers' warm-up before the first (warm_up). What each
figure means: bench.compare's docstring.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import check_transactional, produce_paced
from bench.mm2 import mm2_argv, mm2_properties
from devstack import paths
from devstack.net import free_port
from mirror_worker.batch_api import KAFKA_MAX_MESSAGE_BYTES

RESULTS = Path(__file__).resolve().parent / "results"
# What `make bench` runs when no --systems is given: each runs with no other flag.
DEFAULT_SYSTEMS = ("worker", "mm2", "bare", "worker-eos", "mm2-eos")
# worker-base: the worker of another checkout (--base-tree), with the same flags: a change against its base, side by
# side in one run. Named only; it needs --base-tree.
SYSTEMS = (*DEFAULT_SYSTEMS, "worker-base", "worker-base-eos")
EXACTLY_ONCE = ("worker-eos", "mm2-eos", "worker-base-eos")
BASE = ("worker-base", "worker-base-eos")  # the worker of --base-tree (the second exactly-once)
KEYS = 10_000


@dataclass
class Clusters:
    source: str
    destination: str


# ------------------------------------------------------------------------------------------- topics
def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(30)


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Free the disk a run's destination topics took (all topics named `prefix*`)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result(60)
            except Exception:  # noqa: BLE001 - already gone; disk space only
                pass


def record_values(size: int, seed: int = 7):
    """value(i): a distinct `size`-byte JSON-ish record, about as compressible as business data (lz4
    shrinks a batch of them 3x at 100 B, 2.25x at 1 KiB). One random payload repeated for every record
    compressed 229x, which flattered every system's I/O and let compressed fetches unpack to up to
    420,000 records in a consumer's queue, far past its queued.max.messages.kbytes."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9))) for _ in range(512)]
    memos = [b" ".join(rnd.choice(words) for _ in range(size // 4 + 1)) for _ in range(4096)]

    def value(i: int) -> bytes:
        head = b'{"id":%d,"account":"acc-%06d","amount":%d.%02d,"currency":"EUR","memo":"' % (
            i, (i * 7919) % 1_000_000, (i * 31) % 100_000, i % 100)
        return (head + memos[(i * 2654435761) % 4096])[:size - 2] + b'"}'

    return value


class Refusals:
    """A preload producer's failed deliveries. Only failures call back (delivery.report.only.error), so counting
    costs nothing per record. A preload that lost records looked complete (flush empties the queue either way) and
    the run after it waited out its timeout for records that were never written."""

    def __init__(self) -> None:
        self.count, self.first = 0, None

    def __call__(self, err, _msg) -> None:
        if err is not None:
            self.count += 1
            self.first = self.first or err

    def settings(self) -> dict:
        return {"delivery.report.only.error": True, "on_delivery": self}

    def check(self, what: str) -> None:
        if self.count:
            raise RuntimeError(f"{what}: {self.count:,} records not written ({self.first})")


def preload(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Fill `topic` with keyed records of `size`-byte values; returns the seconds it took."""
    started = time.monotonic()
    create_topics(bootstrap, [topic], partitions)
    refusals = Refusals()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
                         **refusals.settings()})
    value = record_values(size)
    keys = [f"key-{i}".encode() for i in range(KEYS)]
    produce = producer.produce
    for i in range(records):
        while True:
            try:
                produce(topic, value(i), keys[i % KEYS])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError(f"preload of {topic} did not complete")
    refusals.check(f"preload of {topic}")
    return time.monotonic() - started


def known_partitions(client) -> set[tuple[str, int]]:
    """(topic, partition) of every topic in `client`'s metadata (one request, which also fills its cache)."""
    topics = client.list_topics(timeout=30).topics
    return {(name, p) for name, meta in topics.items() if meta.error is None for p in meta.partitions}


def end_total(consumer: Consumer, topic: str, partitions: int) -> int:
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))
    except Exception:  # noqa: BLE001 - the destination topic does not exist yet
        return 0


# ------------------------------------------------------------------------------------------- process tree
def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss_mib(pid: int) -> float:
    total = 0
    for proc in tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def tree_cpu_s(pid: int) -> float:
    total = 0.0
    for proc in tree(pid):
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to the whole process group (the mirror stops cleanly), SIGKILL if it hangs."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------------- systems
def refuse_missing_flags(parser, systems: list[str], args) -> None:
    """One line and exit 2 before any broker starts, for a system named without the flag it needs (a bench that died
    after its set-up and preload, in a traceback, was what `make bench` did when worker-base was a default)."""
    if any(system_procs(s, 1)[0] in BASE for s in systems) and not getattr(args, "base_tree", None):
        parser.error("worker-base needs --base-tree (a checkout of the commit to compare with)")


def system_procs(system: str, default: int) -> tuple[str, int]:
    """`worker@2` -> ("worker", 2); `worker` -> ("worker", default)."""
    name, _, procs = system.partition("@")
    return name, int(procs) if procs else default


def destination_limit(args) -> int:
    """The destination topics' max.message.bytes (bench.wan can raise it): MirrorMaker 2 and the bare loop get
    the batches the worker fits to it."""
    return getattr(args, "destination_max_message_bytes", None) or KAFKA_MAX_MESSAGE_BYTES


def launch(system: str, clusters: Clusters, topics: list[str], alias: str, workdir: Path, args) -> subprocess.Popen:
    """Start `system` mirroring `topics` into `<alias>.<topic>` on the destination."""
    log = open(workdir / f"{alias}.log", "wb")  # noqa: SIM115 - closed with the process
    system, procs = system_procs(system, args.procs)
    env, cwd = None, paths.ROOT
    if system in BASE:
        if not getattr(args, "base_tree", None):
            raise ValueError("worker-base needs --base-tree (a checkout of the commit to compare with)")
        cwd = Path(args.base_tree).resolve()
        env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    if system in ("worker", "worker-eos", *BASE):
        source_cfg = workdir / f"{alias}-source.properties"
        extra = "".join(f"{kv}\n" for kv in args.consumer_props.split(",") if kv)
        source_cfg.write_text(f"bootstrap.servers={clusters.source}\ngroup.id=bench-{alias}\n{extra}")
        producer_cfg = workdir / f"{alias}-destination.properties"
        extra = "".join(f"{kv}\n" for kv in args.producer_props.split(",") if kv)
        producer_cfg.write_text(f"bootstrap.servers={clusters.destination}\n{extra}")
        argv = [sys.executable, "-m", "mirror_worker", "--name", alias, "--consumer.config", str(source_cfg),
                "--producer.config", str(producer_cfg), "--whitelist", "|".join(topics), "--prefix", f"{alias}.",
                "--preserve.partitions", "--num.streams", str(procs), *args.worker_args.split()]
        if system in ("worker-eos", "worker-base-eos"):
            argv.append("--exactly.once")
    elif system in ("mm2", "mm2-eos"):
        properties = mm2_properties(alias, clusters.source, clusters.destination, topics, procs,
                                    args.mm2_poll_records,
                                    exactly_once_rest_port=free_port() if system == "mm2-eos" else None,
                                    destination_limit=destination_limit(args))
        (workdir / alias).mkdir()
        argv = mm2_argv(workdir / alias, properties, args.mm2_heap_mb)
    elif system == "bare":
        create_topics(clusters.destination, [f"{alias}.{t}" for t in topics], args.partitions)
        argv = [sys.executable, "-m", "bench.bare_copy", "--source", clusters.source, "--destination",
                clusters.destination, "--topics", ",".join(topics), "--prefix", f"{alias}.",
                "--partitions", str(args.partitions), "--procs", str(procs),
                "--destination-limit", str(destination_limit(args))]
    else:
        raise ValueError(system)
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def live_value(size: int) -> bytes:
    """A live record's value: its produce time first (see bench.latency_probe), padded to `size`."""
    return struct.pack("<d", time.time()) + bytes(max(0, size - 8))


def measure_latency(clusters: Clusters, topic: str, dest_topic: str, size: int, rate: float, seconds: float,
                    read_committed: bool = False) -> dict:
    producer = Producer({"bootstrap.servers": clusters.source, "linger.ms": 5, "acks": "all",
                         "queue.buffering.max.messages": 1_000_000})
    producer.list_topics(topic, timeout=30)  # connected before the clock starts
    probe = subprocess.Popen(
        [sys.executable, "-m", "bench.latency_probe", "--bootstrap", clusters.destination, "--topic", dest_topic,
         "--partitions", "0", "--timeout", str(seconds + 60), *(["--read-committed"] if read_committed else [])],
        cwd=paths.ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    if probe.stdout.readline().strip() != "ready":
        probe.kill()
        return {"count": 0, "complete": False, "p50_ms": None, "p99_ms": None, "offered_msgs_per_s": 0}
    start = time.time() + 0.2
    counted_from, until = start + 1.0, start + seconds  # the first second is warm-up
    probe.stdin.write(f"{counted_from} {until}\n")
    probe.stdin.flush()
    keys = [f"key-{i}".encode() for i in range(KEYS)]
    time.sleep(max(0.0, start - time.time()))
    # A tail after `until`, so the probe sees the end.
    sent = produce_paced(producer, topic, rate, start, lambda now: now >= until + 0.5,
                         lambda i: (live_value(size), keys[i % KEYS]))
    producer.flush(30)
    try:
        out, _ = probe.communicate(timeout=90)
        result = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError):
        probe.kill()
        result = {"count": 0, "complete": False, "p50_ms": None, "p99_ms": None}
    result["offered_msgs_per_s"] = round(sent / (until + 0.5 - start))
    return result


def run_one(system: str, size: int, repeat: int, clusters: Clusters, topic: str, workdir: Path, args,
            half_rate: float | None, mirror: Clusters | None = None) -> dict:
    """One run of `system`; `mirror`: the addresses the mirror gets, when not `clusters` (bench.wan's proxies)."""
    alias = f"r{uuid.uuid4().hex[:6]}"
    live = f"live-{alias}"
    create_topics(clusters.source, [live], args.partitions)
    watcher = Consumer({"bootstrap.servers": clusters.destination, "group.id": "bench-watch"})
    load = os.getloadavg()[0]
    row = {"system": system, "record_bytes": size, "repeat": repeat, "records": args.records, "load_1m": round(load, 2)}
    brokers_before = sum(tree_cpu_s(pid) for pid in args.broker_pids)
    launched = time.monotonic()
    proc = launch(system, mirror or clusters, [topic, live], alias, workdir, args)
    try:
        first = done = None
        peak_rss = 0.0
        deadline = launched + args.run_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            total = end_total(watcher, f"{alias}.{topic}", args.partitions)
            now = time.monotonic()
            peak_rss = max(peak_rss, tree_rss_mib(proc.pid))
            if total and first is None:
                first, first_count = now, total
            if total >= args.records:
                done = now
                break
            time.sleep(0.05)
        cpu = tree_cpu_s(proc.pid)
        broker_cpu = sum(tree_cpu_s(pid) for pid in args.broker_pids) - brokers_before
        if done is None:
            row["error"] = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
            return row
        elapsed = done - launched
        row.update(
            msgs_per_s=round(args.records / elapsed), mb_per_s=round(args.records * size / elapsed / 1e6, 2),
            seconds=round(elapsed, 2), first_record_s=round(first - launched, 2),
            copy_msgs_per_s=round((args.records - first_count) / (done - first)) if done > first else None,
            cpu_s=round(cpu, 2), broker_cpu_s=round(broker_cpu, 2), peak_rss_mib=round(peak_rss, 1),
        )
        exactly_once = system_procs(system, 1)[0] in EXACTLY_ONCE
        if exactly_once:  # fails the bench loudly when not
            row["transactions"] = check_transactional(clusters.destination, f"{alias}.{topic}", clusters.source, topic)
        for label, rate in latency_rates(args.latency_rate, half_rate or (row["copy_msgs_per_s"] or row["msgs_per_s"]) / 2):
            if args.latency_s <= 0:
                break
            # Exactly-once records count when a read_committed consumer, the one it is for, can read them.
            latency = measure_latency(clusters, live, f"{alias}.{live}", size, rate, args.latency_s,
                                      read_committed=exactly_once)
            row.update({f"p50_ms_{label}": latency["p50_ms"], f"p99_ms_{label}": latency["p99_ms"],
                        f"latency_records_{label}": latency["count"],
                        f"latency_msgs_per_s_{label}": latency["offered_msgs_per_s"]})
        return row
    finally:
        stop(proc)
        watcher.close()
        delete_topics(clusters.destination, f"{alias}.")
        delete_topics(clusters.source, live)



def latency_rates(spec: str, half_rate: float) -> list[tuple[str, float]]:
    """--latency-rate "10000,half" -> [("10000", 10000.0), ("half", half the worker's copy rate)]."""
    out = []
    for item in (part.strip() for part in spec.split(",")):
        if item == "half":
            out.append(("half", half_rate))
        elif item:
            out.append((str(int(float(item))), float(item)))
    return out


def latency_labels(spec: str) -> list[str]:
    return [label for label, _ in latency_rates(spec, 0.0)]


def warm_up(clusters: Clusters, partitions: int) -> list[float]:
    """A fresh cluster answers its first consumers seconds late (group coordinator and internal topics
    being set up, cold JIT; seen at 2-6 s on a loaded machine): measure only once a produce -> consume
    round trip on each cluster is quick. Returns each cluster's last p50 (ms)."""
    results = []
    for bootstrap in dict.fromkeys((clusters.source, clusters.destination)):
        topic = f"warm-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, [topic], partitions)
        p50 = None
        for _ in range(6):
            p50 = measure_latency(Clusters(bootstrap, bootstrap), topic, topic, 100, 500, 2.5)["p50_ms"]
            if p50 is not None and p50 < 50:
                break
        results.append(p50)
        if bootstrap == clusters.destination:
            warm_transactions(bootstrap, topic, partitions)
        delete_topics(bootstrap, topic)
    return results


def warm_destination_transactions(bootstrap: str) -> None:
    """warm_transactions on a topic of its own, created and deleted here: for benches that have no warm-up topic
    (bench.width, bench.width_group), whose exactly-once workers otherwise waited past their 30-s start-up timeout
    for the coordinator on brokers busy with thousands of partitions."""
    warm = f"warm-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [warm], 1)
    warm_transactions(bootstrap, warm, 1)
    delete_topics(bootstrap, warm)


def warm_transactions(bootstrap: str, topic: str, partitions: int) -> None:
    """A few committed transactions, so that the brokers' transaction state topic exists before the first
    exactly-once run: otherwise that run, whichever system it is (worker-eos runs before mm2-eos), pays for
    creating it and for its coordinators' first loads."""
    for i in range(partitions):
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-{uuid.uuid4().hex}"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, b"warm", partition=i)
        producer.commit_transaction(60)

"""The worker against Apache MirrorMaker 2 and a bare confluent-kafka copy loop, side by side (`make bench`).

    .venv/bin/python -m bench.compare [--records 1000000] [--sizes 100,1024] [--repeats 3]
        [--systems worker,mm2,bare,worker-eos,mm2-eos] [--procs 1] [--latency-s 5] [--latency-rate 10000,half]
        [--rss-records 10000000]

`--procs N` runs every system with N processes/tasks; a system may set its own as `system@N`
(`--systems worker@1,worker@2`). With `--procs N` > 1 and `worker` among the systems, `worker@1` runs
too, as the one-process baseline: the ratio `worker/worker@1` says whether N processes beat one.

On two Kafka nodes started for the run (or, --running-stack, the running stack), for each record size:
preload `--records` keyed records (10,000 keys, `--partitions` partitions; distinct JSON-ish values that
lz4 compresses 2-3x, see record_values) into a `source` topic, then
run each system in turn, alternating (worker mm2 bare worker-eos worker mm2 ...), each on the same
brokers and the same preloaded topic, each as a fresh process with a fresh group writing to its own
destination topics (`<run>.<topic>`). Per run:

  throughput  timed from the launch of the mirror process until the destination's high watermarks
              sum to all preloaded records (polled every 50 ms): msgs_per_s = records / that time.
              It includes the process start-up (JVM, group join, topic creation); copy_msgs_per_s is
              the rate from the first record seen on the destination to the last, without start-up.
  cpu_s       user+system CPU seconds of the mirror's process tree over that same interval.
  broker_cpu_s  the same for the two Kafka nodes (they share the cores: a system that makes the brokers
              work harder per record is slower on this machine even at the same cpu_s).
  peak_rss    the largest sum of RSS over the process tree, sampled every 50 ms while copying.
  latency     then, with the same process still running, records are produced live into a second
              topic at each rate of --latency-rate (default: 10,000 msgs/s, an ordinary rate, then half
              of the worker's copy rate measured by the first worker run at this size) for --latency-s
              seconds each; a separate process reads partition 0 of its destination topic and takes
              now - produce time (written in each value) per record; the first second is warm-up and
              not counted. p50/p99 in ms. Exactly-once systems (worker-eos, mm2-eos) are read read_committed.
  transactions  (exactly-once systems) partition 0 of the destination read read_committed holds exactly
              the source's records and its high watermark is past them (transaction markers): a run
              that copied at-least-once fails the bench (bench.common.check_transactional).

Then (worker only) RSS over --rss-records records at 100 B, sampled every second. The figures are
medians over the repeats, after --warm-up-runs (1) uncounted runs of every system at the first size
(each system's first run on fresh brokers was its slowest: WARM_UP_RUNS); the machine's load average is
recorded with them, since the machine is shared and the figures are noisy. Writes
bench/results/latest.json (median rows), latest-runs.json (every run, settings, load, RSS series, the
warm-up runs marked) and latest.md (the table docs/benchmarks/index.md includes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack, check_transactional, produce_paced
from bench.mm2 import mm2_argv, mm2_properties
from devstack import paths
from devstack.net import free_port
from mirror_worker.batch_api import KAFKA_MAX_MESSAGE_BYTES

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("worker", "mm2", "bare", "worker-eos", "mm2-eos")
EXACTLY_ONCE = ("worker-eos", "mm2-eos")
KEYS = 10_000
# Why a warm-up run of each system before the first size's repeats (--warm-up-runs, not in the medians): on the
# brokers started for the run, every system's first run was its slowest, however warm_up had primed them. In the
# two `make bench` runs of stop 41, at 100 B and 10,000 msgs/s, repeat 0's p99 against the next two: worker
# 138 / 130 ms vs 13-19, mm2 194 / 170 vs 16-30, worker-eos 146 / 217 vs 73-122, mm2-eos 183 / 119 vs 62-69;
# and on 300k x 100 B runs the first exactly-once run's p50 was 276-846 ms, the second's 45-60.
WARM_UP_RUNS = 1


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


def preload(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Fill `topic` with keyed records of `size`-byte values; returns the seconds it took."""
    started = time.monotonic()
    create_topics(bootstrap, [topic], partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
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
    return time.monotonic() - started


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
    if system in ("worker", "worker-eos"):
        source_cfg = workdir / f"{alias}-source.properties"
        extra = "".join(f"{kv}\n" for kv in args.consumer_props.split(",") if kv)
        source_cfg.write_text(f"bootstrap.servers={clusters.source}\ngroup.id=bench-{alias}\n{extra}")
        producer_cfg = workdir / f"{alias}-destination.properties"
        extra = "".join(f"{kv}\n" for kv in args.producer_props.split(",") if kv)
        producer_cfg.write_text(f"bootstrap.servers={clusters.destination}\n{extra}")
        argv = [sys.executable, "-m", "mirror_worker", "--name", alias, "--consumer.config", str(source_cfg),
                "--producer.config", str(producer_cfg), "--whitelist", "|".join(topics), "--prefix", f"{alias}.",
                "--preserve.partitions", "--num.streams", str(procs), *args.worker_args.split()]
        if system == "worker-eos":
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
    return subprocess.Popen(argv, cwd=paths.ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


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


# ------------------------------------------------------------------------------------------- RSS over many records
def rss_over_records(clusters: Clusters, records: int, workdir: Path, args) -> dict:
    topic = f"bench-rss-{uuid.uuid4().hex[:6]}"
    preload(clusters.source, topic, records, 100, args.partitions)
    alias = f"r{uuid.uuid4().hex[:6]}"
    watcher = Consumer({"bootstrap.servers": clusters.destination, "group.id": "bench-watch"})
    proc = launch("worker", clusters, [topic], alias, workdir, args)
    series = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.run_timeout * 4 and proc.poll() is None:
            total = end_total(watcher, f"{alias}.{topic}", args.partitions)
            series.append((round(time.monotonic() - started, 1), total, round(tree_rss_mib(proc.pid), 1)))
            if total >= records:
                break
            time.sleep(1.0)
    finally:
        stop(proc)
        watcher.close()
        delete_topics(clusters.destination, f"{alias}.")
        delete_topics(clusters.source, topic)
    copying = [rss for _, total, rss in series if 0 < total]
    return {"records": records, "record_bytes": 100, "series": series,
            "rss_mib_max": max(copying, default=None),
            "rss_mib_at_quarters": [_rss_at(series, records * q / 4) for q in (1, 2, 3, 4)]}


def _rss_at(series: list, records: float) -> float | None:
    return next((rss for _, total, rss in series if total >= records), None)


# ------------------------------------------------------------------------------------------- report
def _rate_name(label: str) -> str:
    return "half load" if label == "half" else f"{int(label):,}/s"


FIELDS = ("msgs_per_s", "mb_per_s", "copy_msgs_per_s", "cpu_s", "broker_cpu_s", "peak_rss_mib", "first_record_s")


def medians(runs: list[dict], systems: list[str], sizes: list[int], labels: list[str]) -> list[dict]:
    rows = []
    for size in sizes:
        for system in systems:
            ok = [r for r in runs if r["system"] == system and r["record_bytes"] == size and "error" not in r
                  and not r.get("warm_up")]
            row = {"system": system, "record_bytes": size, "repeats": len(ok)}
            for field in FIELDS + tuple(f"p{q}_ms_{label}" for label in labels for q in (50, 99)):
                values = [r[field] for r in ok if r.get(field) is not None]
                row[field] = round(statistics.median(values), 2) if values else None
            rows.append(row)
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    out = []
    by = {(r["system"], r["record_bytes"]): r for r in rows}
    for (system, size), row in by.items():
        if system != "worker":
            continue
        for other in ("mm2", "bare"):
            peer = by.get((other, size))
            for field in ("msgs_per_s", "copy_msgs_per_s"):
                if peer and row.get(field) and peer.get(field):
                    out.append({"record_bytes": size, "ratio": f"worker/{other}", "figure": field,
                                "value": round(row[field] / peer[field], 2)})
    for (system, size), row in by.items():
        one = by.get(("worker@1", size))
        if system == "worker" and one and row is not one:
            for field in ("msgs_per_s", "copy_msgs_per_s"):
                if row.get(field) and one.get(field):
                    out.append({"record_bytes": size, "ratio": "worker/worker@1", "figure": field,
                                "value": round(row[field] / one[field], 2)})
        # From launch only: exactly-once records show up on the destination a transaction at a time, so
        # the first-to-last-record rate of one run swings wildly with where the first commit falls.
        for eos, peer in (("worker-eos", "worker"), ("mm2-eos", "mm2"), ("worker-eos", "mm2-eos")):
            if system == eos and by.get((peer, size), {}).get("msgs_per_s") and row.get("msgs_per_s"):
                out.append({"record_bytes": size, "ratio": f"{eos}/{peer}", "figure": "msgs_per_s",
                            "value": round(row["msgs_per_s"] / by[(peer, size)]["msgs_per_s"], 2)})
    return out


def markdown(rows: list[dict], ratio_rows: list[dict], meta: dict) -> str:
    labels = meta.get("latency_labels", [])
    def fmt(value, digits=0):
        if value is None:
            return "-"
        return f"{value:,.{digits}f}"

    lines = [
        f"Measured {meta['date']} on {meta['cpus']} cores, {meta['records']:,} records per run, {meta['repeats']} "
        f"repeats (medians; {meta.get('warm_up_runs', 0)} uncounted warm-up run(s) first), {meta['procs']} "
        f"process(es)/task(s) per system (`system@N`: N); load average "
        f"{meta['load_start']} at start, {meta['load_end']} at end (a shared machine: figures are noisy).",
        *([f"Brokers: {meta['kafka']['heap_mb']} MiB heap, {meta['kafka']['gc']} collector."]
          if "kafka" in meta else []),
        "",
        "| system | record B | msgs/s | MB/s | copy msgs/s | "
        + "".join(f"p50 ms @{_rate_name(label)} | p99 ms @{_rate_name(label)} | " for label in labels)
        + "CPU s | broker CPU s | peak RSS MiB | first record s |",
        "|---|---:|---:|---:|---:|" + "---:|---:|" * len(labels) + "---:|---:|---:|---:|",
    ]
    for r in rows:
        latencies = "".join(f"{fmt(r.get(f'p50_ms_{label}'), 1)} | {fmt(r.get(f'p99_ms_{label}'), 1)} | "
                            for label in labels)
        lines.append(
            f"| {r['system']} | {r['record_bytes']} | {fmt(r['msgs_per_s'])} | {fmt(r['mb_per_s'], 1)} | "
            f"{fmt(r['copy_msgs_per_s'])} | {latencies}{fmt(r['cpu_s'], 1)} | {fmt(r.get('broker_cpu_s'), 1)} | "
            f"{fmt(r['peak_rss_mib'])} | {fmt(r['first_record_s'], 1)} |"
        )
    if ratio_rows:
        lines += ["", "| record B | ratio | msgs/s (from launch) | copy msgs/s |", "|---:|---|---:|---:|"]
        keyed = {}
        for r in ratio_rows:
            keyed.setdefault((r["record_bytes"], r["ratio"]), {})[r["figure"]] = r["value"]
        for (size, ratio), figures in sorted(keyed.items()):
            lines.append(f"| {size} | {ratio} | {figures.get('msgs_per_s', '-')} | {figures.get('copy_msgs_per_s', '-')} |")
    rss = meta.get("rss")
    if rss:
        quarters = ", ".join(f"{v}" for v in rss["rss_mib_at_quarters"])
        lines += ["", f"Worker RSS over {rss['records']:,} records of 100 B: {quarters} MiB at 25/50/75/100 %; "
                      f"max {rss['rss_mib_max']} MiB."]
    return "\n".join(lines) + "\n"


def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    """This bench's flags (bench.wan takes them too, with its own defaults)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="preloaded records per size")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm-up-runs", type=int, default=WARM_UP_RUNS,
                        help="runs of every system before the first size's repeats, not counted (see WARM_UP_RUNS)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--procs", type=int, default=1, help="worker --num.streams, MM2 tasks.max, bare processes")
    parser.add_argument("--worker-args", default="", help="extra worker flags, e.g. '--queue.size 20000'")
    parser.add_argument("--latency-s", type=float, default=5.0, help="live-record seconds per run; 0: no latency")
    parser.add_argument("--latency-rate", default="10000,half",
                        help="live msgs/s for the latency runs, comma-separated; 'half': half the worker's copy rate")
    parser.add_argument("--rss-records", type=int, default=10_000_000, help="worker RSS run over this many records; 0: skip")
    parser.add_argument("--mm2-heap-mb", type=int, default=512)
    parser.add_argument("--mm2-poll-records", type=int, default=2500, help="MM2 max.poll.records (the worker's batch)")
    parser.add_argument("--kafka-heap-mb", type=int, default=768, help="heap of the brokers this run starts")
    parser.add_argument("--kafka-gc", choices=["serial", "g1"], default="serial", help="the brokers' collector")
    parser.add_argument("--consumer-props", default="",
                        help="k=v,... added to the worker's consumer .properties (to try a client setting)")
    parser.add_argument("--producer-props", default="", help="k=v,... added to the worker's producer .properties")
    parser.add_argument("--running-stack", action="store_true",
                        help="measure on the running stack (make stack-up) instead of two private Kafka nodes")
    parser.add_argument("--logs", default=None, help="keep each run's configs and logs here (default: a temp dir)")
    parser.add_argument("--run-timeout", type=float, default=300)
    parser.add_argument("--out", default=str(RESULTS / "latest"), help="output path without extension")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.procs > 1 and "worker" in systems and "worker@1" not in systems:
        systems.insert(systems.index("worker") + 1, "worker@1")  # the one-process baseline
    unknown = {system_procs(s, args.procs)[0] for s in systems} - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict] = []
    rss = None
    with bench_stack(kafka_only=True, kafka_heap_mb=args.kafka_heap_mb, reuse_running=args.running_stack,
                     kafka_gc=args.kafka_gc) as stack, \
            tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        clusters = Clusters(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        args.broker_pids = [pid for pid in (stack[c].kafka.process.pid() for c in ("source", "destination")) if pid]
        workdir = Path(args.logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"brokers warm: produce->consume p50 {warm_up(clusters, args.partitions)} ms", flush=True)
        for size in sizes:
            topic = f"bench-{size}-{uuid.uuid4().hex[:6]}"
            took = preload(clusters.source, topic, args.records, size, args.partitions)
            print(f"preloaded {args.records:,} x {size} B into {topic} in {took:.1f}s", flush=True)
            half_rate = None
            # Warm-up runs (negative repeats) on the first size: kept in the runs, not in the medians.
            for repeat in range(-args.warm_up_runs if size == sizes[0] else 0, args.repeats):
                for system in systems:
                    row = run_one(system, size, repeat, clusters, topic, workdir, args, half_rate)
                    if repeat < 0:
                        row["warm_up"] = True
                    elif system == "worker" and half_rate is None and row.get("copy_msgs_per_s"):
                        half_rate = row["copy_msgs_per_s"] / 2  # half the worker's rate, for every system
                    runs.append(row)
                    print(json.dumps(row), flush=True)
            delete_topics(clusters.source, topic)
        if args.rss_records > 0 and "worker" in systems:
            rss = rss_over_records(clusters, args.rss_records, workdir, args)
            print(json.dumps({k: v for k, v in rss.items() if k != "series"}), flush=True)
    labels = latency_labels(args.latency_rate) if args.latency_s > 0 else []
    rows = medians(runs, systems, sizes, labels)
    ratio_rows = ratios(rows)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(), "records": args.records,
        "repeats": args.repeats, "procs": args.procs, "partitions": args.partitions, "worker_args": args.worker_args,
        "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()], "rss": rss,
        "latency_labels": labels, "latency_rate": args.latency_rate, "warm_up_runs": args.warm_up_runs,
        "kafka": {"heap_mb": args.kafka_heap_mb, "gc": args.kafka_gc},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    out.with_name(out.name + "-runs.json").write_text(
        json.dumps({"meta": meta, "ratios": ratio_rows, "runs": runs}, indent=2) + "\n")
    table = markdown(rows, ratio_rows, meta)
    out.with_suffix(".md").write_text(table)
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

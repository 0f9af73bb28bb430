"""Production width (issue "Production width"): one mirror process at 6, 1,000 and 5,000 partitions, side by side.

    .venv/bin/python -m bench.width [--widths 6,1000,5000] [--records 1000000] [--size 100]
        [--systems worker,worker-eos,mm2,bare] [--latency-s 10] [--latency-rate 1000] [--broker-storage memory|disk]

On two Kafka nodes started for the run (their logs in tmpfs unless --broker-storage disk: on this machine's disk the
brokers' index page faults were the limit at width; bench.common.memory_root): for each width, `--records` keyed
records of `--size` B are preloaded into topics of 10 partitions (one topic of 6 for the width 6), spread evenly, so
each partition of 5,000 holds 200; then each system mirrors them, one after the other, as a fresh process into its
own destination topics:

  seconds      from launch until the destination holds every record: the sum of the high watermarks
               (at-least-once systems), or of the committed exactly-once positions (the worker's positions
               group on the destination: high watermarks count transaction markers too, which at this width
               are about as many as the records);
  msgs_per_s   records / seconds; first_record_s: launch to the first record on the destination
               (start-up and assignment);
  cpu_s        user+system CPU seconds of the process tree over that interval;
  peak_rss_mib, peak_threads, peak_fds  sampled every 200 ms over the process tree;
  p50/p99_ms   then a live stream of --latency-rate msgs/s into one of the topics for --latency-s seconds,
               read on the destination (read_committed for exactly-once): produce to visible.

The bare loop (bench.bare_copy) shows what one broker pair gives at the same width with no mirroring logic:
where it is slow too, the brokers are the limit, not the worker. Writes bench/results/width.json (every run)
and width.md (the table docs/benchmarks/width.md includes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench.common import bench_stack, memory_root
from bench.harness import (
    RESULTS,
    Clusters,
    Refusals,
    delete_topics,
    known_partitions,
    launch,
    measure_latency,
    record_values,
    refuse_missing_flags,
    stop,
    tree,
    warm_destination_transactions,
)
from mirror_worker.batch_api import POSITIONS_GROUP

TOPIC_PARTITIONS = 10


def topics_for(width: int, tag: str) -> tuple[list[str], int]:
    """(topic names, partitions each) making `width` partitions."""
    if width < TOPIC_PARTITIONS:
        return [f"w{tag}-0"], width
    return [f"w{tag}-{i}" for i in range(width // TOPIC_PARTITIONS)], TOPIC_PARTITIONS


def preload(bootstrap: str, topics: list[str], partitions: int, records: int, size: int) -> float:
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for chunk in range(0, len(topics), 100):
        for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics[chunk:chunk + 100]]).values():
            future.result(120)
    refusals = Refusals()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000, **refusals.settings()})
    # Records for a topic its metadata does not show yet can fail as unknown: wait until every partition is known.
    wanted = {(t, p) for t in topics for p in range(partitions)}
    deadline = time.monotonic() + 120
    while not wanted <= known_partitions(producer):
        if time.monotonic() > deadline:
            raise RuntimeError(f"preload: {len(wanted - known_partitions(producer)):,} partitions not known in 120s")
        time.sleep(0.5)
    value = record_values(size)
    width = len(topics) * partitions
    for i in range(records):
        slot = i % width  # every partition gets its share
        while True:
            try:
                producer.produce(topics[slot // partitions], value(i), b"k%d" % i, partition=slot % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(600) != 0:
        raise RuntimeError("preload did not complete")
    refusals.check("preload")
    return time.monotonic() - started


class Progress:
    """What the destination holds of a run's topics, in one request per look."""

    def __init__(self, destination: str, topics: list[str], partitions: int, exactly_once: bool) -> None:
        self.admin = AdminClient({"bootstrap.servers": destination})
        self.partitions = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self.exactly_once = exactly_once
        # The positions group's offsets through a consumer of that group id, which never joins it (committed()
        # only fetches). The admin client's list_consumer_group_offsets crashed the bench process (SIGSEGV, in 4 of
        # 7 exactly-once launches at 1,000 partitions, and again at once) while the group did not exist yet:
        # confluent-kafka-python issue 1982, librdkafka's OffsetFetch handler without a consumer group handle.
        self.positions = Consumer({"bootstrap.servers": destination, "group.id": POSITIONS_GROUP,
                                   "enable.auto.commit": False}) if exactly_once else None

    def close(self) -> None:
        if self.positions is not None:
            self.positions.close()

    def total(self) -> int:
        try:
            if self.positions is not None:
                committed = self.positions.committed(self.partitions, timeout=30)
                return sum(tp.offset for tp in committed if tp.offset > 0)
            answer = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in self.partitions}, request_timeout=30)
            return sum(future.result(30).offset for future in answer.values())
        except Exception:  # noqa: BLE001 - topics not created yet
            return 0


class Peaks(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = {"rss_mib": 0.0, "threads": 0, "fds": 0}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            rss = threads = fds = 0
            for proc in tree(self.pid):
                try:
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
                    fds += proc.num_fds()
                except psutil.Error:
                    pass
            self.peak = {"rss_mib": max(self.peak["rss_mib"], rss / 2**20), "threads": max(self.peak["threads"], threads),
                         "fds": max(self.peak["fds"], fds)}
            time.sleep(0.2)


def cpu_s(pid: int) -> float:
    total = 0.0
    for proc in tree(pid):
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass
    return total


def log_tail(path: Path, lines: int = 8) -> list[str]:
    """A system's warnings and errors (the last 20) and its last lines, for a run that did not finish; each
    cut to 400 characters."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    noted = [line for line in text[:-lines] if '"level": "warning"' in line or '"level": "error"' in line]
    return [line[:400] for line in noted[-20:] + text[-lines:]]


def run_one(system: str, width: int, topics: list[str], partitions: int, clusters: Clusters, workdir: Path, args) -> dict:
    alias = f"r{uuid.uuid4().hex[:6]}"
    args.partitions = partitions
    exactly_once = system.endswith("-eos")
    progress = Progress(clusters.destination, [f"{alias}.{t}" for t in topics], partitions, exactly_once)
    row = {"system": system, "partitions": width, "records": args.records, "load_1m": round(os.getloadavg()[0], 2)}
    launched = time.monotonic()
    proc = launch(system, clusters, topics, alias, workdir, args)
    peaks = Peaks(proc.pid)
    peaks.start()
    try:
        first = done = None
        cpu = 0.0
        while time.monotonic() - launched < args.run_timeout and proc.poll() is None:
            total = progress.total()
            cpu = max(cpu, cpu_s(proc.pid))
            if total and first is None:
                first = time.monotonic()
            if total >= args.records:
                done = time.monotonic()
                break
            time.sleep(0.5)
        if done is None:
            row["error"] = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
            row["log_tail"] = log_tail(workdir / f"{alias}.log")  # the workdir goes with the run
            return row
        row.update(seconds=round(done - launched, 1), msgs_per_s=round(args.records / (done - launched)),
                   first_record_s=round(first - launched, 1), cpu_s=round(cpu, 1),
                   peak_rss_mib=round(peaks.peak["rss_mib"]), peak_threads=peaks.peak["threads"],
                   peak_fds=peaks.peak["fds"])
        if args.latency_s > 0:
            latency = measure_latency(clusters, topics[0], f"{alias}.{topics[0]}", args.size, args.latency_rate,
                                      args.latency_s, read_committed=exactly_once)
            row.update(p50_ms=latency["p50_ms"], p99_ms=latency["p99_ms"], latency_records=latency["count"])
        return row
    finally:
        peaks.halt.set()
        progress.close()
        stop(proc)
        delete_topics(clusters.destination, f"{alias}.")


def markdown(runs: list[dict], meta: dict) -> str:
    storage = {"memory": "their logs in tmpfs", "disk": "their logs on disk"}.get(meta.get("broker_storage", "disk"))
    lines = [f"Width benchmark, {meta['date']}: {meta['records']:,} records of {meta['size']} B, one process per "
             f"system, two Kafka nodes ({storage}) on {meta['cpus']} cores (load {meta['load_start']} -> "
             f"{meta['load_end']}).",
             "",
             "| system | partitions | seconds | msgs/s | first record s | CPU-s | peak RSS MiB | threads | fds | "
             "live p50 / p99 ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['system']} | {r['partitions']:,} | {r['error']} | | | | | | | |")
            continue
        live = f"{r.get('p50_ms')} / {r.get('p99_ms')}" if r.get("p50_ms") is not None else ""
        lines.append(f"| {r['system']} | {r['partitions']:,} | {r['seconds']} | {r['msgs_per_s']:,} | "
                     f"{r['first_record_s']} | {r['cpu_s']} | {r['peak_rss_mib']} | {r['peak_threads']} | "
                     f"{r['peak_fds']} | {live} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", default="6,1000,5000")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--systems", default="worker,worker-eos,mm2,bare")
    parser.add_argument("--latency-s", type=float, default=10.0)
    parser.add_argument("--latency-rate", type=float, default=1000.0)
    parser.add_argument("--run-timeout", type=float, default=900.0)
    # 768 MiB brokers stopped answering at 5,000 partitions (docs/benchmarks/width.md); 2 GiB finished every system.
    parser.add_argument("--kafka-heap-mb", type=int, default=2048)
    parser.add_argument("--worker-args", default="", help="extra worker flags, e.g. '--metrics.port 19464'")
    parser.add_argument("--logs", default=None, metavar="DIR",
                        help="keep each system's log (and config), and the brokers' server.log, in DIR")
    # In memory by default: on this machine's disk the brokers' index page faults were the limit at 1,000
    # partitions, for every system alike (bench.common.memory_root; docs/benchmarks/width.md).
    parser.add_argument("--broker-storage", choices=["memory", "disk"], default="memory",
                        help="the brokers' logs in tmpfs (default) or on disk")
    parser.add_argument("--consumer-props", default="", help="the worker's extra source settings, k=v,k=v")
    parser.add_argument("--producer-props", default="", help="the worker's extra destination settings, k=v,k=v")
    parser.add_argument("--base-tree", default=None, metavar="DIR",
                        help="for the system worker-base: a checkout of the commit to compare with")
    parser.add_argument("--out", default=str(RESULTS / "width"))
    args = parser.parse_args(argv)
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
    systems = args.systems.split(",")
    refuse_missing_flags(parser, systems, args)
    # What bench.harness.launch reads.
    args.procs = 1
    args.mm2_poll_records, args.mm2_heap_mb, args.destination_max_message_bytes = 10_000, 512, None
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "records": args.records, "size": args.size, "broker_storage": args.broker_storage,
            "load_start": [round(x, 2) for x in os.getloadavg()]}
    if args.broker_storage == "memory":  # the sources, one system's copy, one being deleted, markers: ~4 copies
        memory_root(4 * args.records * (args.size + 100) + 2**30)
    runs = []
    with bench_stack(kafka_only=True, kafka_heap_mb=args.kafka_heap_mb, reuse_running=False,
                     storage=args.broker_storage, keep_logs=Path(args.logs) if args.logs else None) as stack, \
            tempfile.TemporaryDirectory(prefix="bench-width-") as tmp:
        clusters = Clusters(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        if any(system.endswith("-eos") for system in systems):
            # The destination's transaction state made first, as bench.compare does: an exactly-once worker started
            # after another system had made thousands of partitions there exited at start (stop 55's width-5000).
            warm_destination_transactions(clusters.destination)
        for width in [int(w) for w in args.widths.split(",")]:
            topics, partitions = topics_for(width, uuid.uuid4().hex[:4])
            took = preload(clusters.source, topics, partitions, args.records, args.size)
            print(f"preloaded {args.records:,} x {args.size} B into {len(topics)} topics x {partitions} in {took:.0f}s",
                  flush=True)
            for system in systems:
                row = run_one(system, width, topics, partitions, clusters, Path(args.logs or tmp), args)
                runs.append(row)
                print(json.dumps(row), flush=True)
            delete_topics(clusters.source, topics[0].rsplit("-", 1)[0] + "-")
    meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=2) + "\n")
    table = markdown(runs, meta)
    out.with_suffix(".md").write_text(table)
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Throughput of the consistency check on the local stack: source records verified per second.

    .venv/bin/python -m bench.verify_throughput [--records 5000000] [--size 100] [--partitions 6] \
        [--master local[2]] [--fresh] [--drop]

Preloads keyed records with a header into `source` and a clean copy (same partition, key, value,
headers, timestamp, plus the provenance header) into `destination` (both clusters written at once, lz4
batches), then times one run of `python -m spark_jobs.consistency_check --master local[2]` over the whole
topic. Reports records/s over the whole run (JVM start included) and over the check alone (after the
Spark session is up), both per core too, the digest pass's task CPU seconds and the 1-minute load average
before the run (other work on the machine skews the figures). The preloaded topics are named after records, size and partitions
and kept: a later run with the same shape reuses them (--fresh reloads them, --drop deletes them after
the run). Uses the running stack (`make stack-up`) or starts one for the run. Adds its row to
bench/results/verify_throughput.json (one row per records, size and master).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack, standalone
from devstack import Stack, paths
from mirror_worker.batch_api import PROVENANCE_HEADER, provenance_value

RESULTS = Path(__file__).resolve().parent / "results"
PREFIX = "bench."


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 4_000_000, "acks": "all",
                     "enable.idempotence": True, "compression.type": "lz4", "message.max.bytes": 8_000_000,
                     "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})


def _send(producer: Producer, *args, **kwargs) -> None:
    while True:
        try:
            producer.produce(*args, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def _write(bootstrap: str, topic: str, records: int, padding: bytes, partitions: int, base_ms: int,
           provenance_of: tuple[str, str] | None) -> None:
    """Record i goes to partition i % partitions, so its offset there is i // partitions (a new topic,
    each partition written in order by one idempotent producer). provenance_of: (alias, cluster id) of the
    source, for the copy."""
    producer = _producer(bootstrap)
    for i in range(records):
        partition = i % partitions
        headers = [("n", str(i).encode())]
        if provenance_of is not None:
            headers.append((PROVENANCE_HEADER, provenance_value(*provenance_of, topic.removeprefix(PREFIX), partition,
                                                                 i // partitions)))
        _send(producer, topic, str(i).encode() + padding, f"key-{i}".encode(), partition,
              timestamp=base_ms + i, headers=headers)
    if producer.flush(300) != 0:
        raise RuntimeError(f"{bootstrap}: records left unsent")


def _ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-verify-watch"})
    try:
        return [watcher.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        watcher.close()


def preloaded(source: str, destination: str, topic: str, records: int, partitions: int) -> bool:
    expected = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    for bootstrap, name in ((source, topic), (destination, PREFIX + topic)):
        if name not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
            return False
        if _ends(bootstrap, name, partitions) != expected:
            return False
    return True


def drop(source: str, destination: str, topic: str) -> None:
    for bootstrap, name in ((source, topic), (destination, PREFIX + topic)):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        if name in admin.list_topics(timeout=10).topics:
            admin.delete_topics([name])[name].exception(30)


def preload(source: str, destination: str, topic: str, records: int, size: int, partitions: int) -> None:
    """Source records and their clean copy, both clusters written at once (one process each)."""
    for bootstrap, name in ((source, topic), (destination, PREFIX + topic)):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    cluster_id = AdminClient({"bootstrap.servers": source}).list_topics(timeout=10).cluster_id
    base_ms = int(time.time() * 1000) - records
    padding = os.urandom(max(0, size - 8))          # one padding for both sides: the copy is clean
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write, args=(source, topic, records, padding, partitions, base_ms, None)),
               context.Process(target=_write, args=(destination, PREFIX + topic, records, padding, partitions, base_ms,
                                                     ("source", cluster_id)))]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    if any(w.exitcode for w in writers) or not preloaded(source, destination, topic, records, partitions):
        raise RuntimeError("preload failed: the topics do not hold the expected offsets")


def _log_time(entries: list[dict], message: str) -> float:
    entry = next(e for e in entries if e.get("msg") == message)
    return datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()


def cores_of(master: str) -> int:
    match = re.fullmatch(r"local\[(\d+)\]", master)
    return int(match[1]) if match else os.cpu_count() or 1


def measure(stack: Stack, records: int, size: int, partitions: int, master: str, workdir: Path,
            fresh: bool = False, keep: bool = True, reader: str = "jvm") -> dict:
    source, destination = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"bench-verify-{records}x{size}-p{partitions}"
    report = workdir / f"{topic}.json"
    try:
        if fresh or not preloaded(source, destination, topic, records, partitions):
            drop(source, destination, topic)
            loading = time.monotonic()
            preload(source, destination, topic, records, size, partitions)
            print(f"preloaded {records:,} records of {size} B in {time.monotonic() - loading:.0f}s", flush=True)
        load_before = round(os.getloadavg()[0], 2)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "spark_jobs.consistency_check", "--source.bootstrap.servers", source,
             "--destination.bootstrap.servers", destination, "--topics", topic, "--prefix", PREFIX,
             "--master", master, "--report", str(report), "--digest-reader", reader],
            cwd=paths.ROOT, capture_output=True, text=True, timeout=3600,
        )
        wall = time.monotonic() - started
    finally:
        if not keep:
            drop(source, destination, topic)
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
    cores = cores_of(master)
    read = next((e for e in entries if e.get("msg") in ("digest pass read on the JVM", "digest pass read with librdkafka")),
                {})
    return {
        "system": "consistency_check", "records": records, "record_bytes": size, "partitions": partitions,
        "master": master, "cores": cores, "digest_reader": reader,
        "wall_s": round(wall, 1), "check_s": round(check_s, 1),
        "records_per_s": round(records / wall), "records_per_s_per_core": round(records / wall / cores),
        "records_per_s_check_only": round(records / check_s),
        "records_per_s_per_core_check_only": round(records / check_s / cores),
        # the digest pass's Spark tasks: their CPU seconds (jvm: the task threads, the JVM's collector not
        # included; librdkafka: the Python workers, librdkafka's threads included)
        "read_task_cpu_s": read.get("task_cpu_seconds"),
        "windows_record_by_record": result.get("digest", {}).get("windows_record_by_record"),
        "load_average_1m_before": load_before,
    }


def _merge(rows: list[dict], row: dict) -> list[dict]:
    """The results file keeps one row per (records, record bytes, master, digest reader): a new measure
    replaces its own."""
    same = lambda r: (r.get("records"), r.get("record_bytes"), r.get("master"), r.get("digest_reader", "spark")) == (  # noqa: E731
        row["records"], row["record_bytes"], row["master"], row["digest_reader"])
    return [r for r in rows if not same(r)] + [row]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--master", default="local[2]", help="Spark master of the check (default local[2]; `standalone`: a devstack "
                        "cluster started for the run, a master and two 1-core workers)")
    parser.add_argument("--fresh", action="store_true", help="reload the topics even when preloaded ones fit")
    parser.add_argument("--drop", action="store_true", help="delete the topics after the run")
    parser.add_argument("--digest-reader", choices=("jvm", "librdkafka", "spark"), default="jvm",
                        help="the check's --digest-reader (default jvm)")
    args = parser.parse_args(argv)

    with bench_stack() as stack, tempfile.TemporaryDirectory() as workdir, standalone(args.master, workdir) as masters:
        row = measure(stack, args.records, args.size, args.partitions, masters[0], Path(workdir),
                      fresh=args.fresh, keep=not args.drop, reader=args.digest_reader)
    row["master"] = args.master  # `standalone`, not the run's own address
    print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    results = RESULTS / "verify_throughput.json"
    rows = json.loads(results.read_text()) if results.exists() else []
    results.write_text(json.dumps(_merge(rows, row), indent=2) + "\n")
    print("\n| records | record bytes | master | wall s | records/s | per core | check s | records/s (check only) "
          "| per core |\n|---|---|---|---|---|---|---|---|---|")
    print(f"| {row['records']:,} | {row['record_bytes']} | {row['master']} | {row['wall_s']} | "
          f"{row['records_per_s']:,} | {row['records_per_s_per_core']:,} | {row['check_s']} | "
          f"{row['records_per_s_check_only']:,} | {row['records_per_s_per_core_check_only']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

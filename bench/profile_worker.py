"""Where the worker's time goes while it copies: py-spy on a running worker (issue #7's profile evidence).

    .venv/bin/python -m bench.profile_worker [--records 1500000] [--size 100] [--seconds 8] [--procs 1]
    .venv/bin/python -m bench.profile_worker --perf [--system worker|bare] [--size 1024]

Preloads records like bench.compare, starts the worker (at-least-once, --preserve.partitions), waits for
the first mirrored record, then samples it (`py-spy record --pid`, native frames included, subprocesses
of --num.streams too) for --seconds. Writes the collapsed stacks to bench/results/profile-worker-<size>.txt
and prints the functions with the most samples, self and total.

--perf samples every thread with `perf record` instead, librdkafka's too (bench/perf_split.py), and gives each kind
of work (LZ4, copies, the kernel, the interpreter...) in CPU-seconds per million records, from the process's CPU time
and the records copied over the same window: bench/results/perf-<system>-<size>.md. --system bare profiles the bare
confluent-kafka loop (bench/bare_copy.py) the same way.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from confluent_kafka import Consumer

from bench import perf_split
from bench.common import bench_stack
from bench.harness import RESULTS, Clusters, delete_topics, end_total, launch, preload, stop


def top(collapsed: Path, limit: int = 25) -> str:
    self_counts: collections.Counter = collections.Counter()
    total_counts: collections.Counter = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        samples += n
        frames = [f.split(" (")[0] for f in stack.split(";")]
        self_counts[frames[-1]] += n
        for frame in set(frames):
            total_counts[frame] += n
    out = [f"{samples} samples", "self %  function"]
    out += [f"{100 * n / samples:5.1f}  {f}" for f, n in self_counts.most_common(limit)]
    out += ["total %  function"]
    out += [f"{100 * n / samples:5.1f}  {f}" for f, n in total_counts.most_common(limit)]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """The flags, with every one bench.harness.launch reads (the worker's client properties too)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--worker-args", default="")
    parser.add_argument("--consumer-props", default="", help="extra source consumer properties, k=v,k=v")
    parser.add_argument("--producer-props", default="", help="extra destination producer properties, k=v,k=v")
    parser.add_argument("--native", action="store_true", help="include C frames (librdkafka, CPython)")
    parser.add_argument("--perf", action="store_true", help="every thread by native symbol, in CPU-s per 1M records")
    parser.add_argument("--system", choices=["worker", "bare"], default="worker", help="with --perf: what to profile")
    return parser


def perf_window(proc: subprocess.Popen, watcher: Consumer, topic: str, args) -> str:
    """perf over --seconds of the copy: the split in CPU-s per 1M records (the process's own CPU time, the records
    copied in the same window)."""
    process = psutil.Process(proc.pid)
    copied_before, cpu_before = end_total(watcher, topic, args.partitions), sum(process.cpu_times()[:2])
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        perf_split.record(proc.pid, args.seconds, data)
        copied = end_total(watcher, topic, args.partitions) - copied_before
        cpu = sum(process.cpu_times()[:2]) - cpu_before
        result = perf_split.split(perf_split.script(data))
    if copied <= 0 or result.samples == 0:
        raise RuntimeError(f"nothing measured in {args.seconds}s: {copied} records copied, {result.samples} samples")
    per_million = cpu / copied * 1e6
    head = (f"{args.system}, {args.size} B records, {args.partitions} partitions: {copied:,} records copied in the "
            f"{args.seconds:g}s window, {cpu:.2f} CPU-s ({per_million:.2f} per 1M records), {result.samples:,} samples")
    return head + "\n\n" + perf_split.table(result, per_million) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with bench_stack(kafka_only=True, kafka_heap_mb=768, reuse_running=False) as stack, tempfile.TemporaryDirectory() as tmp:
        clusters = Clusters(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        topic = f"prof-{uuid.uuid4().hex[:6]}"
        preload(clusters.source, topic, args.records, args.size, args.partitions)
        alias = f"p{uuid.uuid4().hex[:6]}"
        watcher = Consumer({"bootstrap.servers": clusters.destination, "group.id": "bench-watch"})
        proc = launch(args.system if args.perf else "worker", clusters, [topic], alias, Path(tmp), args)
        out = RESULTS / f"profile-worker-{args.size}.txt"
        try:
            while end_total(watcher, f"{alias}.{topic}", args.partitions) == 0 and proc.poll() is None:
                time.sleep(0.05)
            if args.perf:
                report = perf_window(proc, watcher, f"{alias}.{topic}", args)
                out = RESULTS / f"perf-{args.system}-{args.size}.md"
                out.write_text(report)
                print(report)
                return 0
            spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(proc.pid), "--duration",
                   str(int(args.seconds)), "--format", "raw", "--rate", "250", "--subprocesses", "-o", str(out)]
            if args.native:
                spy.append("--native")
            subprocess.run(spy, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            copied = end_total(watcher, f"{alias}.{topic}", args.partitions)
        finally:
            stop(proc)
            watcher.close()
            delete_topics(clusters.destination, f"{alias}.")
            delete_topics(clusters.source, topic)
    print(f"copied {copied:,} of {args.records:,} while profiling; stacks in {out}")
    print(top(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the worker's time goes while it copies: py-spy on a running worker (issue #7's profile evidence).

    .venv/bin/python -m bench.profile_worker [--records 1500000] [--size 100] [--seconds 8] [--procs 1]

Preloads records like bench.compare, starts the worker (at-least-once, --preserve.partitions), waits for
the first mirrored record, then samples it (`py-spy record --pid`, native frames included, subprocesses
of --num.streams too) for --seconds. Writes the collapsed stacks to bench/results/profile-worker-<size>.txt
and prints the functions with the most samples, self and total.
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

from confluent_kafka import Consumer

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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with bench_stack(kafka_only=True, kafka_heap_mb=768, reuse_running=False) as stack, tempfile.TemporaryDirectory() as tmp:
        clusters = Clusters(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers)
        topic = f"prof-{uuid.uuid4().hex[:6]}"
        preload(clusters.source, topic, args.records, args.size, args.partitions)
        alias = f"p{uuid.uuid4().hex[:6]}"
        watcher = Consumer({"bootstrap.servers": clusters.destination, "group.id": "bench-watch"})
        proc = launch("worker", clusters, [topic], alias, Path(tmp), args)
        out = RESULTS / f"profile-worker-{args.size}.txt"
        try:
            while end_total(watcher, f"{alias}.{topic}", args.partitions) == 0 and proc.poll() is None:
                time.sleep(0.05)
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

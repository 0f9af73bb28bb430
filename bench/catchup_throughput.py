"""Catch-up throughput against the worker's, on the same data: msgs/s of each.

    .venv/bin/python -m bench.catchup_throughput [--records 500000] [--size 100]

Preloads one topic (6 partitions) into `source`, copies it once with spark_jobs/catchup.py (Spark
local[*], wall time including the Spark session start-up) and once with the mirror worker
(bench/worker_throughput.py's measurement), and writes bench/results/catchup_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.worker_throughput import RESULTS, measure, preload
from bench.common import bench_stack
from devstack import Stack, paths


def measure_catchup(stack: Stack, records: int, size: int) -> dict:
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"bench-cu-{size}-{uuid.uuid4().hex[:8]}"
    preload(src, topic, records, size)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "spark_jobs/catchup.py", "--source.bootstrap.servers", src,
         "--destination.bootstrap.servers", dst, "--topics", topic, "--group.id", f"bench-{topic}", "--prefix", "cu."],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=1800,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    summary = json.loads(next(line for line in result.stdout.splitlines() if line.startswith('{"topics"')))
    return {
        "system": "catchup", "record_bytes": size, "records": records,
        "msgs_per_s": round(records / wall), "mb_per_s": round(records * size / wall / 1e6, 2),
        "wall_s": round(wall, 1), "copy_phase_msgs_per_s": summary["msgs_per_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args(argv)
    with bench_stack() as stack, tempfile.TemporaryDirectory() as workdir:
        rows = [measure_catchup(stack, args.records, args.size), measure(stack, args.records, args.size, Path(workdir))]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "catchup_throughput.json").write_text(json.dumps(rows, indent=2) + "\n")
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

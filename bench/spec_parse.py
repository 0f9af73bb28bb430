"""What one mirror's DAG file spends on the spec (issue 42): CPU time of loading a spec of N mirrors whole, of
loading one mirror's entry (`load_entries(path, only=NAME)`, what a DAG file does), and of `mirror_dags` (the
file's whole build of its DAGs, imports aside). Medians; no server needed.

    PYTHONPATH=.:plugins .venv/bin/python -m bench.spec_parse [--mirrors 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.airflow_breadth import breadth_spec, mirror_names


def cpu_median(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spec_parse", description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=int, default=100)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    from mirror_airflow.dag_factory import mirror_dags
    from mirror_worker.api import load_entries

    names = mirror_names(args.mirrors)
    middle = names[len(names) // 2]
    path = Path(tempfile.mkdtemp()) / "mirrors.yaml"
    path.write_text(yaml.safe_dump(breadth_spec("127.0.0.1:1", "127.0.0.1:2", names, "p")))
    whole = cpu_median(lambda: load_entries(path), args.runs)
    one = cpu_median(lambda: load_entries(path, only=middle), args.runs)
    mirror_dags(middle, path)  # imports once, outside the timing
    dags = cpu_median(lambda: mirror_dags(middle, path), max(3, args.runs // 2))
    print(f"{args.mirrors} mirrors: whole spec {whole * 1000:.1f} ms CPU, one mirror's entry {one * 1000:.1f} ms, "
          f"mirror_dags {dags * 1000:.1f} ms (medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m devstack {up,down,status,airflow,kafka-stop,kafka-start}` — the Makefile's stack-* targets."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devstack import paths
from devstack.errors import StackError
from devstack.stack import CLUSTERS, Stack


def _print_status(stack: Stack) -> bool:
    rows = stack.status()
    print(f"stack at {stack.root}")
    for row in rows:
        state = f"running pid {row['pid']:<7} rss {row['rss_mib']:>6.0f} MiB" if row["running"] else "stopped"
        print(f"  {row['cluster']:<12} {row['component']:<12} {state:<38} {row['address'] or '-'}")
    if stack.is_up():
        print(f"contract: {stack.stack_json}")
    return all(r["running"] for r in rows if r["cluster"] != "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="stack directory (default: .stack)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start both clusters and registries in the background")
    sub.add_parser("down", help="stop everything the stack started")
    sub.add_parser("status", help="report each component; exit 1 unless all run")
    sub.add_parser("airflow", help="start Airflow on the running stack with the demo mirror's DAGs unpaused")
    for name in ("kafka-stop", "kafka-start"):
        cmd = sub.add_parser(name, help=f"{name.split('-')[1]} one cluster's broker (data is kept)")
        cmd.add_argument("cluster", choices=CLUSTERS)
    args = parser.parse_args(argv)

    stack = Stack(args.root or paths.default_stack_dir())
    try:
        if args.command == "up":
            if stack.up():
                print(f"stack started in {stack.startup_seconds:.1f}s")
            else:
                print("stack already running")
            _print_status(stack)
        elif args.command == "down":
            stack.down()
            print(f"stack at {stack.root} stopped")
        elif args.command == "status":
            return 0 if _print_status(stack) else 1
        elif args.command == "airflow":
            from devstack.demo import print_login, run_with_demo

            print_login(run_with_demo(stack))
        elif args.command == "kafka-stop":
            stack[args.cluster].kafka.stop()
            print(f"kafka[{args.cluster}] stopped")
        elif args.command == "kafka-start":
            node = stack[args.cluster].kafka
            node.start()
            node.wait_ready()
            print(f"kafka[{args.cluster}] running on {node.bootstrap_servers}")
    except StackError as exc:
        print(f"devstack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

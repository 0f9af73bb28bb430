"""Describes one consumer group again and again through the worker's admin client of a cluster, printing one
JSON line per answer (tests/integration/test_coordinator_calls.py). `--raw`: a plain AdminClient instead
(what the worker used before clients/coordinator_admin.py), to show the librdkafka abort it meets."""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import KafkaException

from mirror_worker.clients import factory
from mirror_worker.clients.groups import describe_group


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    settings = {"bootstrap.servers": args.bootstrap}
    admin = factory.admin_client(settings) if args.raw else factory.worker_admin_client(settings, "source")
    while True:
        started = time.monotonic()
        try:
            description = describe_group(admin, args.group, args.timeout)
            line = {"state": description.state.name, "members": len(description.members)}
        except KafkaException as exc:
            line = {"error": exc.args[0].str()}
        print(json.dumps({**line, "took_s": round(time.monotonic() - started, 1)}), flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())

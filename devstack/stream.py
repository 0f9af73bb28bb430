"""The demo's slow live stream: a few Avro orders a second to `demo.orders` on the stack's source, for as long
as the stack runs, so that the dashboard's charts show a living mirror after the demo's burst has been copied
(issue 44 item 4: once the 15-s demo stopped producing, every chart was flat). `make run` starts it as the stack
service `demo-stream` (`start_stream`); `make stack-down` stops it with the rest.

    python -m devstack.stream --home DIR --bootstrap HOST:PORT --registry URL [--per-second N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devstack.paths import ROOT
from mirror_worker.api import producer

STREAM_SERVICE = "demo-stream"
PER_SECOND = 2
TOPIC = "demo.orders"
ORDER_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "demo",
 "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
            {"name": "quantity", "type": "int"}]}
"""
ITEMS = ["apple", "pear", "plum", "fig", "kiwi"]


def produce_orders(bootstrap: str, registry_url: str, count: int) -> int:
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), ORDER_SCHEMA)
    orders = producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    first_id = int(time.time() * 1000)
    for i in range(count):
        order = {"id": first_id + i, "item": ITEMS[i % len(ITEMS)], "quantity": i + 1}
        value = serializer(order, SerializationContext(TOPIC, MessageField.VALUE))
        orders.produce(TOPIC, key=str(order["id"]).encode(), value=value, headers=[("demo", b"make-run")])
    if orders.flush(30):
        raise KafkaException("demo: not every order was delivered")
    return first_id


def run(produce: Callable[[int], object], per_second: int, stop: threading.Event, interval_s: float = 1.0) -> int:
    """`produce(per_second)` once every `interval_s` until `stop` is set; a failed round is said on stderr and
    the next one tried (a broker restarting is no reason to end the stream). Returns the rounds produced."""
    rounds, next_at = 0, time.monotonic()
    while not stop.is_set():
        try:
            produce(per_second)
            rounds += 1
        except Exception as exc:  # noqa: BLE001 - a demo stream keeps going; the error is said
            print(f"demo-stream: round not produced: {exc}", file=sys.stderr, flush=True)
        next_at += interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))
    return rounds


def start_stream(stack, per_second: int = PER_SECOND) -> bool:
    """Start the stream as a stack service unless it runs already; True when started here."""
    service = stack.service(STREAM_SERVICE)
    if service.is_running():
        return False
    source = stack["source"]
    # A stack service starts in its own folder: the checkout's packages (devstack is not installed) come through
    # PYTHONPATH, or `-m devstack.stream` dies at once with ModuleNotFoundError.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    service.start([sys.executable, "-m", "devstack.stream", "--home", str(service.home),
                   "--bootstrap", source.kafka.bootstrap_servers, "--registry", source.registry.url,
                   "--per-second", str(per_second)], env={"PYTHONPATH": path})
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.stream", description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="the service's folder (its command line names it)")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--per-second", type=int, default=PER_SECOND)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"demo-stream: {args.per_second} orders/s to {args.bootstrap}", flush=True)
    rounds = run(lambda n: produce_orders(args.bootstrap, args.registry, n), args.per_second, stop)
    print(f"demo-stream: stopped after {rounds} rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

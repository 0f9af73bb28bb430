"""`make run`'s demo on the local stack: Avro orders through `source` and its registry, read back.

The mirror itself (issue #3) and Airflow (issue #5) join this demo as they land.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devstack import Stack, paths

TOPIC = "demo.orders"
ORDER_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "demo",
 "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
            {"name": "quantity", "type": "int"}]}
"""
ITEMS = ["apple", "pear", "plum", "fig", "kiwi"]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce_orders(bootstrap: str, registry_url: str, count: int) -> int:
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), ORDER_SCHEMA)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    first_id = int(time.time() * 1000)
    for i in range(count):
        order = {"id": first_id + i, "item": ITEMS[i % len(ITEMS)], "quantity": i + 1}
        value = serializer(order, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(order["id"]).encode(), value=value, headers=[("demo", b"make-run")])
    if producer.flush(30):
        raise KafkaException("demo: not every order was delivered")
    return first_id


def read_orders(bootstrap: str, registry_url: str, first_id: int, count: int) -> list[dict]:
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "demo-reader", "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([TOPIC])
    orders: list[dict] = []
    deadline = time.monotonic() + 30
    try:
        while len(orders) < count and time.monotonic() < deadline:
            for msg in consumer.consume(100, 1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                order = deserializer(msg.value(), SerializationContext(TOPIC, MessageField.VALUE))
                if order["id"] >= first_id:
                    orders.append({**order, "partition": msg.partition(), "offset": msg.offset()})
    finally:
        consumer.close()
    return orders


def main() -> int:
    stack = Stack(paths.default_stack_dir())
    if not stack.is_up():
        print("demo: the local stack is not running; start it with `make stack-up`", file=sys.stderr)
        return 1
    source = stack["source"]
    ensure_topic(source.kafka.bootstrap_servers, TOPIC, partitions=3)
    count = 10
    first_id = produce_orders(source.kafka.bootstrap_servers, source.registry.url, count)
    orders = read_orders(source.kafka.bootstrap_servers, source.registry.url, first_id, count)
    print(f"\nproduced {count} Avro orders to {TOPIC} on source and read back {len(orders)}:")
    for order in sorted(orders, key=lambda o: o["id"]):
        print(f"  p{order['partition']}@{order['offset']:<4} id={order['id']} {order['item']:<6} x{order['quantity']}")
    print(f"\nstack contract:   {stack.stack_json}")
    for name, cluster in stack.clusters.items():
        print(f"  {name:<12} kafka {cluster.kafka.bootstrap_servers:<22} registry {cluster.registry.url}")
    print("status: make stack-status    stop: make stack-down")
    return 0 if len(orders) == count else 1


if __name__ == "__main__":
    sys.exit(main())

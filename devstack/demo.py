"""`make run`'s demo on the local stack: a mirror from `source` to `destination`, kept up with live.

Once the mirror's worker holds its consumer group, Avro orders are produced to `demo.orders` on `source`
while the worker copies them to `source.demo.orders` on `destination`; the demo prints both ends until the
mirror has caught up. When Airflow runs on the stack (`python -m devstack airflow`), the worker is the one
its `mirror__demo` DAG runs; otherwise the demo starts a worker itself as a stack service. Once the mirror has
caught up, a slow stream of orders keeps it live (devstack/stream.py). `make stack-down` stops all of them.
The demo's Kafka clients log to <stack>/demo.log (JSON lines), never to the terminal.

The step before it, `python -m devstack airflow`, is `run_with_demo` below: Airflow on the stack with
config/mirrors.yaml pointed at the stack's clusters and the demo mirror's DAGs unpaused.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devstack import Stack, paths
from devstack.airflow import USERNAME, Airflow
from devstack.net import free_port
from devstack.stream import STREAM_SERVICE, TOPIC, produce_orders, start_stream
from devstack.stream import PER_SECOND as STREAM_RATE
from mirror_worker.api import admin_client, consumer, held_partitions, side_consumer

MIRRORED_TOPIC = "source.demo.orders"
GROUP = "demo-mirror"
_COORDINATOR_STARTING = {
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def _transient(exc: KafkaException) -> bool:
    """A look-up the demo only watches with, refused or timed out for now (a young cluster, or two cores busy
    with Airflow starting the worker): asked again on the next round, not a failed demo."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return False
    return error.code() in _COORDINATOR_STARTING or error.code() == KafkaError._TIMED_OUT or error.retriable()


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = admin_client({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_orders(bootstrap: str, registry_url: str, first_id: int, count: int) -> list[dict]:
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    reader = consumer({
        "bootstrap.servers": bootstrap, "group.id": "demo-reader", "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    reader.subscribe([TOPIC])
    orders: list[dict] = []
    deadline = time.monotonic() + 30
    try:
        while len(orders) < count and time.monotonic() < deadline:
            for msg in reader.consume(100, 1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                order = deserializer(msg.value(), SerializationContext(TOPIC, MessageField.VALUE))
                if order["id"] >= first_id:
                    orders.append({**order, "partition": msg.partition(), "offset": msg.offset()})
    finally:
        reader.close()
    return orders


def demo_spec(stack: Stack, metrics_port: int) -> str:
    return json.dumps({
        "groups": [{
            "name": "local",
            "source": {"name": "source", "kafka": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers},
                       "schema-registry-url": stack["source"].registry.url},
            "destination": {"kafka": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers},
                            "schema-registry-url": stack["destination"].registry.url},
            "mirrors": [{
                "name": "demo", "whitelist": r"demo\..*", "prefix": "source.", "preserve-partitions": True,
                "provenance-headers": True, "group-id": GROUP, "metrics-port": metrics_port,
            }],
        }],
    }, indent=2)


def start_mirror(stack: Stack) -> tuple[str, str]:
    """Start the demo mirror as a stack service unless it runs already; returns (metrics url, log)."""
    service = stack.service("demo-mirror")
    spec_path = service.home / "mirrors.yaml"
    if not service.is_running():
        service.home.mkdir(parents=True, exist_ok=True)
        port = free_port()
        spec_path.write_text(demo_spec(stack, port))  # JSON is YAML
        service.start(
            [sys.executable, "-m", "mirror_worker", "--config", str(spec_path), "--mirror", "demo"])
    port = json.loads(spec_path.read_text())["groups"][0]["mirrors"][0]["metrics-port"]
    return f"http://127.0.0.1:{port}/metrics", str(service.log_file)


def end_offsets(bootstrap: str, topic: str) -> int:
    watcher = side_consumer({"bootstrap.servers": bootstrap}, "demo-watch")
    try:
        metadata = watcher.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(watcher.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in metadata.partitions)
    finally:
        watcher.close()


def committed_total(bootstrap: str, group: str = GROUP) -> int:
    watcher = side_consumer({"bootstrap.servers": bootstrap}, group)
    try:
        partitions = watcher.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        committed = watcher.committed([TopicPartition(TOPIC, p) for p in partitions], timeout=10)
        return sum(max(tp.offset, 0) for tp in committed)
    except KafkaException as exc:
        if exc.args[0].code() in _COORDINATOR_STARTING:  # a young cluster: nothing committed yet
            return 0
        raise
    finally:
        watcher.close()


def wait_for_worker(bootstrap: str, group: str, timeout: float, out=print) -> bool:
    """Wait until a worker holds every partition of the demo topic in the mirror's consumer group: orders
    produced from then on are copied as the table is printed (the worker Airflow runs starts minutes after the
    DAG run does, on two cores). A member that has joined holds nothing until the group's rebalance ends."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    partitions = set(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
    started = time.monotonic()
    next_note = started + 15
    out(f"waiting for the mirror's worker to join its consumer group {group} ...")
    while _held(admin, group) != partitions:
        if time.monotonic() > started + timeout:
            return False
        if time.monotonic() >= next_note:
            out(f"  still waiting after {time.monotonic() - started:.0f}s")
            next_note += 15
        time.sleep(2)
    out(f"  joined after {time.monotonic() - started:.0f}s: producing 200 orders a second for 15 s\n")
    return True


def _held(admin, group: str) -> set[int] | None:
    """The demo topic's partitions the group's members hold; None while the look-up is refused or times out."""
    try:
        return {p for t, p in held_partitions(admin, group, timeout=10) if t == TOPIC}
    except KafkaException as exc:
        if _transient(exc):
            return None
        raise


def log_to(path: Path) -> Path:
    """Every log line of this process (its librdkafka clients' included) goes to `path`, not the terminal."""
    from mirror_worker.api import configure_logging

    configure_logging(stream=path.open("a", encoding="utf-8"))
    return path


def main() -> int:
    stack = Stack(paths.default_stack_dir())
    if not stack.is_up():
        print("demo: the local stack is not running; start it with `make stack-up`", file=sys.stderr)
        return 1
    client_log = log_to(stack.root / "demo.log")
    source = stack["source"]
    ensure_topic(source.kafka.bootstrap_servers, TOPIC, partitions=3)
    airflow_mirror = _airflow_mirror(stack)
    if airflow_mirror is None:
        group, join_s = GROUP, 60
        metrics_url, log_file = start_mirror(stack)
        print(f"\nmirror worker running: {TOPIC} on source -> {MIRRORED_TOPIC} on destination")
    else:
        # The DAG run starts the worker after discover, ensure_topics and sync_schemas: minutes on two cores.
        group, join_s = airflow_mirror.group_id, 600
        metrics_url = (f"http://127.0.0.1:{airflow_mirror.metrics_port}/metrics" if airflow_mirror.metrics_port
                       else "none: the mirror sets no metrics-port")
        log_file = "Airflow's task logs (DAG mirror__demo, task run_worker)"
        print(f"\nmirror run by Airflow (DAG mirror__demo): {TOPIC} on source -> {MIRRORED_TOPIC} on destination")
    print(f"  metrics {metrics_url}\n  logs    {log_file}; this demo's Kafka clients: {client_log}\n")
    if not wait_for_worker(source.kafka.bootstrap_servers, group, join_s):
        print(f"demo: no worker joined the mirror's group {group} within {join_s}s; see its logs", file=sys.stderr)
        return 1
    print("  second  produced on source  mirrored on destination  committed by the mirror")
    started = time.monotonic()
    for second in range(1, 16):
        produce_orders(source.kafka.bootstrap_servers, source.registry.url, 200)
        time.sleep(max(0.0, started + second - time.monotonic()))
        if second % 3 == 0:
            _progress(stack, second, group, tries=1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = _counts(stack, group)
        # Caught up: every record copied, and the copies committed (the worker commits periodically).
        if counts is not None and counts[1] >= counts[0] and counts[2] >= counts[0]:
            break
        time.sleep(1)
    caught_up = _progress(stack, "final", group)
    first_id = produce_orders(source.kafka.bootstrap_servers, source.registry.url, 3)
    orders = read_orders(source.kafka.bootstrap_servers, source.registry.url, first_id, 3)
    print("\nlatest orders (Avro through the source registry):")
    for order in sorted(orders, key=lambda o: o["id"]):
        print(f"  p{order['partition']}@{order['offset']:<5} id={order['id']} {order['item']:<6} x{order['quantity']}")
    print(f"\nstack contract:   {stack.stack_json}")
    for name, cluster in stack.clusters.items():
        print(f"  {name:<12} kafka {cluster.kafka.bootstrap_servers:<22} registry {cluster.registry.url}")
    if airflow_mirror is not None:
        airflow = Airflow(stack)
        release_verify(airflow.api(), caught_up)
        print_login(airflow)
    start_stream(stack)
    print(f"\na slow stream of {STREAM_RATE} orders/s keeps the mirror live (stack service {STREAM_SERVICE}).")
    print("the mirror keeps running in the background.  status: make stack-status    stop: make stack-down")
    return 0 if caught_up else 1


def _airflow_mirror(stack: Stack):
    """The demo mirror's config (mirror_worker's MirrorConfig) when Airflow runs it, else None."""
    if "airflow" not in json.loads(stack.stack_json.read_text()):
        return None
    from mirror_worker.api import select_mirror

    return select_mirror(Airflow(stack).spec, DEMO_MIRROR)


def _counts(stack: Stack, group: str) -> tuple[int, int, int] | None:
    """(produced, mirrored, committed) records; None while a look-up is refused or times out."""
    try:
        return (end_offsets(stack["source"].kafka.bootstrap_servers, TOPIC),
                end_offsets(stack["destination"].kafka.bootstrap_servers, MIRRORED_TOPIC),
                committed_total(stack["source"].kafka.bootstrap_servers, group))
    except KafkaException as exc:
        if _transient(exc):
            return None
        raise


def _progress(stack: Stack, label, group: str = GROUP, tries: int = 3) -> bool:
    for _ in range(tries):
        counts = _counts(stack, group)
        if counts is not None:
            produced, mirrored, committed = counts
            print(f"  {label!s:>6}  {produced:>17}  {mirrored:>23}  {committed:>22}")
            return mirrored >= produced
    print(f"  {label!s:>6}  (the clusters did not answer within 10 s, {tries} times)")
    return False


# --- `make run`: Airflow with the demo mirror ---------------------------------------------------
DEMO_MIRROR = "demo"
DEMO_SPEC_TEMPLATE = paths.ROOT / "config" / "mirrors.yaml"


def stack_spec(stack: Stack, template: Path = DEMO_SPEC_TEMPLATE) -> str:
    """The spec `template` with every cluster address replaced by the running stack's.

    The mirror names stay, so the DAG files in dags/ (one per mirror of config/mirrors.yaml) match.
    A source named after a stack cluster gets that cluster's addresses, any other gets `source`'s. A mirror
    without a `metrics-port` gets a free one: the dashboard reads halts and schema conflicts from it.
    """
    spec = yaml.safe_load(template.read_text(encoding="utf-8"))
    for group in spec["groups"]:
        sources = group.get("sources") or [group["source"]]
        for source in sources:
            cluster = stack[source.get("name") if source.get("name") in stack.clusters else "source"]
            _point_at(source, cluster)
        _point_at(group["destination"], stack["destination"])
        for mirror in group["mirrors"]:
            if "metrics-port" not in {**(group.get("settings") or {}), **mirror}:
                mirror["metrics-port"] = free_port()
    header = f"# Written by `make run` from {template.relative_to(paths.ROOT)} with the addresses of {stack.root}.\n"
    return header + yaml.safe_dump(spec, sort_keys=False)


def _point_at(endpoint: dict, cluster) -> None:
    endpoint["kafka"] = {**endpoint.get("kafka", {}), "bootstrap.servers": cluster.kafka.bootstrap_servers}
    if endpoint.get("schema-registry-url"):
        endpoint["schema-registry-url"] = cluster.registry.url


def demo_dag_ids(name: str = DEMO_MIRROR) -> list[str]:
    return [f"mirror__{name}", f"mirror__{name}__lag", f"mirror__{name}__verify", f"mirror__{name}__catchup"]


VERIFY_DAG = demo_dag_ids()[2]


def run_with_demo(stack: Stack, out=print) -> Airflow:
    """Start Airflow on the stack with the demo spec and unpause the demo mirror's DAGs."""
    # The lifecycle DAG discovers the demo topic, so it exists before the DAG runs.
    ensure_topic(stack["source"].kafka.bootstrap_servers, TOPIC, partitions=3)
    airflow = Airflow(stack)
    if not airflow.is_running():
        airflow.spec.write_text(stack_spec(stack), encoding="utf-8")
        airflow.start()
        out(f"airflow starting (api-server, scheduler, dag-processor, triggerer); log {airflow.process.log_file}")
    airflow.wait_ready()
    if airflow.startup_seconds is not None:
        out(f"airflow healthy after {airflow.startup_seconds:.0f}s, "
            f"{airflow.rss_mib():.0f} MiB RSS summed over its processes")
    else:
        out(f"airflow already running at {airflow.url}")
    api = airflow.api()
    wanted = demo_dag_ids()
    api.wait_for_dags(wanted[:1], timeout=300)
    for dag_id in wanted:
        # Not verify: unpaused, it runs at once (its latest interval) and would check a topic without records.
        if dag_id != VERIFY_DAG and api.dag(dag_id) is not None:
            api.set_paused(dag_id, False)
    return airflow


def release_verify(api, caught_up: bool, out=print) -> bool:
    """Unpause the demo's verify DAG once its orders are mirrored and committed: Airflow then runs it for its
    latest interval (catchup=False), over records. Left paused when the mirror did not catch up."""
    if not caught_up:
        out(f"  {VERIFY_DAG} left paused: the mirror did not catch up (unpause it in the UI to check)")
        return False
    api.set_paused(VERIFY_DAG, False)
    out(f"  {VERIFY_DAG} unpaused: its consistency check runs now, over the orders just mirrored")
    return True


def print_login(airflow: Airflow) -> None:
    print(f"\nAirflow UI   {airflow.url}")
    print(f"  log in as  {USERNAME} / {airflow.password}   (password kept in {airflow.password_file})")
    print(f"  dashboard  {airflow.url}/plugin/kafka-mirrors   (lag, throughput, halts, schema conflicts)")
    print(f"  DAGs       {', '.join(demo_dag_ids())}: unpaused ({VERIFY_DAG} once the orders were mirrored)")
    print(f"             pause mirror__{DEMO_MIRROR} in the UI to stop the mirror, unpause it to resume")
    print(f"  logs       {airflow.process.log_file} (components), {airflow.home / 'logs'} (tasks)")


if __name__ == "__main__":
    sys.exit(main())

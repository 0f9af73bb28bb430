"""The lifecycle DAG on the real stack through dag.test(): discover -> ensure -> schemas -> worker.

The worker runs for a bounded time (param stop_after_s) and is stopped with SIGTERM like a pause
would: it must have mirrored every record and committed the group's offsets on the way out.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.airflow_support import dags_folder
from tests.http_receiver import Receiver
from tests.kafka_util import create_topic, produce
from tests.worker_util import committed_offsets, wait_for_count

pytestmark = pytest.mark.integration

RECORDS, PARTITIONS = 300, 3


def _spec(stack, name: str, topic: str, group: str, **mirror) -> str:
    return json.dumps({"groups": [{
        "name": "it",
        "source": {"name": "source", "kafka": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers}},
        "destination": {"kafka": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "af.", "preserve-partitions": True,
                     "group-id": group, "commit-interval-s": 1, **mirror}],
    }]})


def test_lifecycle_dag_mirrors_and_stops_gracefully(stack, topic_name, tmp_path, airflow_db, monkeypatch):
    from airflow.utils.state import DagRunState, TaskInstanceState

    from mirror_airflow.dag_factory import mirror_dags, render

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("af"), f"it{uuid.uuid4().hex[:8]}", f"af-group-{uuid.uuid4().hex[:8]}"
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % PARTITIONS}
                         for i in range(RECORDS)])
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(_spec(stack, name, topic, group))
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(spec))
    render(spec, dags_folder())  # dag.test() serializes the DAG from the DAGs folder, as Airflow would

    dag = mirror_dags(name, spec)[f"mirror__{name}"]
    run = dag.test(run_conf={"stop_after_s": 40})

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == dict.fromkeys(["discover", "ensure_topics", "sync_schemas", "run_worker"], TaskInstanceState.SUCCESS)
    assert run.state == DagRunState.SUCCESS
    discovered = run.get_task_instance("discover").xcom_pull(task_ids="discover")
    assert discovered == {topic: f"af.{topic}"}
    mirrored = wait_for_count(dst, f"af.{topic}", RECORDS, timeout=30)
    assert sorted(m.value() for m in mirrored) == sorted(f"v{i}".encode() for i in range(RECORDS))
    # The bounded stop is the pause path (SIGTERM): offsets committed on the way out, all of them.
    assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == RECORDS


def test_airflow_runs_each_mapped_worker_task_with_its_map_index_as_slot(stack, topic_name, tmp_path, airflow_db,
                                                                        monkeypatch):
    """`workers: 2` through Airflow's own task runner (dag.test(), which runs mapped tasks one after the
    other): both map indexes succeed, and their static members in the group are slots 0 and 1 (a static
    member stays listed after SIGTERM until its session times out)."""
    from airflow.utils.state import DagRunState, TaskInstanceState
    from confluent_kafka.admin import AdminClient

    from mirror_airflow.dag_factory import mirror_dags, render
    from mirror_worker.clients.groups import describe_group

    src = stack["source"].kafka.bootstrap_servers
    topic, name, group = topic_name("afm"), f"m{uuid.uuid4().hex[:8]}", f"af-group-{uuid.uuid4().hex[:8]}"
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, [{"value": f"v{i}".encode(), "partition": i % PARTITIONS} for i in range(RECORDS)])
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(_spec(stack, name, topic, group, **{"static-membership": True, "airflow": {"workers": 2}}))
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(spec))
    render(spec, dags_folder())

    # Each worker runs 25 s from its launch: at load 26 (a full make test) the second took over 8 s to start,
    # was stopped before it joined the group, and only slot 0 was listed.
    run = mirror_dags(name, spec)[f"mirror__{name}"].test(run_conf={"stop_after_s": 25})

    assert run.state == DagRunState.SUCCESS
    workers = {ti.map_index: ti.state for ti in run.get_task_instances() if ti.task_id == "run_worker"}
    assert workers == {0: TaskInstanceState.SUCCESS, 1: TaskInstanceState.SUCCESS}
    members = describe_group(AdminClient({"bootstrap.servers": src}), group).members or []
    assert sorted(m.group_instance_id for m in members) == [f"{group}.source.slot-{s}.stream-0" for s in (0, 1)]
    assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == RECORDS


def _first_record(consumer, partition, timeout_s: float = 30.0):
    """The first record (or event) a hook's consumer reads from `partition` within `timeout_s`, None if none;
    the consumer closed after."""
    try:
        consumer.assign([partition])
        deadline, record = time.monotonic() + timeout_s, None
        while record is None and time.monotonic() < deadline:
            record = consumer.poll(1.0)
        return record
    finally:
        consumer.close()


def test_a_kafka_connection_that_takes_records_over_16_mib_passes_its_test_and_reads(stack, topic_name, monkeypatch):
    """The hook's consumers get 16 MiB fetch responses by default (config/librdkafka.py), and librdkafka refuses a
    consumer whose fetch.max.bytes is under its message.max.bytes: a connection whose extras took records of 20 MB
    failed its test with an error about a setting it never named. The response now follows message.max.bytes."""
    from confluent_kafka import TopicPartition

    from mirror_airflow.hooks.kafka import KafkaHook

    src = stack["source"].kafka.bootstrap_servers
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_LARGE", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": src, "message.max.bytes": "20000000"}}))
    hook = KafkaHook("kafka_large")
    ok, message = hook.test_connection()
    assert ok, message  # before: "Failed to create consumer: `fetch.max.bytes` must be >= `message.max.bytes`"
    topic = topic_name("hook-large")
    create_topic(src, topic, partitions=1)
    produce(src, topic, [{"value": b"read with 20 MB records allowed", "partition": 0}])
    record = _first_record(hook.get_consumer(f"hook-large-{uuid.uuid4().hex[:8]}"), TopicPartition(topic, 0, 0))
    assert record is not None and record.error() is None and record.value() == b"read with 20 MB records allowed"


def test_kafka_and_registry_hooks_on_the_stack(stack, topic_name, monkeypatch):
    from confluent_kafka import TopicPartition
    from airflow.providers.apache.kafka.hooks.client import KafkaAdminClientHook

    from mirror_airflow.hooks.kafka import KafkaHook
    from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

    # One `kafka` connection (the official provider's type), extras = client settings, for both hooks.
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_IT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers,
                                         "client.id": "hook-it", "linger.ms": "5"}}))
    hook = KafkaHook("kafka_it")
    ok, message = hook.test_connection()
    assert ok, message
    assert "broker(s)" in message
    topic = topic_name("hook")
    KafkaAdminClientHook(kafka_config_id="kafka_it").create_topic([(topic, 2, 1)])  # the official hook
    assert len(hook.get_conn.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    producer = hook.get_producer()
    producer.produce(topic, key=b"k", value=b"through the hook", partition=1)
    assert producer.flush(30) == 0
    message = _first_record(hook.get_consumer(f"hook-it-{uuid.uuid4().hex[:8]}"), TopicPartition(topic, 1, 0))
    assert message is not None and message.error() is None and message.value() == b"through the hook"
    registry = stack["source"].registry.url  # http://host:port/apis/ccompat/v7
    host, _, rest = registry.removeprefix("http://").partition("/")
    monkeypatch.setenv("AIRFLOW_CONN_REG_IT", json.dumps(
        {"conn_type": "http", "host": host.split(":")[0], "port": int(host.split(":")[1]), "extra": {"path": rest}}))
    ok, message = SchemaRegistryHook("reg_it").test_connection()
    assert ok, message
    monkeypatch.setenv("AIRFLOW_CONN_REG_DOWN", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 1}))
    ok, message = SchemaRegistryHook("reg_down").test_connection()
    assert not ok


def test_a_crashing_worker_fails_the_task_and_alerts_on_call(stack, topic_name, tmp_path, airflow_db, monkeypatch):
    """Destination unreachable: the worker exits non-zero, run_worker fails after its (zero) retries and
    the mirror's webhook notifier posts the failure to a local receiver."""
    from airflow.utils.state import DagRunState, TaskInstanceState

    from devstack.net import free_port
    from mirror_airflow.dag_factory import mirror_dags, render

    receiver = Receiver()
    try:
        name = f"crash{uuid.uuid4().hex[:8]}"
        spec = json.loads(_spec(stack, name, topic_name("none"), f"af-group-{uuid.uuid4().hex[:8]}",
                                **{"startup-timeout-s": 3,
                                   "airflow": {"worker-retries": 0, "alerts": {
                                       "webhook-url": f"{receiver.url}/alert"}}}))
        spec["groups"][0]["destination"]["kafka"]["bootstrap.servers"] = f"127.0.0.1:{free_port()}"
        path = tmp_path / "mirrors.yaml"
        path.write_text(json.dumps(spec))
        monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
        render(path, dags_folder())

        run = mirror_dags(name, path)[f"mirror__{name}"].test()

        assert run.state == DagRunState.FAILED
        assert run.get_task_instance("run_worker").state == TaskInstanceState.FAILED
        assert len(receiver.bodies) == 1, receiver.bodies
        alert = receiver.bodies[0]
        assert (alert["mirror"], alert["dag_id"], alert["task_id"]) == (name, f"mirror__{name}", "run_worker")
        assert "exited with code 2" in alert["detail"], alert
    finally:
        receiver.close()


def test_discover_and_ensure_through_airflow_connections(stack, topic_name, tmp_path, monkeypatch):
    """`airflow: {source-conn-id, destination-conn-id}`: the tasks' clients come from Kafka connections.
    The topics are created as the worker creates them: one whose source takes any timestamp gets a destination
    that does too (issue 43 defect 4: created at Kafka 4's default, it refused a record two hours ahead)."""
    from confluent_kafka.admin import AdminClient

    from mirror_airflow.operators.topics import DiscoverTopicsOperator, EnsureDestinationTopicsOperator
    from mirror_worker.topics.admin import describe_topics
    from mirror_worker.topics.configs import describe_explicit_configs

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("conn")
    accepts_any = "9223372036854775807"
    for suffix, partitions, config in (("a", 3, {"message.timestamp.after.max.ms": accepts_any}), ("b", 1, None)):
        create_topic(src, f"{base}.{suffix}", partitions=partitions, config=config)
    create_topic(src, f"other-{base}", partitions=1)
    for conn, bootstrap in (("KAFKA_SRC_IT", src), ("KAFKA_DST_IT", dst)):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn}", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}))
    # The spec's own addresses lead nowhere: only the connections can make these tasks work.
    spec = json.loads(_spec(stack, "viaconn", rf"{base}\..*", "g"))
    spec["groups"][0]["source"]["kafka"]["bootstrap.servers"] = "127.0.0.1:1"
    spec["groups"][0]["destination"]["kafka"]["bootstrap.servers"] = "127.0.0.1:1"
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps(spec))
    common = {"spec_path": str(path), "mirror_name": "viaconn", "source_conn_id": "kafka_src_it",
              "destination_conn_id": "kafka_dst_it"}

    mapping = DiscoverTopicsOperator(task_id="discover", **common).execute({})
    assert mapping == {f"{base}.a": f"af.{base}.a", f"{base}.b": f"af.{base}.b"}

    class Ti:
        def xcom_pull(self, task_ids):
            return mapping

    counts = EnsureDestinationTopicsOperator(task_id="ensure_topics", **common).execute({"ti": Ti()})
    assert counts == {f"af.{base}.a": 3, f"af.{base}.b": 1}
    on_destination = describe_topics(AdminClient({"bootstrap.servers": dst}))
    assert on_destination[f"af.{base}.a"].partitions == 3
    created = describe_explicit_configs(AdminClient({"bootstrap.servers": dst}), [f"af.{base}.a", f"af.{base}.b"])
    assert created[f"af.{base}.a"].get("message.timestamp.after.max.ms") == accepts_any, created
    assert "message.timestamp.after.max.ms" not in created[f"af.{base}.b"], created


def test_sync_schemas_copies_the_discovered_topics_subjects(stack, topic_name, tmp_path):
    """With registries on both sides, sync_schemas registers the source subject under the destination
    topic's name (mirror_worker.schemas.sync) and returns its report."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from mirror_airflow.operators.schemas import SyncSchemasOperator

    topic = topic_name("sr")
    record = {"type": "record", "name": f"R{uuid.uuid4().hex[:8]}", "fields": [{"name": "id", "type": "long"}]}
    SchemaRegistryClient({"url": stack["source"].registry.url}).register_schema(
        f"{topic}-value", Schema(json.dumps(record), "AVRO"))
    spec = json.loads(_spec(stack, "withreg", topic, "g"))
    spec["groups"][0]["source"]["schema-registry-url"] = stack["source"].registry.url
    spec["groups"][0]["destination"]["schema-registry-url"] = stack["destination"].registry.url
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps(spec))

    class Ti:
        def xcom_pull(self, task_ids):
            return {topic: f"af.{topic}"}

    report = SyncSchemasOperator(task_id="sync_schemas", spec_path=str(path), mirror_name="withreg").execute({"ti": Ti()})
    assert report["ok"] and report["topics"] == [topic] and report["registered"] == 1, report
    assert SchemaRegistryClient({"url": stack["destination"].registry.url}).get_versions(f"af.{topic}-value") == [1]


def test_two_worker_tasks_share_the_group_a_killed_one_loses_nothing_and_a_pause_stops_both(
        stack, topic_name, tmp_path, monkeypatch):
    """`airflow: {workers: 2}` with static membership: the two tasks of the mapped run_worker, run at once
    as the executor would, each hold partitions of the mirror's group; kill -9 of one worker fails its task
    and the retry (same map index, same slot) mirrors on; a pause stops both with every record committed.
    Airflow's scheduler is not in the loop: dag.test() runs mapped tasks one after the other."""
    import os
    import signal
    import threading
    import time

    from confluent_kafka.admin import AdminClient

    from mirror_airflow.dag_factory import mirror_dags
    from mirror_airflow.exceptions import WorkerFailedError
    from mirror_airflow.operators import worker as operators
    from mirror_worker.clients.groups import describe_group
    from tests.kafka_util import consume_all
    from tests.worker_util import loss_and_duplicates, wait_for_count

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("afw"), f"w{uuid.uuid4().hex[:8]}", f"af-group-{uuid.uuid4().hex[:8]}"
    partitions = 4
    create_topic(src, topic, partitions=partitions)
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(_spec(stack, name, topic, group, **{
        "static-membership": True, "airflow": {"workers": 2, "pause-check-interval-s": 1, "worker-retries": 1}}))
    paused = threading.Event()

    class Api:
        def is_paused(self, dag_id):
            return paused.is_set()

    monkeypatch.setattr(operators, "api_from_connection", lambda conn_id, log: Api())
    mapped = mirror_dags(name, spec)[f"mirror__{name}"].get_task("run_worker")
    outcome: dict[int, object] = {}

    def start(slot: int):
        task = mapped.unmap({"worker_slot": slot})  # what the executor runs for map index `slot`

        def run():
            try:
                outcome[slot] = task.execute({"params": {}})
            except Exception as exc:
                outcome[slot] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return task, thread

    batch = iter(range(10_000))

    def produce_batch(count: int = 100):
        produce(src, topic, [{"value": f"v{next(batch)}".encode(), "partition": i % partitions} for i in range(count)])

    admin = AdminClient({"bootstrap.servers": src})

    def holders() -> dict[str, int]:
        members = describe_group(admin, group).members or []
        return {m.group_instance_id: len(m.assignment.topic_partitions) for m in members}

    def wait_for_two_holders():
        deadline = time.monotonic() + 60
        while True:
            held = holders()
            if len(held) == 2 and all(held.values()):
                return held
            assert time.monotonic() < deadline, f"not two members holding partitions: {held}"
            time.sleep(0.5)

    tasks = dict((slot, start(slot)) for slot in (0, 1))
    try:
        produce_batch()
        held = wait_for_two_holders()
        assert sorted(held) == [f"{group}.source.slot-{s}.stream-0" for s in (0, 1)]
        assert sum(held.values()) == partitions
        produce_batch()
        wait_for_count(dst, f"af.{topic}", 200, timeout=60)

        killed, thread = tasks[1]
        os.kill(killed._worker.proc.pid, signal.SIGKILL)
        thread.join(30)
        assert isinstance(outcome.pop(1), WorkerFailedError)
        produce_batch()
        # Airflow's retry of map index 1: the same slot takes its static id and partitions back. Slot 0
        # never gets them (the dead member's session outlives the test), so the commits checked below
        # after the pause are the retried worker's.
        tasks[1] = start(1)
        produce_batch()
        # The pause commits what has been mirrored; it does not wait for a retry still joining the group
        # (CI run of stop 33: paused before the retried slot was assigned, partitions 1 and 3 stayed at 50).
        # Every value, not a count: the kill may have left duplicates.
        copied = wait_for_count(dst, f"af.{topic}", 400, timeout=90, distinct=True)
        assert len({m.value() for m in copied}) >= 400, "the retried worker did not mirror the last batches"

        paused.set()
        stopped_at = time.monotonic()
        for _, thread in tasks.values():
            thread.join(60)
        assert time.monotonic() - stopped_at < 60
        assert {slot: (r["exit_code"], r["reason"]) for slot, r in outcome.items()} == {
            0: (0, "stop: DAG paused"), 1: (0, "stop: DAG paused")}, outcome
        assert sum(committed_offsets(src, group, topic, partitions).values()) == 400
        source = consume_all(src, topic, 400)
        missing, _, ordered = loss_and_duplicates(source, wait_for_count(dst, f"af.{topic}", 400, timeout=30))
        assert missing == [] and ordered
    finally:  # a failed check must not leave workers running (the pause stops them)
        paused.set()
        for _, thread in tasks.values():
            thread.join(60)

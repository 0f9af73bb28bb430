"""A mirror with `airflow: {workers: 2}` under Airflow's CeleryExecutor, as docker-compose.celery.yaml runs it:
Redis as the broker, two Celery workers, each on a host of its own (a UTS namespace with its own host name;
`devstack/airflow_celery.py`). The scheduler queues the mapped run_worker tasks, Celery hands one to each
worker, both hold partitions of the mirror's group; a mirror worker killed with -9 fails its task alone, which
Airflow retries on its host with the same slot; a pause stops both with every record committed.

Real everything: Airflow's scheduler, dag-processor and api-server, Debian's redis-server, the Celery
provider's workers, the stack's Kafka clusters and the mirror worker the DAG runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from devstack import paths
from devstack.airflow_celery import CeleryAirflow
from tests.e2e.waits import wait_until
from tests.kafka_util import consume_all, create_topic, produce
from tests.worker_util import committed_offsets, loss_and_duplicates, wait_for_count

# Grouped with the browser tests (tests/conftest.py): one Airflow at a time on the two cores.
pytestmark = [pytest.mark.integration, pytest.mark.celery, pytest.mark.timeout(1500)]

HOSTS = ("celery-host-1", "celery-host-2")
PARTITIONS = 4
PAUSE_STOP_S = 60  # the pause contract: the workers stop (flushed, committed) within 60 s
ARTIFACTS = paths.ROOT / "tests" / "artifacts" / "celery-airflow-logs"


def _spec(stack, name: str, topic: str, group: str) -> dict:
    return {"groups": [{
        "name": "celery",
        "source": {"name": "source", "kafka": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers}},
        "destination": {"kafka": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers}},
        "mirrors": [{
            "name": name, "whitelist": topic, "prefix": "celery.", "preserve-partitions": True, "group-id": group,
            "commit-interval-s": 1, "static-membership": True,
            "airflow": {"workers": 2, "unpaused": False, "pause-check-interval-s": 2, "worker-retries": 1,
                        "worker-retry-delay-s": 1,
                        "verify-schedule": None},
        }],
    }]}


def test_celery_runs_a_mirrors_two_worker_tasks_on_two_hosts_and_a_pause_stops_both(stack, topic_name):
    from confluent_kafka.admin import AdminClient

    from mirror_airflow.dag_factory import render
    from mirror_worker.clients.groups import describe_group

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("cel"), f"c{uuid.uuid4().hex[:8]}", f"celery-group-{uuid.uuid4().hex[:8]}"
    dag_id = f"mirror__{name}"
    create_topic(src, topic, partitions=PARTITIONS)
    root = Path(tempfile.mkdtemp(prefix="kafka-mirror-celery-"))
    spec = root / "mirrors.yaml"
    spec.write_text(json.dumps(_spec(stack, name, topic, group)))  # JSON is YAML
    render(spec, root / "dags")
    airflow = CeleryAirflow(stack, root, spec, root / "dags", hostnames=HOSTS)
    admin = AdminClient({"bootstrap.servers": src})
    counter = iter(range(1_000_000))

    def produce_batch(count: int = 100) -> None:
        produce(src, topic, [{"value": f"v{next(counter)}".encode(), "partition": i % PARTITIONS}
                             for i in range(count)])

    def holders() -> dict[str, int]:
        members = describe_group(admin, group).members or []
        return {m.group_instance_id: len(m.assignment.topic_partitions) for m in members}

    def workers(run_id: str) -> dict[int, dict]:
        return {ti["map_index"]: ti for ti in airflow.api().task_instances(dag_id, run_id)
                if ti["task_id"] == "run_worker"}

    def workers_when(run_id: str, check) -> dict[int, dict] | None:
        """The two run_worker task instances by map index, once `check(them)` holds."""
        tis = workers(run_id)
        return tis if len(tis) == 2 and check(tis) else None

    def two_holders() -> dict[str, int] | None:
        held = holders()
        return held if len(held) == 2 and all(held.values()) else None

    try:
        airflow.start()
        airflow.wait_ready(timeout=600)
        print(f"\ncelery airflow ready after {airflow.startup_seconds:.0f}s")
        api = airflow.api()
        api.wait_for_dags([dag_id], timeout=300)
        produce_batch()
        api.set_paused(dag_id, False)

        # The scheduler queues both mapped tasks; each Celery worker (one slot) takes one. The run to follow is
        # the one whose two tasks run: on a loaded machine a first run failed before they started (its discover
        # task's calls to the api-server timed out) and the scheduler started the next one.
        def both_running() -> tuple[str, dict[int, dict]] | None:
            for run in api.dag_runs(dag_id):
                if run["state"] == "running" and (tis := workers_when(run["dag_run_id"], lambda tis: all(
                        ti["state"] == "running" for ti in tis.values()))):
                    return run["dag_run_id"], tis
            return None

        run_id, running = wait_until(both_running, 720, "both run_worker tasks of a run running")
        assert {ti["hostname"] for ti in running.values()} == set(HOSTS), running
        held = wait_until(two_holders, 120, "two members of the mirror's group holding partitions")
        assert sorted(held) == [f"{group}.source.slot-{slot}.stream-0" for slot in (0, 1)]
        assert sum(held.values()) == PARTITIONS
        produce_batch()
        wait_for_count(dst, f"celery.{topic}", 200, timeout=120)

        # kill -9 of slot 1's mirror worker: its task fails and is retried alone, on the host it ran on (the
        # other worker's one slot is busy), with the same slot; slot 0's task runs on untouched.
        os.kill(_mirror_worker_pid(name, slot=1), signal.SIGKILL)
        produce_batch()
        retried = wait_until(lambda: workers_when(run_id, lambda tis: (tis[1]["try_number"], tis[1]["state"]) == (
            2, "running")), 180, "slot 1's task retried and running")
        assert retried[1]["hostname"] == running[1]["hostname"]
        assert (retried[0]["try_number"], retried[0]["state"]) == (1, "running")
        wait_for_count(dst, f"celery.{topic}", 300, timeout=120)

        # A pause stops both tasks, wherever they run, with every record committed. (Their static members stay
        # in the group until their session times out: stopped is the tasks' end, not an empty group.)
        produce_batch()
        paused_at = time.monotonic()
        api.set_paused(dag_id, True)
        done = wait_until(lambda: workers_when(run_id, lambda tis: all(
            ti["state"] == "success" for ti in tis.values())), PAUSE_STOP_S,
            "both run_worker tasks ended with success after the pause")
        stopped_after = time.monotonic() - paused_at
        print(f"both worker tasks ended {stopped_after:.1f}s after the pause")
        assert {ti["hostname"] for ti in done.values()} == set(HOSTS)
        assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == 400
        missing, _, ordered = loss_and_duplicates(consume_all(src, topic, 400),
                                                  wait_for_count(dst, f"celery.{topic}", 400, timeout=30))
        assert missing == [] and ordered
    finally:
        airflow.stop()
        _keep_logs(root)
        shutil.rmtree(root, ignore_errors=True)


def _mirror_worker_pid(name: str, slot: int) -> int:
    """The pid of the mirror worker process (`python -m mirror_worker ... --mirror NAME --worker.slot N`)."""
    wanted = ["-m", "mirror_worker", "--mirror", name, "--worker.slot", str(slot)]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if all(arg in argv for arg in wanted) and argv[argv.index("--worker.slot") + 1] == str(slot) \
                and argv[argv.index("--mirror") + 1] == name:
            return int(proc.name)
    raise AssertionError(f"no mirror worker process for {name} slot {slot}")


def _keep_logs(root: Path) -> None:
    """Every component's and worker's log, and the task logs, go to tests/artifacts/."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    for log in (root / "services").glob("*/server.log"):
        shutil.copy(log, ARTIFACTS / f"{log.parent.name}.log")
    if (root / "airflow" / "logs").is_dir():
        shutil.copytree(root / "airflow" / "logs", ARTIFACTS / "tasks", dirs_exist_ok=True)

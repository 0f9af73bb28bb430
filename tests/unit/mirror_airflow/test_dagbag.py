"""DagBag over the DAG files generated from a spec: DAG ids, task structure, per-mirror import errors."""

from __future__ import annotations

import shutil
import socket

import pytest

from tests.airflow_support import ROOT

from mirror_airflow.dag_factory import render

GOOD = """
    mirrors:
      - name: orders
        whitelist: "orders\\\\..*"
        prefix: "dc1."
        airflow: {unpaused: true, worker-retries: 2}
      - name: payments
        whitelist: "payments"
      - name: old
        enabled: false
        whitelist: "old"
"""
HEAD = """
groups:
  - name: g
    source: {kafka: {bootstrap.servers: "10.255.255.1:9092"}}
    destination: {kafka: {bootstrap.servers: "10.255.255.2:9092"}}
"""
LIFECYCLE = {"discover": ["ensure_topics"], "ensure_topics": ["sync_schemas"], "sync_schemas": ["run_worker"],
             "run_worker": []}
CATCHUP = {"stop_mirror": ["catchup"], "catchup": ["resume_mirror"], "resume_mirror": []}
VERIFY = {"consistency_check": []}


def _dagbag(folder, spec, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(spec))

    def no_network(*args, **kwargs):
        raise AssertionError("network I/O at DAG parse time")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    return DagBag(dag_folder=str(folder))


def _structure(dag) -> dict[str, list[str]]:
    return {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}


@pytest.fixture
def dags_dir(tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    shutil.copy(ROOT / "dags" / "mirror_spec_check.py", folder)
    return folder


def test_dag_ids_and_tasks_per_mirror(tmp_path, dags_dir, monkeypatch):
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(HEAD + GOOD)
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert bag.import_errors == {}
    expected = {f"mirror__{m}{suffix}" for m in ("orders", "payments") for suffix in ("", "__verify", "__catchup", "__lag")}
    assert set(bag.dag_ids) == expected
    for mirror in ("orders", "payments"):
        lifecycle = bag.dags[f"mirror__{mirror}"]
        assert _structure(lifecycle) == LIFECYCLE
        assert lifecycle.max_active_runs == 1 and lifecycle.schedule == "@continuous"
        assert _structure(bag.dags[f"mirror__{mirror}__catchup"]) == CATCHUP
        assert bag.dags[f"mirror__{mirror}__catchup"].schedule is None
        assert _structure(bag.dags[f"mirror__{mirror}__verify"]) == VERIFY
        assert bag.dags[f"mirror__{mirror}__verify"].schedule == "0 2 * * *"
        assert [t.task_id for t in bag.dags[f"mirror__{mirror}__lag"].tasks]  # built by mirror_airflow.lag.dag
    orders = bag.dags["mirror__orders"]
    assert orders.get_task("run_worker").retries == 2 and orders.is_paused_upon_creation is False
    payments = bag.dags["mirror__payments"]
    assert payments.get_task("run_worker").retries == 3 and payments.is_paused_upon_creation is True
    assert payments.get_task("run_worker").api_conn_id == "airflow_api"
    assert set(bag.dags["mirror__orders__catchup"].params.keys()) == {"topics", "from_offsets", "from_timestamp",
                                                                          "driver_copy_limit"}


@pytest.mark.parametrize("broken, key", [
    ('      - name: broken\n        whitelistt: "x"\n', "whitelistt: unknown key (did you mean whitelist?)"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {worker-retrys: 1}\n', "airflow.worker-retrys: unknown key"),
    ('      - name: broken\n        whitelist: "x"\n        num-streams: 0\n', "num-streams: Input should be greater than or equal to 1"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {lag: {no-such: 1}}\n', "airflow.lag: no-such: unknown key"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {alerts: {no-such: 1}}\n', "airflow.alerts: no-such: unknown key"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {workers: 0}\n', "airflow.workers: Input should be greater than or equal to 1"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {workers: -1}\n', "airflow.workers: Input should be greater than or equal to 1"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {workers: "x"}\n', "airflow.workers: Input should be a valid integer"),
    ('      - name: broken\n        whitelist: "x"\n        airflow: {workers: "2"}\n', "airflow.workers: Input should be a valid integer"),
])
def test_a_broken_mirror_fails_only_its_own_file(tmp_path, dags_dir, monkeypatch, broken, key):
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(HEAD + GOOD + broken)
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert list(bag.import_errors) == [str(dags_dir / "mirror__broken.py")]
    message = bag.import_errors[str(dags_dir / "mirror__broken.py")]
    assert message.strip().splitlines()[-1].endswith(f"mirror 'broken': {key}"), message  # one line, naming the key
    assert {"mirror__orders", "mirror__payments", "mirror__orders__verify"} <= set(bag.dag_ids)
    assert not any("broken" in d for d in bag.dag_ids)


def test_workers_map_the_worker_task_over_one_slot_each(tmp_path, dags_dir, monkeypatch):
    """`airflow: {workers: 2}`: run_worker is one task mapped over slots 0 and 1, each worker started with
    its slot; the default (payments) stays one unmapped task with today's argv."""
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(HEAD + GOOD.replace("worker-retries: 2}", "worker-retries: 2, workers: 2}"))
    render(spec, dags_dir)
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert bag.import_errors == {}
    orders, payments = bag.dags["mirror__orders"], bag.dags["mirror__payments"]
    assert _structure(orders) == _structure(payments) == LIFECYCLE
    mapped = orders.get_task("run_worker")
    assert mapped.is_mapped and mapped.expand_input.value == {"worker_slot": [0, 1]}
    assert mapped.retries == 2 and orders.max_active_tasks == 2
    for slot in (0, 1):
        argv = mapped.unmap({"worker_slot": slot}).worker_argv()
        assert argv[1:] == ["-m", "mirror_worker", "--config", str(spec), "--mirror", "orders", "--worker.slot", str(slot)]
    single = payments.get_task("run_worker")
    assert not single.is_mapped and single.worker_argv()[-2:] == ["--mirror", "payments"]


def test_a_mirror_without_its_dag_file_is_reported(tmp_path, dags_dir, monkeypatch):
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(HEAD + GOOD)
    render(spec, dags_dir)
    spec.write_text(HEAD + GOOD + '      - name: added\n        whitelist: "a"\n')
    bag = _dagbag(dags_dir, spec, monkeypatch)
    assert list(bag.import_errors) == [str(dags_dir / "mirror_spec_check.py")]
    assert "added have no DAG file" in bag.import_errors[str(dags_dir / "mirror_spec_check.py")]


def test_committed_dags_folder_loads_the_demo_spec(monkeypatch):
    bag = _dagbag(ROOT / "dags", ROOT / "config" / "mirrors.yaml", monkeypatch)
    assert bag.import_errors == {}
    assert {"mirror__demo", "mirror__demo__verify", "mirror__demo__catchup", "mirror__demo__lag"} <= set(bag.dag_ids)
    assert not any("audit" in d for d in bag.dag_ids)  # disabled

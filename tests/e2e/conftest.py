"""End-to-end fixtures: one Airflow (`airflow standalone`) on the `stack` for the e2e tests (package
scope: stopped before the rest of the suite runs), with a spec of its own naming a test mirror over
uuid topics, and one headless Chromium.

Airflow runs under a temporary root with its own DAGs folder (the generated file of the test mirror),
never as the shared stack's service; it is stopped after the e2e tests, its whole process tree included.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack import Stack
from devstack.airflow import Airflow
from devstack.net import free_port
from devstack.process import descendants, is_alive
from tests.e2e.browser import ARTIFACTS, remove_profile, start_chromium
from tests.kafka_util import create_topic

@dataclass(frozen=True)
class E2EMirror:
    name: str
    topic: str
    mirrored_topic: str
    group: str
    partitions: int
    metrics_port: int

    @property
    def dag_id(self) -> str:
        return f"mirror__{self.name}"


def e2e_spec(stack: Stack, mirror: E2EMirror) -> dict:
    """One mirror of one uuid topic, without schema registries (records are plain bytes)."""
    return {"groups": [{
        "name": "e2e",
        "source": {"name": "source", "kafka": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers}},
        "destination": {"kafka": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers}},
        "mirrors": [{
            "name": mirror.name, "whitelist": mirror.topic.replace(".", r"\."), "prefix": "mirrored.",
            "preserve-partitions": True, "group-id": mirror.group,
            # Exact failover offsets for the failover test (test_failover_ui.py).
            "provenance-headers": True,
            # The worker's Prometheus endpoint: the dashboard reads halted partitions from it.
            "metrics-port": mirror.metrics_port,
            "airflow": {
                # Unpaused by the fixture once Airflow is healthy: a run started earlier would fail
                # while the api-server (the tasks' execution API) is still starting.
                "unpaused": False, "worker-retries": 1, "worker-retry-delay-s": 5,
                "pause-check-interval-s": 5, "verify-schedule": None,
                # A short lag window, for the dashboard test that unpauses the lag DAG for a while.
                "lag": {"window-minutes": 0.5, "sample-interval-seconds": 5, "stop-after-seconds": 20},
            },
        }],
    }]}


@pytest.fixture(scope="package")
def e2e_mirror(stack) -> E2EMirror:
    suffix = uuid.uuid4().hex[:10]
    mirror = E2EMirror(f"e2e_{suffix}", f"e2e-{suffix}", f"mirrored.e2e-{suffix}", f"e2e-group-{suffix}", 3,
                       free_port())
    create_topic(stack["source"].kafka.bootstrap_servers, mirror.topic, mirror.partitions)
    return mirror


@pytest.fixture(scope="package")
def airflow(stack, e2e_mirror) -> Airflow:
    from mirror_airflow.dag_factory import render

    # Not under pytest's basetemp: concurrent pytest sessions of the same user rotate those away.
    root = Path(tempfile.mkdtemp(prefix="kafka-mirror-e2e-airflow-"))
    spec = root / "mirrors.yaml"
    spec.write_text(json.dumps(e2e_spec(stack, e2e_mirror), indent=2))  # JSON is YAML
    render(spec, root / "dags")
    instance = Airflow(stack, root=root, spec=spec, dags_folder=root / "dags")
    instance.start()
    started_pid = instance.process.pid()
    tree: list[int] = []
    try:
        instance.wait_ready(timeout=600)
        print(f"\nairflow healthy after {instance.startup_seconds:.0f}s, "
              f"{instance.rss_mib():.0f} MiB RSS summed over its processes")
        api = instance.api()
        api.wait_for_dags([e2e_mirror.dag_id], timeout=300)
        api.set_paused(e2e_mirror.dag_id, False)
        yield instance
    finally:
        tree = descendants(started_pid) if started_pid and is_alive(started_pid) else []
        instance.stop()
        _keep_logs(instance)
        shutil.rmtree(root, ignore_errors=True)
    leftovers = [p for p in tree if is_alive(p)]
    assert not leftovers, f"airflow processes left after stop: {leftovers}"


def _keep_logs(instance: Airflow) -> None:
    """Airflow's component and task logs go to tests/artifacts/ with the screenshots."""
    target = ARTIFACTS / "e2e-airflow-logs"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if instance.process.log_file.is_file():
        shutil.copy(instance.process.log_file, target / "server.log")
    if (instance.home / "logs").is_dir():
        shutil.copytree(instance.home / "logs", target / "tasks", dirs_exist_ok=True)


@pytest.fixture(scope="package")
def browser():
    profile = Path(tempfile.mkdtemp(prefix="kafka-mirror-e2e-chromium-"))  # a fresh profile
    driver = start_chromium(profile)
    try:
        yield driver
    finally:
        driver.quit()
        remove_profile(profile)

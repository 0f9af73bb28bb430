"""The worker started by the Airflow worker operator gets only the environment it needs (issue 46 item 4): on the
real stack, the real worker mirrors with an allowlisted environment that carries MIRROR_SECRETS_DIRS (its spec's
`${file:...}` resolved inside it) and none of the task process's Airflow secrets."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest

from tests.e2e.waits import wait_until
from tests.kafka_util import create_topic, produce
from tests.worker_util import wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

LEAK = "Leak-Me-7731"


def test_the_worker_operator_passes_the_allowlist_only(stack, topic_name, tmp_path, monkeypatch):
    from mirror_airflow.operators.worker import MirrorWorkerOperator

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "client.properties").write_text("linger=3\n")
    monkeypatch.setenv("MIRROR_SECRETS_DIRS", str(secrets))
    monkeypatch.setenv("AIRFLOW_CONN_LEAK_TEST", f"http://admin:{LEAK}@api:8080")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET_TEST", LEAK)
    topic = topic_name("envallow")
    create_topic(src, topic, partitions=1)
    produce(src, topic, [{"value": f"v{i}".encode()} for i in range(5)])
    name = f"env-{uuid.uuid4().hex[:8]}"
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, prefix="env.",
                             destination_kafka={"linger.ms": f"${{file:{secrets}/client.properties:linger}}"})

    op = MirrorWorkerOperator(task_id="run_worker", spec_path=str(spec), mirror_name=name, stop_after_s=60,
                              api_conn_id="no_such_api_connection", poll_interval_s=0.2)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(op.execute({"params": {}})), daemon=True)
    thread.start()
    try:
        assert len(wait_for_count(dst, f"env.{topic}", 5, timeout=90)) == 5
        pid = wait_until(lambda: op._worker and op._worker.proc.pid, 30, "no worker process")
        environ = dict(entry.split("=", 1) for entry in
                       Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0") if "=" in entry)
    finally:
        op._stop("test done")
        thread.join(60)
    assert outcome["exit_code"] == 0, outcome
    assert environ["MIRROR_SECRETS_DIRS"] == str(secrets)
    assert not [k for k in environ if k.startswith("AIRFLOW")] and LEAK not in "".join(environ.values())
    logging.getLogger(__name__).info("worker environment: %s", sorted(environ))

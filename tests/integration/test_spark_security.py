"""Issue 46 item 5 on the real stack: the Spark jobs ship a secured mirror's resolved credentials (a SCRAM password
from a secrets file, a client's private key inline as PEM) to the standalone cluster's executors (devstack/
spark_cluster.py: master and workers authenticate with a shared secret and encrypt their RPC) only over
authenticated, encrypted RPC with the UI's ACLs on; none of those secrets appears in the running application's UI
(the environment page, its REST twin) or in the event log; without the cluster's secret in the client
configuration the job, and the Airflow operator before spark-submit, refuse in one line and copy nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from devstack.paths import ROOT
from tests.kafka_util import create_topic, produce, topic_exists
from tests.secure_kafka import client_pem, started_secure_node
from tests.worker_util import committed_offsets, wait_for_count

pytestmark = [pytest.mark.integration, pytest.mark.spark]

USER, PASSWORD = "spark-writer", "Spk-Pa55word-38be"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
RECORDS = 90


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with started_secure_node(tmp_path_factory.mktemp("spark-secure-kafka"),
                             {USER: (PASSWORD, "SCRAM-SHA-256")}) as secured:
        yield secured


def secured_spec(tmp_path: Path, node, certs, name: str, topic: str) -> Path:
    """Source: the node's mutual-TLS listener, the client's key inline (PEM); destination: its SASL_SSL listener,
    the SCRAM password from a secrets file."""
    key, chain = client_pem(certs)
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"password={PASSWORD}\n")
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "spark-secured",
        "source": {"name": "tls", "kafka": {
            "bootstrap.servers": node.listener_bootstrap("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_pem), "ssl.key.pem": key, "ssl.certificate.pem": chain}},
        "destination": {"kafka": {
            "bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER,
            "sasl.password": f"${{file:{secrets}:password}}", "ssl.ca.location": str(certs.ca_pem)}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "sp.", "preserve-partitions": True,
                     "group-id": f"g-{topic}"}]}]}))
    return spec


def secrets_of(certs, cluster) -> dict[str, str]:
    """What must not be shown: the password, the private key's body, the cluster's shared secret."""
    key, _ = client_pem(certs)
    shown = {"SCRAM password": PASSWORD, "private key": max(key.splitlines(), key=len),  # a full line of its base64
             "JAAS line": f'password="{PASSWORD}"'}
    for line in (cluster.conf_dir / "spark-defaults.conf").read_text().splitlines():
        if line.startswith("spark.authenticate.secret "):
            shown["cluster secret"] = line.split(None, 1)[1].strip()
    return shown


def shows(text: str, secrets: dict[str, str], where: str) -> list[str]:
    """`<secret> shown in <where>` for each secret the text holds."""
    return [f"{what} shown in {where}" for what, secret in secrets.items() if secret in text]


def lacks_protection(properties: dict, where: str) -> list[str]:
    return [f"{where}: {k}={properties.get(k)}" for k, v in PROTECTED.items() if properties.get(k) != v]


def client_env(cluster, conf_dir: Path, application_file: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_CONF_DIR": str(conf_dir), "PYSPARK_PYTHON": str(cluster.python),
            "MIRROR_SPARK_APPLICATION_FILE": str(application_file)}


class UiWatcher:
    """Reads a running application's environment page and REST environment as soon as the job names its UI
    (spark_jobs.common.session.record_application), while the job runs."""

    def __init__(self, application_file: Path) -> None:
        self.application_file, self.pages, self.error = application_file, {}, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not self.pages:
            try:
                app = json.loads(self.application_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.05)
                continue
            try:
                for page in ("/environment/", f"/api/v1/applications/{app['app_id']}/environment"):
                    self.pages[page] = self._read(app["ui"] + page, deadline)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.error = exc
            return

    @staticmethod
    def _read(url: str, deadline: float) -> str:
        """The page, asked again while it times out: under a full make test the REST environment once took
        longer than 10 s to answer while the page before it had (stop 52). A UI that is gone still fails."""
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as response:
                    return response.read().decode()
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def result(self) -> dict[str, str]:
        self.thread.join(420)
        assert self.pages and self.error is None, f"the UI was not read while the job ran: {self.error!r}"
        return self.pages


def application_events(cluster, application_file: Path) -> tuple[dict, str]:
    """(the application's Spark properties as the event log holds them, the event log's whole text)."""
    app_id = json.loads(application_file.read_text())["app_id"]
    [path] = [p for p in cluster.event_dir.iterdir() if p.name.split(".")[0] == app_id]
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    environment = next(e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate")
    return dict(environment["Spark Properties"]), path.read_text()


PROTECTED = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true", "spark.acls.enable": "true"}


def test_credentials_reach_the_cluster_authenticated_and_encrypted_and_no_ui_or_event_log_shows_them(
        secure, spark_cluster, tmp_path, topic_name):
    node, certs = secure
    topic, name = topic_name("spsec"), f"spsec{uuid.uuid4().hex[:6]}"
    create_topic(node.bootstrap_servers, topic, partitions=3)
    produce(node.bootstrap_servers, topic, [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(RECORDS)])
    spec = secured_spec(tmp_path, node, certs, name, topic)
    secrets = secrets_of(certs, spark_cluster)

    problems: list[str] = []  # every part is checked, and the failure lists each that is wrong
    catchup_app = tmp_path / "catchup-app.json"
    result = subprocess.run(
        [sys.executable, "-m", "spark_jobs.catchup", "--config", str(spec), "--mirror", name,
         "--master", spark_cluster.master_url, "--driver-copy-limit", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env=client_env(spark_cluster, spark_cluster.conf_dir, catchup_app))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(wait_for_count(node.bootstrap_servers, f"sp.{topic}", RECORDS, timeout=60)) == RECORDS
    properties, log = application_events(spark_cluster, catchup_app)
    problems += shows(log, secrets, "the catch-up's event log") + lacks_protection(properties, "the catch-up")

    # The check reads both sides with Spark's Kafka source: the client settings are its options.
    check_app, report = tmp_path / "check-app.json", tmp_path / "check.json"
    watcher = UiWatcher(check_app)
    check = subprocess.run(
        [sys.executable, "-m", "spark_jobs.consistency_check", "--config", str(spec), "--mirror", name,
         "--report", str(report), "--master", spark_cluster.master_url, "--digest-reader", "spark"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env=client_env(spark_cluster, spark_cluster.conf_dir, check_app))
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads(report.read_text())["totals"]["checked"] == RECORDS
    pages = watcher.result()
    for page, text in pages.items():
        problems += shows(text, secrets, f"the UI's {page}")
    environment = json.loads(pages[next(p for p in pages if p.startswith("/api/"))])
    problems += lacks_protection(dict(environment["sparkProperties"]), "the check's UI")
    properties, log = application_events(spark_cluster, check_app)
    assert "SparkListenerSQLExecutionStart" in log and "Scan KafkaRelation" in log  # the Kafka source's plans
    problems += shows(log, secrets, "the check's event log") + lacks_protection(properties, "the check")
    assert not problems, "; ".join(problems)


def without_the_secret(cluster, directory: Path) -> Path:
    """The cluster's client configuration but its shared secret."""
    directory.mkdir()
    lines = (cluster.conf_dir / "spark-defaults.conf").read_text().splitlines()
    (directory / "spark-defaults.conf").write_text(
        "".join(f"{line}\n" for line in lines if not line.startswith("spark.authenticate.secret")))
    return directory


def test_without_the_clusters_secret_the_job_refuses_in_one_line_and_copies_nothing(secure, spark_cluster, tmp_path,
                                                                                    topic_name):
    node, certs = secure
    topic, name = topic_name("sprf"), f"sprf{uuid.uuid4().hex[:6]}"
    create_topic(node.bootstrap_servers, topic, partitions=3)
    produce(node.bootstrap_servers, topic, [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(30)])
    spec = secured_spec(tmp_path, node, certs, name, topic)
    env = client_env(spark_cluster, without_the_secret(spark_cluster, tmp_path / "conf"), tmp_path / "app.json")

    result = subprocess.run([sys.executable, "-m", "spark_jobs.catchup", "--config", str(spec), "--mirror", name,
                             "--master", spark_cluster.master_url], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, stdin=subprocess.DEVNULL, env=env)

    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"catchup: refused: the mirror's credentials (source tls ssl.key.pem, destination sasl.password) would reach "
        f"{spark_cluster.master_url} over unauthenticated, unencrypted RPC: no spark.authenticate.secret"), result.stderr
    assert not topic_exists(node.bootstrap_servers, f"sp.{topic}")
    assert all(offset < 0 for offset in committed_offsets(node.bootstrap_servers, f"g-{topic}", topic, 3).values())
    assert PASSWORD not in result.stdout + result.stderr


def test_without_the_clusters_secret_the_airflow_catchup_task_fails_before_spark_submit(
        secure, spark_cluster, tmp_path, topic_name, airflow_db, monkeypatch, capsys):
    from airflow.utils.state import DagRunState, TaskInstanceState

    from mirror_airflow.dag_factory import mirror_dags, render
    from tests.airflow_support import dags_folder

    node, certs = secure
    topic, name = topic_name("spop"), f"spop{uuid.uuid4().hex[:6]}"
    create_topic(node.bootstrap_servers, topic, partitions=3)
    produce(node.bootstrap_servers, topic, [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(30)])
    spec = secured_spec(tmp_path, node, certs, name, topic)
    host, port = spark_cluster.master_url.removeprefix("spark://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": f"spark://{host}", "port": int(port)}))
    monkeypatch.setenv("SPARK_CONF_DIR", str(without_the_secret(spark_cluster, tmp_path / "conf")))
    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(spec))
    monkeypatch.setenv("MIRROR_REPORT_DIR", str(tmp_path / "reports"))
    render(spec, dags_folder())

    run = mirror_dags(name, spec)[f"mirror__{name}__catchup"].test(run_conf={"topics": topic})

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == DagRunState.FAILED and states["catchup"] == TaskInstanceState.FAILED, states
    printed = capsys.readouterr()
    assert "refused: the mirror's credentials (source tls ssl.key.pem, destination sasl.password)" in (
        printed.out + printed.err)
    assert not topic_exists(node.bootstrap_servers, f"sp.{topic}")
    assert all(offset < 0 for offset in committed_offsets(node.bootstrap_servers, f"g-{topic}", topic, 3).values())
    assert not [a for a in spark_cluster.state().get("completedapps", []) if a.get("name") == f"catchup-{name}"]

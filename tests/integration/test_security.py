"""Secured clusters: a dedicated broker with a SASL_SSL listener (SCRAM-SHA-512/256, certificates made here).

The mirror reads a secured source and writes a secured destination with Java-style and librdkafka-style
settings, credentials from `${file:...}` secrets files; a wrong password fails fast and clearly. No
password, nor the JAAS line, appears in anything a worker printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from mirror_worker.config.librdkafka import consumer_settings, settings_from_connection
from devstack.paths import ROOT
from tests.catchup_util import run_catchup
from tests.kafka_util import create_topic, produce, topic_exists
from tests.secure_kafka import make_certificates, started_secure_node
from tests.worker_util import WorkerProcess, committed_offsets, wait_for_count, write_properties

pytestmark = pytest.mark.integration

SOURCE_USER, SOURCE_PASSWORD = "mirror-reader", "Src-Pa55word-7f3a"
DEST_USER, DEST_PASSWORD = "mirror-writer", "Dst-Pa55word-91c2"
PLAIN_USER, PLAIN_PASSWORD = "airflowuser", "Plain-Pa55word-5e6d"
WRONG_PASSWORD = "Wrong-Pa55word-0000"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A started secured node, its certificates and its SCRAM users (both mechanisms)."""
    users = {SOURCE_USER: (SOURCE_PASSWORD, "SCRAM-SHA-512"), DEST_USER: (DEST_PASSWORD, "SCRAM-SHA-256")}
    with started_secure_node(tmp_path_factory.mktemp("secure-kafka"), users, {PLAIN_USER: PLAIN_PASSWORD}) as secured:
        yield secured


@pytest.fixture
def secrets_file(tmp_path):
    path = tmp_path / "secrets.properties"
    path.write_text(f"source.password={SOURCE_PASSWORD}\ndestination.password={DEST_PASSWORD}\n")
    return path


def _records(n: int) -> list[dict]:
    return [{"key": f"k{i % 17}".encode(), "value": f"secure-{i}".encode(), "partition": i % 3} for i in range(n)]


def _assert_no_secret(*workers: WorkerProcess) -> None:
    for worker in workers:
        printed = worker.stdout_path.read_text() + worker.stderr_path.read_text()
        for secret in (SOURCE_PASSWORD, DEST_PASSWORD, WRONG_PASSWORD, PLAIN_PASSWORD, "Client-Ks-Pw-4411",
                       "ScramLoginModule", "required username"):
            assert secret not in printed, f"{secret!r} printed by the worker ({worker.stdout_path})"


def _topic_with_records(node, name: str, count: int) -> str:
    create_topic(node.bootstrap_servers, name, partitions=3)
    produce(node.bootstrap_servers, name, _records(count))
    return name


def _mirror_all(args: list[str], workdir, read_from: str, topic: str, count: int) -> None:
    """Run the worker until `topic` on `read_from` holds the `count` records, stop it, check its output."""
    worker = WorkerProcess(args, workdir)
    try:
        worker.wait_started(90)
        mirrored = wait_for_count(read_from, topic, count, timeout=120)
        assert sorted(m.value() for m in mirrored) == sorted(r["value"] for r in _records(count))
        assert worker.terminate(60) == 0
    finally:
        worker.stop_quietly()
    _assert_no_secret(worker)


def _java_source_properties(path, node, certs, password_value: str) -> str:
    """A consumer file as a MirrorMaker user brings it: JAAS line, PEM truststore, config providers."""
    return write_properties(path, {
        "bootstrap.servers": node.listener_bootstrap("SASL_SSL"),
        "group.id": f"secure-{time.monotonic_ns()}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="{SOURCE_USER}" password="{password_value}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca_pem),
        "ssl.endpoint.identification.algorithm": "https",
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
    })


def test_mirror_from_a_sasl_ssl_scram_source_with_the_password_in_a_file(stack, secure, secrets_file, tmp_path,
                                                                         topic_name):
    """MirrorMaker-style files, two worker processes (each rebuilds the config, and its redaction, from JSON)."""
    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-src"), 300)
    consumer = _java_source_properties(tmp_path / "source.properties", node, certs,
                                       f"${{file:{secrets_file}:source.password}}")
    producer = write_properties(tmp_path / "destination.properties",
                                {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
    _mirror_all(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                 "--offset.commit.interval.ms", "1000", "--num.streams", "2"], tmp_path, stack["destination"].kafka.bootstrap_servers,
                topic, 300)


def _secured_spec(tmp_path, node, certs, secrets_file, mirrors: str):
    """A spec whose source and destination are the secured node's SASL_SSL listener (SCRAM-SHA-512 with a
    JAAS line and a PEM CA, SCRAM-SHA-256 with librdkafka keys and a PKCS12 truststore), passwords from
    the secrets file; `mirrors`: the YAML list items of its mirrors."""
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(f"""
groups:
  - name: secured
    source:
      name: secured
      kafka:
        bootstrap.servers: "{node.listener_bootstrap('SASL_SSL')}"
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-512
        sasl.jaas.config: '{SCRAM} required username="{SOURCE_USER}" password="${{file:{secrets_file}:source.password}}";'
        ssl.ca.location: "{certs.ca_pem}"
    destination:
      kafka:
        bootstrap.servers: "{node.listener_bootstrap('SASL_SSL')}"
        security.protocol: SASL_SSL
        sasl.mechanisms: SCRAM-SHA-256
        sasl.username: {DEST_USER}
        sasl.password: "${{file:{secrets_file}:destination.password}}"
        ssl.truststore.location: "{certs.ca_p12}"
        ssl.truststore.type: PKCS12
        ssl.truststore.password: "{certs.truststore_password}"
    mirrors:
{mirrors.strip(chr(10))}
""")
    return spec


def test_mirror_into_a_sasl_ssl_scram_destination_from_a_yaml_spec(secure, secrets_file, tmp_path,
                                                                    topic_name):
    """librdkafka-style keys in the spec's kafka mapping; both sides' passwords from the secrets file;
    exactly-once, so transactions and destination-kept positions go through SASL_SSL too."""
    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-dst"), 120)
    spec = _secured_spec(tmp_path, node, certs, secrets_file, f"""
      - name: secured-copy
        whitelist: "{topic}"
        prefix: "copy."
        commit-interval-s: 1
        delivery: exactly-once
""")
    _mirror_all(["--config", str(spec), "--mirror", "secured-copy"], tmp_path, node.bootstrap_servers,
                f"copy.{topic}", 120)
    # Exactly-once keeps each source partition's position on the destination: 40 records each.
    positions = committed_offsets(node.bootstrap_servers, "kafka-mirror-eos", f"copy.{topic}", 3)
    assert positions == {0: 40, 1: 40, 2: 40}


def test_mirror_over_mutual_tls_with_a_pkcs12_keystore(secure, tmp_path, topic_name):
    """TLS only, the broker requires a client certificate: Java keystore keys, its password from a file."""
    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-mtls"), 90)
    secrets = tmp_path / "tls.properties"
    secrets.write_text(f"keystore.password={certs.keystore_password}\n")
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": node.listener_bootstrap("SSL"), "group.id": f"mtls-{time.monotonic_ns()}",
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca_pem),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.client_p12),
        "ssl.keystore.password": f"${{file:{secrets}:keystore.password}}",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": node.bootstrap_servers})
    _mirror_all(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                 "--prefix", "mtls."], tmp_path, node.bootstrap_servers, f"mtls.{topic}", 90)


@pytest.mark.parametrize("side", ["source", "destination"])
def test_a_wrong_password_fails_with_one_clear_line_and_produces_nothing(secure, tmp_path, topic_name, side):
    """The other side is the secured node's PLAINTEXT listener: this test depends on no other cluster."""
    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-wrong"), 10)
    plain = {"bootstrap.servers": node.bootstrap_servers}
    if side == "source":
        consumer = _java_source_properties(tmp_path / "source.properties", node, certs, WRONG_PASSWORD)
        producer = write_properties(tmp_path / "destination.properties", plain)
        expected = ("mirror_worker: source 'source' cluster refused the connection: ", "SCRAM-SHA-512")
    else:
        consumer = write_properties(tmp_path / "source.properties", {**plain, "group.id": "wrong-destination"})
        producer = write_properties(tmp_path / "destination.properties", {
            "bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": DEST_USER, "sasl.password": WRONG_PASSWORD,
            "ssl.ca.location": str(certs.ca_pem)})
        expected = ("mirror_worker: destination cluster refused the connection: ", "SCRAM-SHA-256")
    # startup_timeout stays at its 30 s default; the line says the cluster refused, not that it timed out.
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--prefix", "copy."], tmp_path)
    try:
        code = worker.wait(90)
    finally:
        worker.stop_quietly()
    lines = worker.stderr.strip().splitlines()
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(expected[0])
    assert "SASL authentication error" in lines[0] and expected[1] in lines[0]
    assert not topic_exists(node.bootstrap_servers, f"copy.{topic}")
    assert any(e.get("msg") == "client error" and e.get("code") == "_AUTHENTICATION" for e in worker.logs())
    _assert_no_secret(worker)


def test_an_untrusted_certificate_is_refused_clearly(secure, tmp_path, topic_name):
    """TLS without the CA: the handshake fails, the worker says so in one line and exits 2."""
    node, _certs = secure
    other = make_certificates(tmp_path / "other-ca")
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "group.id": "untrusted",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": SOURCE_USER, "sasl.password": SOURCE_PASSWORD, "ssl.ca.location": str(other.ca_pem),
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": node.bootstrap_servers})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer,
                            "--whitelist", topic_name("never")], tmp_path)
    try:
        code = worker.wait(90)
    finally:
        worker.stop_quietly()
    lines = worker.stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("mirror_worker: source 'source' cluster refused the connection: ")
    assert "certificate verify failed" in lines[0]
    _assert_no_secret(worker)


def test_airflow_connection_settings_reach_a_sasl_ssl_plain_cluster(secure, topic_name):
    """settings_from_connection: the connection's login/password become PLAIN credentials."""
    node, certs = secure
    topic = topic_name("secure-conn")
    create_topic(node.bootstrap_servers, topic, partitions=1)
    extra = {"bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
             "sasl.mechanism": "PLAIN", "ssl.truststore.location": str(certs.ca_pem)}
    settings = settings_from_connection(PLAIN_USER, PLAIN_PASSWORD, extra, "kafka_secure")
    assert topic in AdminClient(settings).list_topics(timeout=30).topics
    errors = []
    refused = AdminClient({**settings_from_connection(PLAIN_USER, WRONG_PASSWORD, extra),
                           "error_cb": errors.append})
    with pytest.raises(KafkaException):
        refused.list_topics(timeout=5)
    refused.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_airflow_kafka_hook_connects_with_the_connection_login_and_password(secure, monkeypatch):
    """The Airflow Kafka hook: login/password of the connection authenticate; a wrong password fails the test."""
    from mirror_airflow.hooks.kafka import KafkaHook

    node, certs = secure
    extra = {"bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
             "sasl.mechanism": "PLAIN", "ssl.truststore.location": str(certs.ca_pem)}
    for conn_id, password in (("kafka_secure_ok", PLAIN_PASSWORD), ("kafka_secure_bad", WRONG_PASSWORD)):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
            {"conn_type": "kafka", "login": PLAIN_USER, "password": password, "extra": extra}))
    ok, message = KafkaHook("kafka_secure_ok").test_connection()
    assert ok, message
    ok, message = KafkaHook("kafka_secure_bad").test_connection()
    assert not ok
    assert WRONG_PASSWORD not in message and PLAIN_PASSWORD not in message


@pytest.mark.spark
def test_spark_reads_a_sasl_ssl_scram_cluster_from_the_mirror_spec_settings(secure, secrets_file, spark, topic_name):
    """The Spark jobs' Kafka client is Java's: spark_options turns the spec's librdkafka settings back."""
    from spark_jobs.common.job_config import JobTarget

    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-spark"), 60)
    settings = consumer_settings({
        "bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "group.id": "spark",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="{SOURCE_USER}" '
                            f'password="${{file:{secrets_file}:source.password}}";',
        "ssl.truststore.location": str(certs.ca_p12), "ssl.truststore.password": certs.truststore_password,
    }, "spark test")
    target = JobTarget(settings["bootstrap.servers"], node.bootstrap_servers, (topic,), source_settings=settings)
    rows = (spark.read.format("kafka").options(**target.spark_options("source"))
            .option("subscribe", topic).load().selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(r.v for r in rows) == sorted(r["value"].decode() for r in _records(60))


@pytest.mark.spark
def test_catchup_copies_and_commits_between_sasl_ssl_clusters_with_passwords_in_a_file(secure, secrets_file, tmp_path,
                                                                                     topic_name):
    """Every client of the Spark catch-up (metadata, group check, topic ids, Spark's reader, the executors'
    producers and commits) goes through SASL_SSL with the spec's settings and `${file:...}` secrets."""
    node, certs = secure
    topic = _topic_with_records(node, topic_name("secure-catchup"), 90)
    group = f"cu-{topic}"
    spec = _secured_spec(tmp_path, node, certs, secrets_file, f"""
      - name: secured-catchup
        whitelist: "{topic}"
        prefix: "cu."
        preserve-partitions: true
        group-id: "{group}"
""")
    result = run_catchup("--config", str(spec), "--mirror", "secured-catchup")
    assert result.returncode == 0, result.stderr[-3000:]
    assert committed_offsets(node.bootstrap_servers, group, topic, 3) == {0: 30, 1: 30, 2: 30}
    copied = wait_for_count(node.bootstrap_servers, f"cu.{topic}", 90, timeout=60)
    assert sorted(m.value() for m in copied) == sorted(r["value"] for r in _records(90))
    for secret in (SOURCE_PASSWORD, DEST_PASSWORD):
        assert secret not in result.stdout + result.stderr

    # The consistency check of the same mirror: its JVM digest reader (spark_jobs/check/jvm.py) and its
    # exact path reach both sides through SASL_SSL with the same settings and secrets.
    report = tmp_path / "check.json"
    check = subprocess.run([sys.executable, "-m", "spark_jobs.consistency_check", "--config", str(spec), "--mirror",
                            "secured-catchup", "--report", str(report), "--master", "local[2]"],
                           cwd=ROOT, capture_output=True, text=True, timeout=480)
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads(report.read_text())["totals"] == {"checked": 90, "missing": 0, "duplicated": 0, "altered": 0,
                                                        "out_of_order": 0, "wrong_schema": 0}
    assert '"msg": "digest pass read on the JVM"' in check.stdout
    for secret in (SOURCE_PASSWORD, DEST_PASSWORD):
        assert secret not in check.stdout + check.stderr


def test_sasl_over_plaintext_is_refused_without_the_opt_in_and_works_with_it(secure, topic_name, tmp_path, monkeypatch):
    """Issue 46 item 3 on a real SASL_PLAINTEXT listener: the hook's connection and the worker's spec are each
    refused with one line naming `cleartext-sasl`; with it named, the same settings reach the cluster."""
    from mirror_airflow.hooks.kafka import KafkaHook

    node, _ = secure
    topic = topic_name("cleartext")
    create_topic(node.bootstrap_servers, topic, partitions=1)
    extra = {"bootstrap.servers": node.listener_bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "PLAIN"}
    for conn_id, more in (("kafka_clear", {}), ("kafka_clear_ok", {"allow-insecure": ["cleartext-sasl"]})):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
            {"conn_type": "kafka", "login": PLAIN_USER, "password": PLAIN_PASSWORD, "extra": {**extra, **more}}))
    ok, message = KafkaHook("kafka_clear").test_connection()
    assert not ok and message == ("Airflow connection 'kafka_clear': SASL credentials over SASL_PLAINTEXT (sent in "
                                  "clear) refused; add cleartext-sasl to allow-insecure to accept it")
    ok, message = KafkaHook("kafka_clear_ok").test_connection()
    assert ok, message
    assert topic in KafkaHook("kafka_clear_ok").get_admin_client().list_topics(timeout=30).topics

    # The worker, from a spec: refused at start in one line; with the opt-in it mirrors over SASL_PLAINTEXT.
    produce(node.bootstrap_servers, topic, [{**r, "partition": 0} for r in _records(30)])
    kafka = {**extra, "sasl.username": PLAIN_USER, "sasl.password": PLAIN_PASSWORD}
    spec = tmp_path / "clear.yaml"
    for opt_in in ({}, {"allow-insecure": ["cleartext-sasl"]}):
        spec.write_text(json.dumps({"groups": [{
            "name": "g", "source": {"name": "clear", "kafka": kafka, **opt_in},
            "destination": {"kafka": {"bootstrap.servers": node.bootstrap_servers}},
            "mirrors": [{"name": "m", "whitelist": topic, "prefix": "clear.", "commit-interval-s": 1}]}]}))
        if opt_in:
            _mirror_all(["--config", str(spec), "--mirror", "m"], tmp_path, node.bootstrap_servers, f"clear.{topic}", 30)
            continue
        done = subprocess.run([sys.executable, "-m", "mirror_worker", "--config", str(spec), "--mirror", "m"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.endswith("source 'clear' kafka: SASL credentials over SASL_PLAINTEXT (sent in clear) "
                                    "refused; add cleartext-sasl to allow-insecure to accept it\n"), done.stderr
        assert PLAIN_PASSWORD not in done.stdout + done.stderr

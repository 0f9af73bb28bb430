"""Schema-registry authentication on the real stack (issue 46 item 2): the real worker, run with the classic flags,
reaches the source's real registry through HTTPS with basic auth (a front that refuses any other request),
its password read from a `${file:...}` under MIRROR_SECRETS_DIRS by a `schema.registry.*` key of the
consumer properties: never in argv, never in the logs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mirror_worker.schemas import wire_format
from tests.integration.test_schema_sync import KEY_SCHEMA, ORDER_V1, _client, _decoded, _produce_avro
from tests.kafka_util import create_topic
from tests.registry_proxy import AuthenticatingProxy
from tests.secure_kafka import make_certificates
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration

PASSWORD = "Reg-Auth-Pw-5521"


def test_worker_syncs_schemas_through_an_https_registry_with_basic_auth(stack, topic_name, tmp_path, monkeypatch):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    certs = make_certificates(tmp_path / "certs")
    upstream = urlsplit(stack["source"].registry.url)
    proxy = AuthenticatingProxy(f"{upstream.scheme}://{upstream.netloc}", "mirror", PASSWORD, certs.broker_pem)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "registry.properties").write_text(f"source.user.info=mirror:{PASSWORD}\n")
    monkeypatch.setenv("MIRROR_SECRETS_DIRS", str(secrets))  # the worker inherits it

    topic = topic_name("regauth")
    create_topic(src, topic, partitions=1)
    tag = topic.replace("-", "_")
    _produce_avro(stack, topic, {**ORDER_V1, "name": f"Order{tag}"}, 0, 10, 1, {**KEY_SCHEMA, "name": f"Key{tag}"})
    group = f"g-{topic}"
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": group,
        "schema.registry.basic.auth.user.info": f"${{file:{secrets}/registry.properties:source.user.info}}",
        "schema.registry.ssl.ca.location": str(certs.ca_pem),
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    args = ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
            "--prefix", "auth.", "--schema.registry.url", proxy.url + upstream.path,
            "--destination.schema.registry.url", stack["destination"].registry.url,
            "--offset.commit.interval.ms", "1000"]
    worker = WorkerProcess(args, tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"auth.{topic}", 10)
        cmdline = Path(f"/proc/{worker.pid}/cmdline").read_bytes().decode()
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        assert worker.terminate() == 0, worker.stderr
        proxy.close()

    assert proxy.accepted > 0 and proxy.refused == []  # every call authenticated, over TLS checked by the CA
    assert PASSWORD not in cmdline and PASSWORD not in environ
    assert PASSWORD not in worker.stdout_path.read_text() and PASSWORD not in worker.stderr
    source = read_topic(src, topic)
    assert _decoded(stack, "destination", f"auth.{topic}", mirrored) == _decoded(stack, "source", topic, source)
    assert all(wire_format.schema_id(m.value()) is not None for m in mirrored)
    assert _client(stack, "destination").get_versions(f"auth.{topic}-value") == [1]


def test_a_wrong_registry_password_stops_the_worker_with_one_line(stack, topic_name, tmp_path):
    certs = make_certificates(tmp_path / "certs")
    upstream = urlsplit(stack["source"].registry.url)
    proxy = AuthenticatingProxy(f"{upstream.scheme}://{upstream.netloc}", "mirror", PASSWORD, certs.broker_pem)
    topic = topic_name("regauthbad")
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=1)
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": f"g-{topic}",
        "schema.registry.basic.auth.user.info": "mirror:Wrong-Pw-0042",
        "schema.registry.ssl.ca.location": str(certs.ca_pem),
    })
    producer = write_properties(tmp_path / "destination.properties",
                                {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--schema.registry.url", proxy.url + upstream.path,
                            "--destination.schema.registry.url", stack["destination"].registry.url], tmp_path)
    try:
        code = worker.wait(120)
    finally:
        proxy.close()
    assert code == 1 and proxy.refused
    [line] = worker.stderr.strip().splitlines()
    assert line.startswith("mirror_worker: source 'source' schema registry") and "401" in line
    assert "Wrong-Pw-0042" not in worker.stderr and "Wrong-Pw-0042" not in worker.stdout_path.read_text()

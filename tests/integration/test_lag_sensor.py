"""The lag DAG on the real stack, run by `dag.test()`: a healthy mirror passes; a stalled one fails and
the webhook notifiers post to a local HTTP receiver within 2 minutes."""

from __future__ import annotations

import email
import json
import socketserver
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.airflow_support import dags_folder, load_dag_file
from tests.http_receiver import Receiver
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, write_mirror_spec

pytestmark = pytest.mark.integration

# A 30 s window sampled every 5 s: short enough for a test, long enough for the worker's 5 s commits.
LAG = {"window-minutes": 0.5, "sample-interval-seconds": 5, "stop-after-seconds": 20,
       "max-latency-seconds": 30, "allowed-lag": 0}


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


class SmtpReceiver:
    """Just enough SMTP on 127.0.0.1 for smtplib: records each message (recipients, parsed message)."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], email.message.Message]] = []
        received = self.messages

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(f"{line}\r\n".encode())

            def handle(self):
                self.reply("220 test")
                recipients, data, in_data = [], [], False
                for raw in self.rfile:
                    line = raw.decode().rstrip("\r\n")
                    if in_data:
                        if line == ".":
                            received.append((recipients, email.message_from_string("\n".join(data))))
                            recipients, data, in_data = [], [], False
                            self.reply("250 queued")
                        else:
                            data.append(line[1:] if line.startswith("..") else line)
                        continue
                    verb = line[:4].upper()
                    if verb == "RCPT":
                        recipients.append(line.split(":", 1)[1].strip(" <>"))
                    if verb == "DATA":
                        in_data = True
                        self.reply("354 go on")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def smtp(monkeypatch):
    server = SmtpReceiver()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_LAG_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": server.port,
        "extra": {"disable_tls": True, "disable_ssl": True, "from_email": "airflow@example.com"},
    }))
    yield server
    server.close()


def _write_mirror(tmp_path, stack, name: str, topic: str, alerts: dict, lag: dict = LAG, **where):
    """The mirror's spec and its lag DAG; `where`: write_mirror_spec's `source`/`destination` overrides."""
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, prefix="lag.", **where)
    dag_file = dags_folder() / f"lag_{name.replace('-', '_')}.py"
    dag_file.write_text(f"""
from pathlib import Path

from mirror_airflow.lag.dag import build_lag_dag
from mirror_worker.config.spec import select_mirror

dag = build_lag_dag(select_mirror(Path({str(spec)!r}), {name!r}), {lag!r}, {alerts!r}, spec_path={str(spec)!r})
""")
    return spec, load_dag_file(dag_file)


def _window_variable(name: str) -> dict:
    from airflow.models import Variable

    return json.loads(Variable.get(f"mirror_lag_window__{name}"))


def test_healthy_mirror_passes(stack, topic_name, tmp_path, airflow_db, receiver):
    name = f"lag-ok-{uuid.uuid4().hex[:8]}"
    topic = topic_name("lagok")
    src = stack["source"].kafka.bootstrap_servers
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(100)])
    spec, dag = _write_mirror(tmp_path, stack, name, topic, {"webhook-url": f"{receiver.url}/hook"})
    assert dag.dag_id == f"mirror__{name}__lag"

    worker = WorkerProcess(["--config", str(spec), "--mirror", name], tmp_path)
    stop = threading.Event()

    def keep_producing():
        producer = Producer({"bootstrap.servers": src})
        i = 100
        while not stop.wait(0.5):
            producer.produce(topic, f"v{i}".encode(), partition=i % 2)
            producer.poll(0)
            i += 1
        producer.flush(10)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    try:
        worker.wait_started()
        feeder.start()
        first = dag.test()
        first_done = time.time()
        # The next run (a minute later in production) judges the window kept in the Variable at once.
        second = dag.test()
    finally:
        stop.set()
        feeder.join(10)
        assert worker.terminate() == 0, worker.stderr
    assert first.state == "success" and second.state == "success"
    assert receiver.posts == []
    samples = _window_variable(name)["samples"]
    assert {(s[1], s[2]) for s in samples} == {(topic, 0), (topic, 1)}
    # The first run sampled a covered 30 s window every 5 s (the trigger); the second added one sample.
    assert sorted((s[1], s[2]) for s in samples if s[3] > first_done) == [(topic, 0), (topic, 1)]


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "reschedule"])
def test_stalled_mirror_fails_and_notifies_within_two_minutes(stack, topic_name, tmp_path, airflow_db, receiver,
                                                               smtp, caplog, monkeypatch, deferrable):
    name = f"lag-stall-{uuid.uuid4().hex[:8]}"
    topic = topic_name("lagstall")
    src = stack["source"].kafka.bootstrap_servers
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(60)])
    # The mirror's group committed 10 per partition once and never again: its worker is gone.
    group = Consumer({"bootstrap.servers": src, "group.id": f"kafka-mirror.{name}"})
    group.commit(offsets=[TopicPartition(topic, p, 10) for p in (0, 1)], asynchronous=False)
    group.close()
    token = uuid.uuid4().hex
    alerts = {"webhook-url": f"{receiver.url}/hook?token={token}", "slack-webhook-url": f"{receiver.url}/slack",
              "webhook-connection": "lag_hook", "email": ["oncall@example.com"], "email-connection": "smtp_lag_test"}
    host, port = receiver.server.server_address
    monkeypatch.setenv("AIRFLOW_CONN_LAG_HOOK", json.dumps(
        {"conn_type": "http", "host": host, "port": port, "schema": "http", "extra": {"endpoint": "/conn"}}))
    _spec, dag = _write_mirror(tmp_path, stack, name, topic, alerts, {**LAG, "deferrable": deferrable})

    started = time.monotonic()
    run = dag.test()
    assert run.state == "failed"

    posts = {path.split("?")[0]: (body, at) for path, body, at in receiver.posts}
    assert sorted(posts) == ["/conn", "/hook", "/slack"]
    assert posts["/conn"][0] == posts["/hook"][0]
    hook, hook_at = posts["/hook"]
    assert hook_at - started < 120
    assert hook["mirror"] == name
    assert hook["status"] == "STOP"
    assert hook["dag_id"] == f"mirror__{name}__lag" and hook["task_id"] == "check_lag"
    assert any(w.startswith(f"east/{topic}/") and "STOP" in w for w in hook["worst_partitions"])
    assert "lag 20" in hook["detail"]
    slack, _ = posts["/slack"]
    assert set(slack) == {"text"}
    assert f"Kafka mirror {name}: STOP" in slack["text"]
    assert token not in caplog.text
    [(recipients, mail)] = smtp.messages
    assert recipients == ["oncall@example.com"]
    assert mail["Subject"] == f"Kafka mirror {name}: STOP"
    body = "".join(part.get_payload(decode=True).decode() for part in mail.walk() if not part.is_multipart())
    assert f"Kafka mirror {name}: STOP (mirror__{name}__lag.check_lag" in body and "lag 20" in body


def test_deferred_trigger_carries_no_resolved_secret(stack, topic_name, tmp_path, airflow_db, monkeypatch):
    """The trigger row Airflow stores for a deferred lag sensor holds the spec path and the mirror's name, never
    what the spec resolves to: a `${file:}` password, a registry's basic auth."""
    import airflow.sdk.definitions.dag as airflow_dag
    from airflow.models.trigger import Trigger

    from mirror_worker.config.spec import select_mirror

    name = f"lag-secret-{uuid.uuid4().hex[:8]}"
    topic = topic_name("lagsecret")
    create_topic(stack["source"].kafka.bootstrap_servers, topic)
    password, registry_password = f"pw-{uuid.uuid4().hex}", f"reg-{uuid.uuid4().hex}"
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"source.password={password}\nregistry.user.info=mirror:{registry_password}\n")
    registry_auth = f"schema-registry: {{basic.auth.user.info: \"${{file:{secrets}:registry.user.info}}\"}}"
    registries = {side: stack[side].registry.url for side in ("source", "destination")}
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(f"""
groups:
  - name: g
    source:
      name: east
      kafka: {{bootstrap.servers: "{stack['source'].kafka.bootstrap_servers}", sasl.username: mirror,
              sasl.password: "${{file:{secrets}:source.password}}"}}
      schema-registry-url: "{registries['source']}"
      {registry_auth}
      allow-insecure: [http-registry]
    destination:
      kafka: {{bootstrap.servers: "{stack['destination'].kafka.bootstrap_servers}"}}
      schema-registry-url: "{registries['destination']}"
      {registry_auth}
      allow-insecure: [http-registry]
    mirrors:
      - {{name: {name}, whitelist: "{topic}", prefix: "lag."}}
""")
    config = select_mirror(spec, name)
    assert password not in repr(config) and registry_password not in repr(config)
    dag_file = dags_folder() / f"lag_{name.replace('-', '_')}.py"
    dag_file.write_text(f"""
from pathlib import Path

from mirror_airflow.lag.dag import build_lag_dag
from mirror_worker.config.spec import select_mirror

dag = build_lag_dag(select_mirror(Path({str(spec)!r}), {name!r}), {LAG!r}, {{}}, spec_path={str(spec)!r})
""")
    dag = load_dag_file(dag_file)
    stored, events = [], []
    run_inline = airflow_dag._run_inline_trigger

    def recording(trigger, ti):
        row = Trigger.from_object(trigger)  # what the triggerer's table would hold
        stored.append((row.encrypted_kwargs, json.dumps(row.kwargs, default=str)))
        event = run_inline(trigger, ti)
        events.append(event.payload if event else None)
        return event

    monkeypatch.setattr(airflow_dag, "_run_inline_trigger", recording)
    dag.test()
    [(encrypted, kwargs)] = stored
    for secret in (password, registry_password):
        assert secret not in kwargs and secret not in encrypted
    assert str(spec) in kwargs and name in kwargs
    [event] = events
    assert "samples" in event and {(s[1], s[2]) for s in event["samples"]} == {(topic, 0)}, event

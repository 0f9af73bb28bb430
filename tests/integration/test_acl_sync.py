"""Topic ACL sync on real brokers with KRaft's StandardAuthorizer: a source and a destination node started
once for the module, the mirror logging in with SASL/PLAIN as a super user.

The `sync-acls` command copies exactly the read-side bindings (ALLOW READ/DESCRIBE, ALLOW ALL as READ,
DENY READ/DESCRIBE, DENY ALL as DENY READ) to the prefixed topic names, never WRITE, and nothing twice;
the principal filter leaves an ALLOW out; the copied ACLs work (a granted reader sees the destination
topic, an excluded one does not). A PREFIXED or `*` DENY travels with the ALLOWs it narrows, as LITERAL
DENYs on the mirrored topics' destination names. A running worker with `acl-sync-interval-ms` picks up a new ACL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
)

from devstack.paths import ROOT
from mirror_worker.dr.acl_admin import describe_topic_acls
from mirror_worker.dr.acl_rules import TopicAcl
from tests.kafka_util import create_topic, produce
from tests.secure_kafka import authorizer_node, sasl_plain_settings
from tests.worker_util import WorkerProcess, write_mirror_spec

pytestmark = pytest.mark.integration

MIRROR = ("mirror", "Mirror-Pa55word-31ab")
ALICE = ("alice", "Alice-Pa55word-77c0")
BOB = ("bob", "Bob-Pa55word-02d9")
PREFIX = "src."


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """(source, destination): two started nodes with an authorizer; `mirror` is a super user on both."""
    home = tmp_path_factory.mktemp("acl-kafka")
    users = dict([MIRROR, ALICE, BOB])
    nodes = [authorizer_node(name, home / name, users, [MIRROR[0]]) for name in ("acl-source", "acl-destination")]
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready(120)
        yield tuple(nodes)
    finally:
        for node in nodes:
            node.stop()


def _binding(topic: str, principal: str, operation: str, permission: str = "ALLOW",
             pattern: str = "LITERAL") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType[pattern], f"User:{principal}", "*",
                      AclOperation[operation], AclPermissionType[permission])


def _create_acls(node, bindings: list[AclBinding]) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})  # alive until every future is done
    for future in admin.create_acls(bindings).values():
        future.result(30)


def _topic_acls(node, topics: set[str]) -> set[TopicAcl]:
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    return {a for a in describe_topic_acls(admin, "test") if a.topic in topics}


def _spec(path, source, destination, whitelist: str, **settings) -> str:
    # The brokers' ACL listener is SASL_PLAINTEXT (tests/secure_kafka.py): named, as config/posture.py asks.
    source_kafka, destination_kafka = ({**sasl_plain_settings(node, *MIRROR), "allow-insecure": "cleartext-sasl"}
                                       for node in (source, destination))
    return str(write_mirror_spec(
        path, None, "acls", whitelist, PREFIX,
        source=source_kafka.pop("bootstrap.servers"), destination=destination_kafka.pop("bootstrap.servers"),
        source_kafka=source_kafka, destination_kafka=destination_kafka,
        **{key: json.dumps(value) for key, value in settings.items()}))


def _sync_acls(spec: str, *flags: str) -> tuple[int, dict | None, str]:
    done = subprocess.run([sys.executable, "-m", "mirror_worker", "sync-acls", "--config", spec, "--mirror", "acls",
                           *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)
    document = done.stdout[done.stdout.index("{\n"):] if "{\n" in done.stdout else None
    return done.returncode, json.loads(document) if document else None, done.stderr


def _acls(entries: list[dict]) -> set[TopicAcl]:
    return {TopicAcl(**{k: v for k, v in e.items() if k in TopicAcl.__dataclass_fields__}) for e in entries}


def _sees_topic(node, user: tuple[str, str], topic: str) -> bool:
    admin = AdminClient(sasl_plain_settings(node, *user))
    metadata = admin.list_topics(topic, timeout=30)
    error = metadata.topics[topic].error
    assert error is None or error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    return error is None


def test_sync_acls_copies_the_read_side_once_never_write_and_filters_a_principal(clusters, tmp_path):
    source, destination = clusters
    run = uuid.uuid4().hex[:8]
    orders, payments, other = f"acl-{run}-orders", f"acl-{run}-payments", f"other-{run}"
    for topic in (orders, payments, other):
        create_topic(source.bootstrap_servers, topic)
    create_topic(destination.bootstrap_servers, PREFIX + orders)  # payments' destination topic does not exist yet
    _create_acls(source, [
        _binding(orders, "alice", "READ"), _binding(orders, "alice", "WRITE"), _binding(orders, "carol", "DESCRIBE"),
        _binding(orders, "dave", "ALL"), _binding(orders, "bob", "READ"), _binding(orders, "eve", "READ", "DENY"),
        _binding(orders, "frank", "WRITE", "DENY"), _binding(orders, "gina", "ALTER"),
        _binding(payments, "alice", "ALL"), _binding(payments, "gina", "ALL", "DENY"),
        _binding(other, "alice", "READ"),  # not mirrored
        _binding(f"acl-{run}", "alice", "READ", pattern="PREFIXED"),
    ])
    spec = _spec(tmp_path / "acls.yaml", source, destination, f"acl-{run}-.*",
                 **{"acl-sync-exclude-principals": ["User:bob"]})
    mapped = {PREFIX + orders, PREFIX + payments}
    expected = {
        TopicAcl(PREFIX + orders, "User:alice", "*", "READ", "ALLOW"),
        TopicAcl(PREFIX + orders, "User:carol", "*", "DESCRIBE", "ALLOW"),
        TopicAcl(PREFIX + orders, "User:dave", "*", "READ", "ALLOW"),
        TopicAcl(PREFIX + orders, "User:eve", "*", "READ", "DENY"),
        TopicAcl(PREFIX + payments, "User:alice", "*", "READ", "ALLOW"),
        TopicAcl(PREFIX + payments, "User:gina", "*", "READ", "DENY"),
    }

    code, dry, stderr = _sync_acls(spec, "--dry-run")
    assert code == 0, stderr
    assert _acls(dry["sources"][0]["would_create"]) == expected
    assert _topic_acls(destination, mapped) == set()  # a dry run creates nothing

    code, first, stderr = _sync_acls(spec)
    assert code == 0, stderr
    report = first["sources"][0]
    assert _acls(report["created"]) == expected and report["present"] == [] and report["errors"] == []
    reasons = {(s["topic"], s["principal"], s["operation"], s["permission"]): s["reason"] for s in report["skipped"]}
    assert reasons == {
        (orders, "User:alice", "WRITE", "ALLOW"): "operation WRITE is write-side: never copied",
        (orders, "User:frank", "WRITE", "DENY"): "operation WRITE is write-side: never copied",
        (orders, "User:gina", "ALTER", "ALLOW"): "operation ALTER is not read-side: never copied",
        (orders, "User:bob", "READ", "ALLOW"): "principal excluded by the mirror's ACL filter",
        (other, "User:alice", "READ", "ALLOW"): "topic not mirrored",
        (f"acl-{run}", "User:alice", "READ", "ALLOW"):
            "prefixed pattern: only literal topic names map to destination topics",
    }
    on_destination = _topic_acls(destination, mapped)
    assert on_destination == expected  # exactly: no WRITE, no ALL, nothing for bob
    assert not any(a.operation in ("WRITE", "ALL") for a in on_destination)

    code, second, stderr = _sync_acls(spec)
    assert code == 0, stderr
    assert second["sources"][0]["created"] == [] and _acls(second["sources"][0]["present"]) == expected
    assert _topic_acls(destination, mapped) == expected

    # The copied bindings are the ones the destination's authorizer enforces.
    assert _sees_topic(destination, ALICE, PREFIX + orders)
    assert not _sees_topic(destination, BOB, PREFIX + orders)


def test_a_prefixed_or_wildcard_deny_travels_with_the_allows_it_narrows(clusters, tmp_path):
    source, destination = clusters
    run = uuid.uuid4().hex[:8]
    orders, payments = f"acl-{run}-orders", f"acl-{run}-payments"
    for topic in (orders, payments):
        create_topic(source.bootstrap_servers, topic)
        create_topic(destination.bootstrap_servers, PREFIX + topic)
        produce(destination.bootstrap_servers, PREFIX + topic, [{"value": b"secret"}])
    mallory = f"mallory-{run}"  # `*` names every topic: a principal of this test only
    everywhere = _binding("*", mallory, "ALL", "DENY")
    _create_acls(source, [
        _binding(orders, "*", "READ"), _binding(payments, "alice", "READ"), _binding(payments, "bob", "READ"),
        _binding(f"acl-{run}-ord", "alice", "READ", "DENY", pattern="PREFIXED"),  # everyone but alice reads orders
        _binding(f"acl-{run}-pay", "bob", "ALL", "DENY", pattern="PREFIXED"),     # bob reads no payments
        everywhere,
        _binding(f"acl-{run}-none", "carol", "READ", "DENY", pattern="PREFIXED"),  # narrows no mirrored topic
        _binding(f"acl-{run}-", "dave", "READ", pattern="PREFIXED"),  # a PREFIXED ALLOW is still not copied
    ])
    try:
        code, report, stderr = _sync_acls(_spec(tmp_path / "deny.yaml", source, destination, f"acl-{run}-.*"))
        assert code == 0, stderr
        expected = {
            TopicAcl(PREFIX + orders, "User:*", "*", "READ", "ALLOW"),
            TopicAcl(PREFIX + orders, "User:alice", "*", "READ", "DENY"),
            TopicAcl(PREFIX + orders, f"User:{mallory}", "*", "READ", "DENY"),
            TopicAcl(PREFIX + payments, "User:alice", "*", "READ", "ALLOW"),
            TopicAcl(PREFIX + payments, "User:bob", "*", "READ", "ALLOW"),
            TopicAcl(PREFIX + payments, "User:bob", "*", "READ", "DENY"),
            TopicAcl(PREFIX + payments, f"User:{mallory}", "*", "READ", "DENY"),
        }
        assert _topic_acls(destination, {PREFIX + orders, PREFIX + payments}) == expected
        reasons = {(s["topic"], s["principal"]): s["reason"] for s in report["sources"][0]["skipped"]
                   if s["topic"].startswith(f"acl-{run}")}  # the module's other tests' bindings are there too
        assert reasons == {
            (f"acl-{run}-none", "User:carol"): "prefixed pattern: no mirrored topic starts with it",
            (f"acl-{run}-", "User:dave"): "prefixed pattern: only literal topic names map to destination topics",
        }
        # What the source's authorizer refuses, the destination's refuses too.
        assert not _reads(destination, ALICE, PREFIX + orders)
        assert not _reads(destination, BOB, PREFIX + payments)
        assert _reads(destination, BOB, PREFIX + orders) and _reads(destination, ALICE, PREFIX + payments)
    finally:
        admin = AdminClient({"bootstrap.servers": source.bootstrap_servers})
        for future in admin.delete_acls([AclBindingFilter(
                ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, f"User:{mallory}", None,
                AclOperation.ANY, AclPermissionType.ANY)]).values():
            future.result(30)


def _reads(node, user: tuple[str, str], topic: str) -> bool:
    """Whether `user` may fetch the topic's first record (True) or is refused (False)."""
    consumer = Consumer({**sasl_plain_settings(node, *user), "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])  # an explicit offset: no group ACL involved
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            # librdkafka looks for the group's coordinator although nothing is committed: not the topic's answer
            if message is None or message.error() and message.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                continue
            if message.error() is None:
                return True
            assert message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, message.error()
            return False
        raise AssertionError(f"{user[0]} read nothing from {topic} within 30 s, and was not refused")
    finally:
        consumer.close()


def test_a_running_worker_syncs_acls_on_its_schedule(clusters, tmp_path):
    source, destination = clusters
    topic = f"acl-{uuid.uuid4().hex[:8]}-live"
    create_topic(source.bootstrap_servers, topic)
    _create_acls(source, [_binding(topic, "alice", "READ")])
    spec = _spec(tmp_path / "live.yaml", source, destination, topic, **{"acl-sync-interval-ms": 1000})
    worker = WorkerProcess(["--config", spec, "--mirror", "acls"], tmp_path)
    try:
        worker.wait_started(90)
        first = TopicAcl(PREFIX + topic, "User:alice", "*", "READ", "ALLOW")
        _wait_for_acls(destination, {first})
        _create_acls(source, [_binding(topic, "bob", "DESCRIBE"), _binding(topic, "bob", "WRITE")])
        later = TopicAcl(PREFIX + topic, "User:bob", "*", "DESCRIBE", "ALLOW")
        _wait_for_acls(destination, {first, later})
        # The broker may show the binding before the worker has logged its creation: wait for the line, then
        # let a few more syncs (1 s apart) run. Each binding is created once, whatever the number of syncs.
        deadline = time.monotonic() + 30
        while len(_created(worker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
        assert len(_created(worker)) == 2, _created(worker)
        assert worker.terminate() == 0, worker.stderr
    finally:
        worker.stop_quietly()


def _created(worker: WorkerProcess) -> list[dict]:
    return [e for e in worker.logs() if e.get("msg") == "topic ACL created"]


def _wait_for_acls(node, expected: set[TopicAcl], timeout: float = 30.0) -> None:
    topics = {a.topic for a in expected}
    deadline = time.monotonic() + timeout
    while (found := _topic_acls(node, topics)) != expected:
        assert time.monotonic() < deadline, f"destination ACLs {found}, expected {expected}"
        time.sleep(0.5)


def test_sync_acls_fails_in_one_line_when_a_cluster_does_not_answer(clusters, tmp_path):
    source, destination = clusters
    spec = tmp_path / "down.yaml"
    _spec(spec, source, destination, "acl-.*", **{"startup-timeout-s": 3})
    spec.write_text(spec.read_text().replace(source.listener_bootstrap("SASL_PLAINTEXT"), "127.0.0.1:1"))
    code, document, stderr = _sync_acls(str(spec))
    assert code == 1 and document is None
    assert stderr.count("\n") == 1 and stderr.startswith("mirror_worker: source 'east': topics not listed: "), stderr

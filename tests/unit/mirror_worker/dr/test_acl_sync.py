"""Topic ACL sync without a broker: the selection table, the admin edge over an in-memory admin, the worker's
part and the command's bad input."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.commands.main import main
from mirror_worker.config.model import build_mirror_config
from mirror_worker.dr.acl_admin import AclSync, AclSyncError, to_binding, to_topic_acl
from mirror_worker.dr.acl_rules import PrincipalFilter, SkippedAcl, TopicAcl, plan_acl_sync
from mirror_worker.exceptions import ConfigError
from mirror_worker.policy.naming import PrefixPolicy
from tests.unit.fakes import FakeError, FakeFuture, make_worker, scheduled_calls

REMOTE = PrefixPolicy("src.").remote_topic
EVERYONE = PrincipalFilter()


def acl(operation: str, permission: str = "ALLOW", principal: str = "User:alice", topic: str = "orders",
        pattern: str = "LITERAL", host: str = "*") -> TopicAcl:
    return TopicAcl(topic, principal, host, operation, permission, pattern)


def dest(operation: str, permission: str = "ALLOW", principal: str = "User:alice", topic: str = "src.orders",
         host: str = "*") -> TopicAcl:
    return TopicAcl(topic, principal, host, operation, permission)


@pytest.mark.parametrize("source, expected, reason", [
    # the read side is copied as it is
    (acl("READ"), dest("READ"), None),
    (acl("DESCRIBE"), dest("DESCRIBE"), None),
    (acl("READ", host="10.0.0.7"), dest("READ", host="10.0.0.7"), None),
    (acl("READ", principal="User:*"), dest("READ", principal="User:*"), None),
    # ALL is downgraded to READ (as MM2 does): ALL would grant writes
    (acl("ALL"), dest("READ"), None),
    # DENY of the read side travels with it (it narrows an ALLOW); DENY ALL denies the read
    (acl("READ", "DENY"), dest("READ", "DENY"), None),
    (acl("DESCRIBE", "DENY"), dest("DESCRIBE", "DENY"), None),
    (acl("ALL", "DENY"), dest("READ", "DENY"), None),
    # write side, and every other operation: never
    (acl("WRITE"), None, "operation WRITE is write-side: never copied"),
    (acl("WRITE", "DENY"), None, "operation WRITE is write-side: never copied"),
    (acl("IDEMPOTENT_WRITE"), None, "operation IDEMPOTENT_WRITE is write-side: never copied"),
    (acl("ALTER"), None, "operation ALTER is not read-side: never copied"),
    (acl("DELETE"), None, "operation DELETE is not read-side: never copied"),
    (acl("CREATE"), None, "operation CREATE is not read-side: never copied"),
    (acl("ALTER_CONFIGS"), None, "operation ALTER_CONFIGS is not read-side: never copied"),
    (acl("DESCRIBE_CONFIGS"), None, "operation DESCRIBE_CONFIGS is not read-side: never copied"),
    # names that do not map through the naming policy
    (acl("READ", pattern="PREFIXED", topic="ord"), None,
     "prefixed pattern: only literal topic names map to destination topics"),
    (acl("READ", topic="*"), None, "wildcard topic: it names every topic, not a mirrored one"),
    # topics the mirror does not mirror
    (acl("READ", topic="payments"), None, "topic not mirrored"),
])
def test_which_source_binding_gives_which_destination_binding(source, expected, reason):
    plan = plan_acl_sync([source], ["orders"], REMOTE, EVERYONE, [])
    assert plan.create == ([expected] if expected else [])
    assert plan.skipped == ([SkippedAcl(source, reason)] if reason else [])
    assert plan.present == []


@pytest.mark.parametrize("include, exclude, principal, permission, copied", [
    ((), (), "User:bob", "ALLOW", True),
    ((), ("User:bob",), "User:bob", "ALLOW", False),
    ((), ("User:bob",), "User:bobby", "ALLOW", True),  # whole-principal matches
    ((), ("bob",), "User:bob", "ALLOW", True),  # a bare name does not match `User:bob`
    (("User:team-.*",), (), "User:team-a", "ALLOW", True),
    (("User:team-.*",), (), "User:alice", "ALLOW", False),
    (("User:team-.*",), ("User:team-x",), "User:team-x", "ALLOW", False),
    # a DENY is copied whatever the filter says: leaving it out could grant what the source refuses
    ((), ("User:bob",), "User:bob", "DENY", True),
    (("User:team-.*",), (), "User:alice", "DENY", True),
])
def test_the_principal_filter_selects_allow_bindings_only(include, exclude, principal, permission, copied):
    principals = PrincipalFilter.from_expressions(include, exclude)
    plan = plan_acl_sync([acl("READ", permission, principal)], ["orders"], REMOTE, principals, [])
    assert plan.create == ([dest("READ", permission, principal)] if copied else [])
    if not copied:
        assert plan.skipped[0].reason == "principal excluded by the mirror's ACL filter"


def test_bindings_the_destination_has_are_present_not_created_and_nothing_is_duplicated():
    source = [acl("READ"), acl("ALL"), acl("DESCRIBE"), acl("READ", principal="User:carol")]
    plan = plan_acl_sync(source, ["orders"], REMOTE, EVERYONE, [dest("READ"), dest("WRITE", principal="User:x")])
    assert plan.present == [dest("READ")]  # ALLOW ALL and ALLOW READ of alice make one binding, already there
    assert plan.create == [dest("DESCRIBE"), dest("READ", principal="User:carol")]
    # a binding that differs in any field is not the same one
    plan = plan_acl_sync([acl("READ")], ["orders"], REMOTE, EVERYONE, [dest("READ", host="10.0.0.1")])
    assert plan.create == [dest("READ")]


def test_a_prefixed_or_wildcard_deny_is_expanded_onto_the_mirrored_topics_it_covers():
    mirrored = ["orders", "order-lines", "payments"]
    source = [acl("READ", principal="User:*"), acl("READ", "DENY", topic="order", pattern="PREFIXED"),
              acl("ALL", "DENY", principal="User:bob", topic="*"), acl("READ", "DENY", topic="orders"),
              acl("READ", "DENY", topic="refunds", pattern="PREFIXED"), acl("WRITE", "DENY", topic="o", pattern="PREFIXED")]
    plan = plan_acl_sync(source, mirrored, REMOTE, EVERYONE, [])
    assert set(plan.create) == {
        dest("READ", principal="User:*"),
        dest("READ", "DENY"), dest("READ", "DENY", topic="src.order-lines"),  # the prefix's and the literal's: one
        *(dest("READ", "DENY", "User:bob", f"src.{t}") for t in mirrored),
    } and len(plan.create) == 6
    assert {s.acl.topic: s.reason for s in plan.skipped} == {
        "refunds": "prefixed pattern: no mirrored topic starts with it",
        "o": "operation WRITE is write-side: never copied"}


def test_denies_are_created_first_and_an_allow_waits_for_its_topics_denies():
    deny = dest("READ", "DENY", principal="User:bob")
    destination = AclAdmin(refuse=[deny])
    source = AclAdmin([acl("READ", principal="User:*"), acl("READ", "DENY", "User:bob", "ord", "PREFIXED"),
                       acl("READ", topic="payments")])
    report = AclSync(destination, REMOTE, EVERYONE).sync("dc1", source, ["orders", "payments"])
    assert report.errors == {deny: "not authorized",
                             dest("READ", principal="User:*"): "not created: a DENY on this topic was refused"}
    assert destination.acls == {dest("READ", topic="src.payments")}


def test_destination_names_come_from_the_naming_policy():
    plan = plan_acl_sync([acl("READ", topic="a"), acl("READ", topic="b")], ["a", "b"], {"a": "x", "b": "y"}.get,
                         EVERYONE, [])
    assert [a.topic for a in plan.create] == ["x", "y"]


def test_invalid_principal_regexes_are_bad_input_naming_the_key():
    with pytest.raises(ConfigError, match=r"acl-sync-exclude-principals: invalid regex '\('"):
        PrincipalFilter.from_expressions((), ("(",))
    with pytest.raises(ConfigError, match=r"acl_sync_principals.*invalid regex"):
        build_mirror_config({"name": "m", "sources": [{"name": "s", "consumer": {"bootstrap.servers": "a:1"}}],
                             "producer": {"bootstrap.servers": "b:1"}, "whitelist": "x", "group_id": "g",
                             "acl_sync_principals": ["User:[a"]})


class AclAdmin:
    """describe_acls/create_acls over an in-memory set of AclBindings; `fail_describe`/`refuse` inject errors."""

    def __init__(self, acls=(), fail_describe: str | None = None, refuse=()) -> None:
        self.bindings = {to_binding(a) for a in acls}
        self.fail_describe, self.refuse = fail_describe, set(refuse)
        self.create_calls = 0

    @property
    def acls(self) -> set[TopicAcl]:
        return {to_topic_acl(b) for b in self.bindings}

    def describe_acls(self, acl_filter, request_timeout=None):
        if self.fail_describe:
            error = KafkaException(FakeError(KafkaError.SECURITY_DISABLED, self.fail_describe))
            future = FakeFuture(None)
            future.result = lambda timeout=None: (_ for _ in ()).throw(error)
            return future
        return FakeFuture(sorted(self.bindings, key=str))

    def create_acls(self, bindings, request_timeout=None):
        self.create_calls += 1
        futures = {}
        for binding in bindings:
            if to_topic_acl(binding) in self.refuse:
                future = FakeFuture(None)
                error = KafkaException(FakeError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "not authorized"))
                future.result = lambda timeout=None, e=error: (_ for _ in ()).throw(e)
            else:
                self.bindings.add(binding)
                future = FakeFuture(None)
            futures[binding] = future
        return futures


SOURCE_ACLS = [acl("READ"), acl("WRITE"), acl("ALL", principal="User:dave"), acl("DESCRIBE", principal="User:carol"),
               acl("READ", principal="User:bob"), acl("READ", topic="other")]


def test_a_sync_creates_the_missing_bindings_and_a_second_one_creates_nothing():
    source, destination = AclAdmin(SOURCE_ACLS), AclAdmin()
    sync = AclSync(destination, REMOTE, PrincipalFilter.from_expressions((), ("User:bob",)))
    first = sync.sync("dc1", source, ["orders"])
    expected = {dest("READ"), dest("READ", principal="User:dave"), dest("DESCRIBE", principal="User:carol")}
    assert set(first.created) == expected and destination.acls == expected
    assert first.skipped_by_reason() == {"operation WRITE is write-side: never copied": 1,
                                         "principal excluded by the mirror's ACL filter": 1, "topic not mirrored": 1}
    second = sync.sync("dc1", source, ["orders"])
    assert second.created == [] and set(second.present) == expected and second.ok
    assert destination.create_calls == 1  # nothing to create: no request at all
    report = json.loads(json.dumps(second.to_dict()))
    assert report["source"] == "dc1" and report["created"] == [] and len(report["skipped"]) == 3


def test_a_dry_run_reports_and_creates_nothing():
    destination = AclAdmin()
    report = AclSync(destination, REMOTE, EVERYONE).sync("dc1", AclAdmin([acl("READ")]), ["orders"], dry_run=True)
    assert report.created == [dest("READ")] and destination.acls == set() and destination.create_calls == 0
    assert "would_create" in report.to_dict() and "created" not in report.to_dict()


def test_refused_bindings_are_reported_and_the_rest_created():
    refused = dest("READ", principal="User:dave")
    destination = AclAdmin(refuse=[refused])
    report = AclSync(destination, REMOTE, EVERYONE).sync(
        "dc1", AclAdmin([acl("READ"), acl("READ", principal="User:dave")]), ["orders"])
    assert report.created == [dest("READ")] and report.errors == {refused: "not authorized"} and not report.ok


def test_unreadable_acls_are_an_error_naming_the_cluster():
    sync = AclSync(AclAdmin(), REMOTE, EVERYONE)
    with pytest.raises(AclSyncError, match=r"^source 'dc1': topic ACLs not readable: No Authorizer"):
        sync.sync("dc1", AclAdmin(fail_describe="No Authorizer is configured"), ["orders"])
    sync = AclSync(AclAdmin(fail_describe="denied"), REMOTE, EVERYONE)
    with pytest.raises(AclSyncError, match=r"^destination: topic ACLs not readable: denied"):
        sync.sync("dc1", AclAdmin(), ["orders"])


def test_the_worker_syncs_the_acls_of_its_mirrored_topics_and_counts_them():
    worker, stream, _, _ = make_worker({("orders", 0): []}, acl_sync_interval_ms=1000,
                                       acl_sync_exclude_principals=["User:bob"])
    destination = AclAdmin()
    worker.housekeeping.acl_sync.destination_admin = destination
    stream.admin = AclAdmin(SOURCE_ACLS)
    worker.housekeeping.sync_acls()
    worker.housekeeping.sync_acls()
    assert destination.acls == {TopicAcl("dst.orders", "User:alice", "*", "READ", "ALLOW"),
                                TopicAcl("dst.orders", "User:dave", "*", "READ", "ALLOW"),
                                TopicAcl("dst.orders", "User:carol", "*", "DESCRIBE", "ALLOW")}
    counted = worker.metrics.acls_synced.labels(mirror="m", source="src", topic="dst.orders")._value.get()
    assert counted == 3  # the second sync created nothing


def test_the_worker_counts_a_failed_sync_and_goes_on():
    worker, stream, _, _ = make_worker({("orders", 0): []}, acl_sync_interval_ms=1000)
    stream.admin = AclAdmin(fail_describe="No Authorizer is configured")
    worker.housekeeping.sync_acls()
    assert worker.metrics.errors.labels(mirror="m", kind="acl_sync")._value.get() == 1


def test_acl_sync_is_off_in_the_worker_by_default():
    worker, _, _, _ = make_worker({("orders", 0): []})
    assert worker.config.acl_sync_interval_ms == 0 and worker.housekeeping.acl_sync is None
    worker.housekeeping.sync_acls()  # nothing to do, no admin call


@pytest.mark.parametrize("spec, error", [
    ("      - {name: m, whitelist: x, acl-sync-principals: ['User:[a']}\n",
     "acl-sync-principals: invalid regex 'User:[a'"),
    ("      - {name: m, whitelist: x, acl-sync-interval-ms: -1}\n", "acl-sync-interval-ms: Input should be greater"),
    ("      - {name: m, whitelist: x, acl-sync-exclude-principals: User:bob}\n",
     "acl-sync-exclude-principals: Input should be a valid list"),
])
def test_the_command_refuses_bad_input_in_one_line_with_exit_2(tmp_path, capsys, spec, error):
    path = tmp_path / "m.yaml"
    path.write_text("groups:\n  - source: {kafka: {bootstrap.servers: 'a:1'}}\n"
                    "    destination: {kafka: {bootstrap.servers: 'b:1'}}\n    mirrors:\n" + spec)
    assert main(["sync-acls", "--config", str(path), "--mirror", "m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and error in err, err
    assert main(["sync-acls", "--config", str(path), "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_the_worker_loop_syncs_acls_at_once_then_every_interval():
    worker, _, _, _ = make_worker({("orders", 0): []}, acl_sync_interval_ms=1000)
    first, gaps = scheduled_calls(worker, "sync_acls")
    assert first < 0.5  # the first sync does not wait an interval
    assert all(1.0 <= gap < 1.5 for gap in gaps), gaps

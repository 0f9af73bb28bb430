"""The offset translation's lines (`translate-offsets`, and the failover's tasks that translate), each made by a
scene over fakes of the destination for test_troubleshooting.py, printed as the subcommand prints a failure
(exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import case, with_mirror_keys
from tests.unit.troubleshooting_cases_runtime import worker

SPEC_PRESERVING = with_mirror_keys("preserve-partitions: true")
UNTRANSLATED = "0: the partition is listed under `untranslated`"
LOGGED = "none: the worker goes on (logged)"


def mirror():
    """The mirror `orders` of the page's spec, with preserve-partitions (offset translation needs it)."""
    from mirror_worker.batch_api import select_mirror

    Path("spec.yaml").write_text(SPEC_PRESERVING)
    return select_mirror(Path("spec.yaml"), "orders")


def no_offset_syncs() -> int:
    """The destination has no offset-syncs topic of the mirror (it never ran with preserve-partitions)."""
    from mirror_worker.dr import offset_translation

    consumer = SimpleNamespace(list_topics=lambda topic, timeout: SimpleNamespace(topics={}), close=lambda: None)
    with mock.patch.object(offset_translation.factory, "side_consumer", lambda *args: consumer):
        return worker(lambda: offset_translation.read_offset_syncs(mirror(), 1))


def group_active_on_destination() -> int:
    """`--apply` while two consumers of the group already run on the destination."""
    from mirror_worker.dr import offset_translation
    from tests.unit.fakes import FakeAdmin

    with mock.patch.object(offset_translation, "_admin", lambda settings, what="": FakeAdmin(group_members={"app": 2})):
        return worker(lambda: offset_translation.apply_group_offsets(mirror(), "app", {("orders", 0): 5}, 1))



def destination_consumer(ends: tuple[int, int] = (0, 5), messages=(), topics=None):
    """A side consumer of the destination: the mirror's offset-syncs topic with one partition (low, high `ends`),
    `messages` at each consume (none: it waits 10 ms), `topics` raising from list_topics when an exception."""
    import time

    def list_topics(topic, timeout):
        if isinstance(topics, Exception):
            raise topics
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    return SimpleNamespace(list_topics=list_topics, get_watermark_offsets=lambda tp, timeout: ends,
                           assign=lambda partitions: None, unassign=lambda: None, close=lambda: None,
                           consume=lambda n, timeout: list(messages) or time.sleep(0.01) or [])


def offset_syncs(what: str) -> int:
    """translate-offsets reads the mirror's offset syncs, waiting at most 50 ms: none come (`stall`), or the
    destination refuses the topic (`refused`: no Describe or Read on it)."""
    from confluent_kafka import KafkaError, KafkaException

    from mirror_worker.dr import offset_translation

    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    consumer = destination_consumer(topics=refused if what == "refused" else None)
    with mock.patch.object(offset_translation.factory, "side_consumer", lambda *args: consumer):
        return worker(lambda: offset_translation.read_offset_syncs(mirror(), 0.05))


def partition_read(what: str) -> int:
    """The destination partition orders[0] read to place the group: its offsets (`bounds`: the topic gone, or
    refused) or its records 0..5 (`stall`: none come within 50 ms; `error`: the consumer fails)."""
    from confluent_kafka import KafkaError

    from mirror_worker.dr.offset_translation import PartitionReader
    from tests.unit.fakes import FakeError, FakeFuture, FakeMessage

    code = KafkaError.UNKNOWN_TOPIC_OR_PART if what == "missing" else KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = SimpleNamespace(list_offsets=lambda requests, **kwargs: {tp: FakeFuture(error=code) for tp in requests})
    failing = FakeMessage("orders", 0, 0, error=FakeError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                          "Broker: Topic authorization failed"))
    reader = PartitionReader(destination_consumer(messages=[failing] if what == "error" else []), admin, 0.05)
    if what == "missing":  # translate-offsets lists the partition under `untranslated`, with this reason
        from mirror_worker.dr.offset_translation import MissingPartitionError

        try:
            reader.bounds("orders", 0)
        except MissingPartitionError as exc:
            print(exc, file=sys.stderr)
        return UNTRANSLATED
    return worker(lambda: reader.bounds("orders", 0) if what == "bounds" else list(reader.records("orders", 0, 0, 5)))


def group_write(answer) -> int:
    """`--apply` writes group app's offset of orders[0] on the destination: the describe or the write fails
    (`answer`: a KafkaError code), or the broker refuses the partition (a TopicPartition with its error)."""
    from confluent_kafka import KafkaError

    from mirror_worker.dr import offset_translation
    from tests.unit.fakes import FakeAdmin, FakeFuture

    admin = FakeAdmin()
    if answer == "describe":
        admin.describe_consumer_groups = lambda groups, **kwargs: {
            g: FakeFuture(error=KafkaError.GROUP_AUTHORIZATION_FAILED) for g in groups}
        with mock.patch.object(offset_translation, "_admin", lambda settings, what="": admin):
            return worker(lambda: offset_translation.apply_group_offsets(mirror(), "app", {}, 1))
    refused = SimpleNamespace(topic="orders", partition=0, error=KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    admin.alter_consumer_group_offsets = lambda requests, **kwargs: {"app": FakeFuture(
        error=KafkaError.GROUP_AUTHORIZATION_FAILED) if answer == "write" else FakeFuture(
        SimpleNamespace(topic_partitions=[refused]))}
    return worker(lambda: offset_translation.write_group_offsets(admin, "app", {("orders", 0): 5}, 1))


def group_sync() -> int:
    """sync-group-offsets where the source refuses to list its consumer groups (no Describe on the cluster)."""
    from confluent_kafka import KafkaError

    from mirror_worker.commands.main import main
    from mirror_worker.dr import group_admin
    from tests.unit.fakes import FakeAdmin, FakeFuture

    admin = FakeAdmin()
    admin.list_consumer_groups = lambda **kwargs: FakeFuture(error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    with mock.patch.multiple(group_admin, destination_reader=lambda config: (None, SimpleNamespace(close=list)),
                             source_cluster_id=lambda source, timeout: "c1"), \
            mock.patch.object(group_admin.factory, "group_admin_client", lambda settings, what: admin):
        return main(["sync-group-offsets", "--config", "spec.yaml"])


def sole_writer() -> str:
    """The worker's group offset sync asks first whether this worker is the one to write: the mirror's group cannot
    be described. The sync's round fails; the worker logs `group offset sync failed` with this error, and goes on."""
    from confluent_kafka import KafkaError

    from mirror_worker.dr.group_admin import GroupOffsetSync, SoleWriter
    from tests.unit.fakes import FakeAdmin, FakeFuture

    admin = FakeAdmin()
    admin.describe_consumer_groups = lambda groups, **kwargs: {
        g: FakeFuture(error=KafkaError.GROUP_AUTHORIZATION_FAILED) for g in groups}
    sync = GroupOffsetSync("east", "c1", admin, admin, None, None, None, None, list, dict,
                           not_writer=SoleWriter(admin, "kafka-mirror.orders", lambda: "member-1", 1))
    print(sync.sync().errors["*"], file=sys.stderr)
    return LOGGED


def acl_sync(what: str) -> int:
    """sync-acls over a source with one ALLOW READ on orders: the destination has no authorizer (`unreadable`), or
    shows its ACLs but refuses to create the binding (`refused`: the principal may not alter them)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    from mirror_worker.commands.main import main
    from mirror_worker.dr import acl_admin
    from tests.unit.fakes import FakeFuture

    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:app", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    source = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics={"orders": None}),
                             describe_acls=lambda acl_filter, **kwargs: FakeFuture([binding]))
    destination = SimpleNamespace(
        describe_acls=lambda acl_filter, **kwargs: FakeFuture([]) if what == "refused" else FakeFuture(
            error=KafkaError.SECURITY_DISABLED),
        create_acls=lambda bindings, **kwargs: {b: FakeFuture(error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
                                                for b in bindings})
    admins = iter((destination, source))  # as sync_mirror_acls asks for them
    with mock.patch.object(acl_admin, "_admin", lambda settings: next(admins)):
        return main(["sync-acls", "--config", "spec.yaml"])



CASES = {
    "mirror_worker: no offset-syncs topic … on the destination: has mirror … run with preserve-partitions?": case(
        no_offset_syncs, exit_code=1),
    "mirror_worker: destination group … has … active member(s): stop its consumers before applying translated "
    "offsets": case(group_active_on_destination, exit_code=1),
    "mirror_worker: reading … on the destination timed out": case(offset_syncs, "stall", exit_code=1),
    "mirror_worker: cannot read … on the destination: …": case(offset_syncs, "refused", exit_code=1),
    "…[…] does not exist on …": case(partition_read, "missing", exit_code=UNTRANSLATED),
    "mirror_worker: cannot read the offsets of …[…] on …: …": case(partition_read, "bounds", exit_code=1),
    "mirror_worker: reading …[…] on … timed out at …..…": case(partition_read, "stall", exit_code=1),
    "mirror_worker: reading …[…]: …": case(partition_read, "error", exit_code=1),
    "mirror_worker: cannot describe group … on the destination: …": case(group_write, "describe", exit_code=1),
    "mirror_worker: cannot write offsets of group … on the destination: …": case(group_write, "write", exit_code=1),
    "mirror_worker: offsets of group … not written: …": case(group_write, "partition", exit_code=1),
    "mirror_worker: source …: groups not listed: cannot list the groups of source …: …": case(
        group_sync, exit_code=1, spec_yaml=SPEC_PRESERVING),
    "cannot describe the mirror's group …: …": case(sole_writer, exit_code=LOGGED),
    "mirror_worker: destination: topic ACLs not readable: …": case(acl_sync, "unreadable", exit_code=1),
    "mirror_worker: topic ACL not created on … for … (… …): …": case(acl_sync, "refused", exit_code=1),
}

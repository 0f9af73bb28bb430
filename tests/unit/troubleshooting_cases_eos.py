"""The worker's exactly-once and catch-up-lease lines and its destination topics' waits, each made by a scene over
fake producers, consumers and admins (as tests/unit/mirror_worker/exactly_once/test_stream_transaction.py fakes
them) for test_troubleshooting.py; a worker's line printed as commands/runner.py prints it."""

from __future__ import annotations

import itertools
import sys
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import case
from tests.unit.troubleshooting_cases_jobs import catchup_job
from tests.unit.troubleshooting_cases_runtime import worker

IN_TASK_LOG = "1: the catch-up fails (in its task's log)"
WRITER = "kafka-mirror-eos.kafka-mirror.orders.east.0"


def refused(code: int):
    """A client call the destination refuses with `code` (a KafkaError code, not retriable)."""
    from confluent_kafka import KafkaError, KafkaException

    def call(*args, **kwargs):
        raise KafkaException(KafkaError(code))
    return call


def producer(**failing):
    """A transactional producer whose calls succeed, but those in `failing` (name -> KafkaError code)."""
    calls = {name: lambda *args, **kwargs: None for name in ("init_transactions", "begin_transaction", "produce",
                                                             "abort_transaction", "flush", "poll")}
    return SimpleNamespace(**{**calls, **{name: refused(code) for name, code in failing.items()}})


def init_refused() -> int:
    """The worker's producer asks for its transactional.id: the principal has no Write on it."""
    from confluent_kafka import KafkaError

    from mirror_worker.exactly_once.fencing import init_transactions

    return worker(lambda: init_transactions(producer(
        init_transactions=KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), 1, f"{WRITER} (source east)"))


def stream(what: str):
    """The worker's StreamTransaction of source east opens orders[0] (connect and fence patched out): its producer
    fenced right after its init (`begin`), or another process claiming the partition at each read (`claimed`)."""
    from confluent_kafka import KafkaError

    from mirror_worker.exactly_once import stream_transaction
    from mirror_worker.exactly_once.positions import Owner

    made = producer(begin_transaction=KafkaError._FENCED) if what == "begin" else producer()
    patches = mock.patch.multiple(stream_transaction, fence=lambda *args, **kwargs: None, connect=lambda *args: None)
    with patches, mock.patch.object(stream_transaction.factory, "producer", lambda settings: made):
        transaction = stream_transaction.StreamTransaction(
            "orders", "east", {}, {}, lambda topic: topic, lambda topic: "id", 1.0, "orders.mirror.eos-positions",
            lambda topic: Owner("c1", topic, "kafka-mirror.orders"), WRITER, store=Claimed())
        return worker(lambda: transaction.open([("orders", 0)]))


class Claimed:
    """The positions group, each stable read naming another writer of orders[0] (another process claims it)."""

    def __init__(self) -> None:
        self.writers = (f"kafka-mirror-eos.kafka-mirror.orders.east.{n}" for n in itertools.count(1))

    def refuse_foreign(self, keys):
        return dict.fromkeys(keys, "")

    def warm(self):
        pass

    def warm_legacy(self):
        pass

    def read(self, keys, stable_legacy=False):
        return dict.fromkeys(keys), set(), {key: next(self.writers) for key in keys}


def position_store(committed=None, poll=None):
    """The worker's PositionStore of source east on the destination: its readers' `committed` and `poll`."""
    from mirror_worker.exactly_once import position_store as module
    from mirror_worker.exactly_once.positions import Owner

    reader = SimpleNamespace(consumer_group_metadata=lambda: None, committed=committed, poll=poll,
                             assign=lambda partitions: None, close=lambda: None,
                             get_watermark_offsets=lambda tp, timeout: (0, 3))
    with mock.patch.object(module.factory, "consumer", lambda *args: reader):
        return module.PositionStore("orders", "east", {}, lambda topic: topic, lambda topic: "id",
                                    lambda topic: Owner("c1", topic, "kafka-mirror.orders"), 0.05,
                                    "orders.mirror.eos-positions")


def foreign_position() -> int:
    """Destination partition orders[0] holds the position of another mirror (group kafka-mirror.other)."""
    from confluent_kafka import TopicPartition

    from mirror_worker.exactly_once.positions import Owner, position_metadata

    other = position_metadata("id", Owner("c1", "orders", "kafka-mirror.other"), "w")
    store = position_store(committed=lambda tps, timeout: [TopicPartition("orders", 0, 5, other)])
    return worker(lambda: store.refuse_foreign([("orders", 0)]))


def positions_unreadable() -> int:
    from confluent_kafka import KafkaError

    store = position_store(committed=refused(KafkaError.GROUP_AUTHORIZATION_FAILED))
    return worker(lambda: store.read([("orders", 0)]))


def positions_topic_silent() -> int:
    """Partitions without a position: the positions topic (3 records) is read for theirs; nothing comes."""
    import time

    store = position_store(poll=lambda timeout: time.sleep(0.01))
    return worker(lambda: store.vanished([("orders", 0)]))


def partition_transaction(what: str) -> str:
    """A catch-up task's transactional producer of orders[0] (exactly-once): its init refused (no Write on the
    transactional.id), or its begin failing right after. Its task's log ends with the line."""
    from confluent_kafka import KafkaError

    from mirror_worker.exactly_once.transactions import PartitionTransactions
    from mirror_worker.exceptions import MirrorError

    transactions = SimpleNamespace(timeout_s=0.05, starting={}, _retire=lambda made: None)
    transactions._call = lambda method, key, call: PartitionTransactions._call(transactions, method, key, call)
    made = producer(init_transactions=KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) if what == "init" else \
        producer(begin_transaction=KafkaError._FENCED)
    transactions.starting[("orders", 0)] = made
    try:
        PartitionTransactions._new_producer(transactions, ("orders", 0))
    except MirrorError as exc:
        print(exc, file=sys.stderr)
    return IN_TASK_LOG


def claim_not_committed() -> int:
    """Exactly-once: the claim of a newly assigned partition is not committed within startup-timeout-s."""
    from mirror_worker.engine.assignment import PartitionAssignment

    outcome = SimpleNamespace(aborted=[], complete=False)
    assignment = SimpleNamespace(startup_timeout_s=0, commits=SimpleNamespace(claim=lambda stream, claims: outcome),
                                 state=SimpleNamespace(fatal=None, running=True))
    east = SimpleNamespace(alias="east", ledger=SimpleNamespace(committed={("orders", 0): 5}))
    return worker(lambda: PartitionAssignment._claim(assignment, east, [("orders", 0)]))


def catchup_holds_group() -> int:
    """The worker's check at an assignment: the catch-up's lease group has a member."""
    from mirror_worker.engine.catchup_lease import CatchupCheck
    from tests.unit.fakes import FakeAdmin

    return worker(lambda: CatchupCheck("kafka-mirror.orders", 1)(FakeAdmin(
        group_members={"kafka-mirror.orders.catchup": 1})))


def lease_not_joined() -> int:
    """The catch-up joins the lease group: no assignment comes (the group's coordinator does not answer)."""
    from mirror_worker.engine import catchup_lease

    consumer = SimpleNamespace(subscribe=lambda topics, on_assign: None, poll=lambda timeout: None,
                               close=lambda: None)
    with mock.patch.object(catchup_lease.factory, "side_consumer", lambda *args: consumer):
        return catchup_job(lambda: catchup_lease.CatchupLease({}, "kafka-mirror.orders", "orders", 0).__enter__())


def topics_not_shown(what: str) -> int:
    """The destination created orders.mirror.offset-syncs (or grew orders to 6 partitions): its metadata does not
    show it (or shows 3) within the wait, at least 10 s (the clock here goes 5 s a look)."""
    from mirror_worker.topics import admin
    from mirror_worker.topics.admin import DestinationTopics

    grown = what == "grown"
    shown = {"orders": SimpleNamespace(partitions=3)} if grown else {}
    clock = SimpleNamespace(monotonic=itertools.count(0, 5).__next__, sleep=lambda seconds: None)
    with mock.patch.multiple(admin, time=clock, describe_topics=lambda client, timeout: shown):
        return worker(lambda: DestinationTopics._partition_counts(
            SimpleNamespace(admin=None, timeout=1), ["orders"] if grown else ["orders.mirror.offset-syncs"],
            {"orders": 6} if grown else {}))


CASES = {
    "mirror_worker: exactly-once init of … failed: …": case(init_refused, exit_code=1),
    "mirror_worker: exactly-once begin of … failed: …": case(stream, "begin", exit_code=1),
    "mirror_worker: exactly-once: the writers of the partitions of source … kept changing while … rounds fenced them: "
    "another process claims them meanwhile": case(stream, "claimed", exit_code=1),
    "mirror_worker: exactly-once: destination partition …[…] is already written by another mirror (…); this one "
    "(…) would fence it: give one of them other destination topics (prefix, topic-map), or, if that mirror is gone "
    "for good, delete its positions (group …, that topic)": case(foreign_position),
    "mirror_worker: cannot read exactly-once positions of source …: …": case(positions_unreadable, exit_code=1),
    "mirror_worker: cannot read … within …s": case(positions_topic_silent, exit_code=1),
    "exactly-once … of …[…] failed: …": case(partition_transaction, "init", exit_code=IN_TASK_LOG),
    "exactly-once begin of …[…] failed: …": case(partition_transaction, "begin", exit_code=IN_TASK_LOG),
    "mirror_worker: exactly-once: the partitions assigned to this worker could not be claimed on the destination "
    "(… of source …) within …s: …": case(claim_not_committed, exit_code=1),
    "mirror_worker: a catch-up is copying the backlog of consumer group … (its lease group … has a member): the "
    "worker exits without mirroring; start it again when the catch-up has finished": case(
        catchup_holds_group, exit_code=1),
    "catchup: failed: MirrorError: catch-up: could not join the lease group … within …s": case(
        lease_not_joined, exit_code=1),
    "mirror_worker: destination topics not visible after creation: …": case(topics_not_shown, "created", exit_code=1),
    "mirror_worker: destination topics not grown after create_partitions: …": case(
        topics_not_shown, "grown", exit_code=1),
}

"""Exactly-once mode: each source partition's records and its source position commit in one transaction.

Source-cluster offsets cannot join a destination transaction, so the position is kept on the
destination, as a consumer-group offset written with `send_offsets_to_transaction`:

    group  kafka-mirror-eos                (one per destination cluster)
    key    (destination topic, partition)  value = next source offset to mirror, metadata = its owner

The destination topic has at least as many partitions as its source in this mode, so the key always
names a real partition (the broker refuses offsets of unknown partitions). Nobody consumes with that
group; it is only a transactional key-value store that `read_committed` fetches honour per partition.

Identities (keyed by the destination partition, each position carrying its owner) and the upgrade from the
earlier layout: exactly_once/positions.py; reading positions: position_store.py. A worker that finds another owner's position on a partition it is
about to write refuses to start (`IdentityCollision`) before its `init_transactions` could fence that mirror;
an earlier layout's transactional id is fenced before its position is moved into the new group.

Offsets of a group without members expire (`offsets.retention.minutes` after their last commit, 7 days by
default), so the positions are kept alive: one that did not move for a quarter of the destination's
retention is committed again, unchanged, in its own transaction. And because one may still be gone (a
mirror stopped for longer than the retention), each partition's first commit of a run also writes a record
to the compacted topic `<mirror>.mirror.eos-positions` (key: destination topic and partition), in the same
transaction: a missing position with such a record is a position that expired, and its partition halts
instead of starting again from the source group or the reset policy (duplicates or loss).

Invariant: the committed position of a partition equals the number of its records in committed
transactions, so a restart from it neither skips nor repeats a record. Each position names its writer (the
transactional.id that may hold the partition's records in an open transaction); a new owner fences that
writer before it reads the position for good: stream_transaction.py states the rule.

Two writers: the worker keeps one transactional producer per source cluster for all its partitions
(stream_transaction.py, `StreamTransaction`); the Spark catch-up copies each partition in a task of its own,
with `PartitionTransactions` below: one transactional producer per partition, whose transactional.id names
its destination partition.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import client_callback
from mirror_worker.exactly_once.bounded_call import STUCK_AFTER_S, StuckCall, call_within
from mirror_worker.exactly_once.fencing import connect, fence
from mirror_worker.exactly_once.position_store import PositionStore
from mirror_worker.exactly_once.positions import (
    RELEASED, PositionKey, keepalive_due, legacy_transactional_id, transactional_id,
)
from mirror_worker.exceptions import MirrorError

log = logging.getLogger("mirror_worker")


class TransactionAborted(MirrorError):
    """The partition's open transaction was aborted: its records since the last commit must be re-sent."""


class ProducerFenced(MirrorError):
    """Another worker took over the partition's transactional.id: this worker must stop writing it."""


class TransactionPending(MirrorError):
    """The destination did not answer in time: the partition's transaction (or its abort) is unfinished and
    is tried again with the same position; nothing may be added to it meanwhile."""


# The transactional producers' retry.backoff.ms unless configured. The transaction begun right after a commit
# meets the broker still finishing that commit (CONCURRENT_TRANSACTIONS) and librdkafka retries after this
# backoff: at its default of 100 ms each commit cycle of a partition took ~100 ms instead of ~10 ms
# (measured on the local stack, see bench/results/eos-speed-*.md).
RETRY_BACKOFF_MS = "10"
# Partitions whose transactions commit (or whose producers start) at the same time, each call in a thread of
# its own: the calls wait on the destination, not on this process.
PARALLEL_CALLS = 8

# Fatal errors that mean another producer holds the transactional.id now; any other fatal error replaces
# the producer (a new one with the same id fences the broken one and aborts its transaction).
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


class PartitionTransactions:
    """The transactional producers of some partitions of one source cluster, one each, and their positions
    (the Spark catch-up's tasks).

    `owner(source topic)` names this mirror as the writer of that topic's destination partitions."""

    def __init__(self, mirror: str, alias: str, producer_settings: dict, group_settings: dict,
                 destination_topic, topic_id, timeout_s: float, positions_topic: str, owner,
                 clock=time.monotonic, store: PositionStore | None = None) -> None:
        self.mirror = mirror
        self.positions_topic = positions_topic
        self.clock = clock
        self.group_settings = group_settings
        self.held: dict[PositionKey, int] = {}  # the position each owned partition has on the destination
        self.committed_at: dict[PositionKey, float] = {}  # when this worker last committed it
        self.recorded: set[PositionKey] = set()  # partitions whose positions-topic record this run wrote
        self.alias = alias
        self.producer_settings = producer_settings
        self.destination_topic = destination_topic  # source topic -> destination topic
        self.topic_id = topic_id  # source topic -> its id now, kept with each position (recreation check)
        self.owner = owner
        self.timeout_s = timeout_s
        # Where positions are read (the destination's positions group); built from the same settings unless given.
        self.store = store or PositionStore(mirror, alias, group_settings, destination_topic, topic_id, owner,
                                            timeout_s, positions_topic)
        self.producers: dict[PositionKey, Producer] = {}
        self.aborting: dict[PositionKey, str] = {}  # an abort that did not finish yet: why it was started
        self.broken: set[PositionKey] = set()  # producers to replace (fatal error, or a call that hung)
        self.live: dict[int, list[bool]] = {}  # id(producer) -> [still in use], read by its error callback
        self.committing: dict[PositionKey, int] = {}  # offsets sent, commit_transaction not finished yet
        self.starting: dict[PositionKey, Producer] = {}  # a replacement whose init did not finish yet
        # Replaced while their send_offsets_to_transaction still blocks; each is dropped by its own thread once
        # that call returns (never destroyed under it).
        self.abandoned: list[Producer] = []
        # A send_offsets_to_transaction that hangs after a destination broker came back (librdkafka 5456/5511)
        # hangs on every producer that lived through the same fault, each on its next call: seen on one node,
        # one partition after another, 15 s each (60 s for four). So when one hangs, each producer not heard
        # from since that call began (`sound`: when it was made or last finished send_offsets) is replaced
        # before its own call instead: its transaction aborted and re-sent, as after a hang, without the wait.
        self.hung_since: float | None = None
        self.sound: dict[PositionKey, float] = {}
        self.from_legacy: set[PositionKey] = set()  # positions last read from the earlier layout's group
        self.fenced: set[str] = set()  # worker writers fenced by this one (stream_transaction.py)
        self.stable_writers: dict[PositionKey, str | None] = {}  # the writers the last positions read named
        self.pool = ThreadPoolExecutor(PARALLEL_CALLS, thread_name_prefix="transactions")

    def open(self, keys: list[PositionKey]) -> dict[PositionKey, tuple[int, str] | None]:
        """Refuse partitions another mirror writes, fence earlier owners, open a transaction per partition,
        and read where each one stands."""
        fresh = [key for key in keys if key not in self.producers]
        writers = self.store.refuse_foreign(fresh)
        self._fence_writers(writers)
        started = self._each(fresh, self._new_producer)
        self.producers.update({key: p for key, p in started.items() if not isinstance(p, BaseException)})
        self.sound.update({key: self.clock() for key, p in started.items() if not isinstance(p, BaseException)})
        for failed in started.values():
            if isinstance(failed, BaseException):
                raise failed
        found = self.positions(keys)
        migrating = [key for key in fresh if key in self.from_legacy]
        if migrating:
            for key in migrating:  # an old worker still writing it stops before its position is read for good
                self._fence_legacy(key)
            found.update(self.positions(migrating, stable_legacy=True))
        for _ in range(3):  # a writer whose transaction carried the position while it was read (F)
            if not self._fence_writers(self.stable_writers):
                break
            found.update(self.positions(keys))
        return found

    def _fence_writers(self, writers: dict[PositionKey, str | None]) -> bool:
        """Fence the writers positions name other than the partitions' own ids (a worker's:
        stream_transaction.py); whether there were any."""
        ids = {writer for key, writer in writers.items()
               if writer not in (None, RELEASED, self._own_id(key))} - self.fenced
        if ids:
            fence(self.producer_settings, ids, self.positions_topic, self.timeout_s)
            self.fenced |= ids
        return bool(ids)

    def _own_id(self, key: PositionKey) -> str:
        return transactional_id(self.destination_topic(key[0]), key[1])

    def _new_producer(self, key: PositionKey) -> Producer:
        """A producer of the partition's transactional.id with a transaction open; it fences any earlier one.

        One whose init did not finish is kept and its init called again (as librdkafka asks): a dropped one
        may still finish it later and fence its successor."""
        producer = self.starting.pop(key, None)
        if producer is None:  # never `or`: a Producer with an empty queue is falsy (len 0)
            producer = self._producer(key)
            connect(producer, self.destination_topic(key[0]), self.timeout_s)
        try:
            self._call(producer.init_transactions, key, "init")
        except MirrorError:
            self.starting[key] = producer
            raise
        try:
            producer.begin_transaction()
        except KafkaException as exc:  # failed right after its init: the next attempt starts a new one
            self._retire(producer)
            raise MirrorError(f"exactly-once begin of {key[0]}[{key[1]}] failed: {exc.args[0].str()}") from None
        return producer

    def _producer(self, key: PositionKey) -> Producer:
        settings = {"retry.backoff.ms": RETRY_BACKOFF_MS, **self.producer_settings,
                    "transactional.id": self._own_id(key)}
        upstream = settings.get("error_cb")
        live = [True]

        def on_error(err: KafkaError) -> None:
            if not live[0]:
                return  # replaced: its successor fenced it, as intended
            # Never a fatal error: confluent-kafka raises those from poll() instead (ProducerSet.serve), and the
            # partition's next commit classifies them (fenced stops the worker, else the producer is replaced).
            if upstream is not None:
                upstream(err)

        settings["error_cb"] = client_callback(on_error)
        producer = factory.producer(settings)
        self.live[id(producer)] = live
        return producer

    def _retire(self, producer: Producer) -> None:
        """A producer replaced by a new one of its transactional.id: its errors are expected now."""
        self.live.pop(id(producer), [True])[0] = False

    @staticmethod
    def _fenced(error: KafkaError) -> bool:
        """Another worker holds the partition's transactional.id now (else: replace the producer)."""
        return error.fatal() and error.code() in FENCED

    def _fence_legacy(self, key: PositionKey) -> None:
        """init_transactions of the earlier layout's transactional.id: an old worker still writing it stops."""
        producer = factory.producer(self.producer_settings,
                                    {"transactional.id": legacy_transactional_id(self.mirror, self.alias, *key)})
        connect(producer, self.destination_topic(key[0]), self.timeout_s)
        self._call(producer.init_transactions, key, "init")

    def positions(self, keys: list[PositionKey], stable_legacy: bool = False) -> dict[PositionKey, tuple[int, str] | None]:
        """Each partition's committed (next offset, source topic id), or None before its first commit
        (PositionStore.read); the ones found are held from now on, due for a keep-alive."""
        found, legacy, self.stable_writers = self.store.read(keys, stable_legacy)
        self.from_legacy.difference_update(keys)
        self.from_legacy.update(legacy)
        for key, position in found.items():
            if position is not None:
                self.held[key] = position[0]
                self.committed_at.pop(key, None)  # committed who knows when: due for a keep-alive
        return found

    def vanished(self, keys: list[PositionKey]) -> set[PositionKey]:
        return self.store.vanished(keys)

    def keepalive_due(self, owned, interval_s: float) -> dict[PositionKey, int]:
        return keepalive_due(self.held, self.committed_at, owned, self.clock(), interval_s)

    def commit(self, key: PositionKey, next_offset: int, timeout_s: float) -> int:
        """Add the position to the partition's transaction, commit it, open the next one. Returns the position
        committed: `next_offset`, or the pending_commit's (what was handed over after it is re-sent).

        librdkafka's classes of error: retriable (timed out: the same call again, TransactionPending),
        abortable (abort, TransactionAborted: the caller re-sends from the committed position), fatal
        (fenced: ProducerFenced; else the producer is replaced, which aborts its transaction)."""
        if key in self.aborting:
            reason = self.aborting[key]
            self._abort(key, timeout_s)
            raise TransactionAborted(f"{key[0]}[{key[1]}]: {reason}")
        producer = self.producers[key]
        committing = self.committing.get(key)
        if committing is not None:  # see pending_commit: that transaction is finished, not this position's
            next_offset = committing

        if committing is None and self.hung_since is not None and self.sound.get(key, 0.0) < self.hung_since:
            reason = self.aborting[key] = "replaced before its send_offsets_to_transaction: another partition's hung"
            self.broken.add(key)
            self._abort(key, timeout_s)
            raise TransactionAborted(f"{key[0]}[{key[1]}]: {reason}")
        called_at = self.clock()
        try:
            if committing is None:  # after a commit that timed out only commit_transaction is called again
                if key not in self.recorded:
                    self.store.record(producer, key)
                self._send_offsets(producer, self.store.slot(key, next_offset, self._own_id(key)), timeout_s)
                self.sound[key] = self.clock()
                self.committing[key] = next_offset
            producer.commit_transaction(timeout_s)
        except StuckCall:
            self.hung_since = max(self.hung_since or 0.0, called_at)
            self.aborting[key] = f"send_offsets_to_transaction did not return within {timeout_s + STUCK_AFTER_S:.0f}s"
            self.broken.add(key)
            self._abort(key, timeout_s)
            raise TransactionAborted(f"{key[0]}[{key[1]}]: {self.aborting.get(key, 'commit hung')}") from None
        except KafkaException as exc:
            error = exc.args[0]
            where = f"{key[0]}[{key[1]}]: {error.str()}"
            if self._fenced(error):
                raise ProducerFenced(where) from None
            if error.retriable() and not error.txn_requires_abort() and not error.fatal():
                raise TransactionPending(where) from None
            self.aborting[key] = error.str()
            self._abort(key, timeout_s)
            raise TransactionAborted(where) from None
        self.committing.pop(key, None)
        self.held[key] = next_offset
        self.committed_at[key] = self.clock()
        self.recorded.add(key)
        try:
            producer.begin_transaction()
        except KafkaException as exc:  # failed since its commit: the next commit's abort classifies the error
            self.aborting[key] = exc.args[0].str()
        return next_offset

    def commit_many(self, offsets: dict[PositionKey, int], timeout_s: float) -> dict[PositionKey, int | MirrorError]:
        """`commit` of each partition, all at once: {key: the position committed, or what commit raised}."""
        return self._each(list(offsets), lambda key: self.commit(key, offsets[key], timeout_s))

    def _each(self, keys: list[PositionKey], call) -> dict:
        """call(key) for every key, in the pool when there are several: {key: its result, or its MirrorError}.
        Each call touches only its own key's state (a dict entry per key, its own producer)."""
        def run(key):
            try:
                return call(key)
            except MirrorError as exc:
                return exc
        if len(keys) <= 1:
            return {key: run(key) for key in keys}
        return dict(zip(keys, self.pool.map(run, keys)))

    def unfinished(self, key: PositionKey) -> bool:
        """A commit or an abort of the partition's transaction was started and did not finish."""
        return key in self.committing or key in self.aborting

    def pending_commit(self, key: PositionKey) -> int | None:
        """The position of a commit_transaction that timed out: librdkafka allows nothing but the same call
        again (an abort fails with "Conflicting commit_transaction API call"), so it is finished first."""
        return self.committing.get(key)

    def abort(self, key: PositionKey, reason: str = "aborted") -> None:
        """Abort the partition's open transaction (TransactionPending: not finished, tried again on commit)."""
        if key in self.producers:
            self.aborting.setdefault(key, reason)
            self._abort(key, self.timeout_s)

    def _abort(self, key: PositionKey, timeout_s: float) -> None:
        """Finish the abort of `self.aborting[key]` and open the next transaction. A broken producer is
        replaced instead: a new one with the same transactional.id fences it, which aborts its transaction."""
        if key not in self.broken:
            producer = self.producers[key]
            try:
                producer.abort_transaction(timeout_s)
                producer.begin_transaction()
                del self.aborting[key]
                self.committing.pop(key, None)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if self._fenced(error):
                    raise ProducerFenced(f"{key[0]}[{key[1]}]: abort failed: {error.str()}") from None
                if not error.fatal():  # timed out: the abort goes on, and is called again
                    raise TransactionPending(f"{key[0]}[{key[1]}]: abort: {error.str()}") from None
            self.broken.add(key)
        log.warning("exactly-once producer replaced", extra={
            "source": self.alias, "partition": f"{key[0]}[{key[1]}]", "error": self.aborting[key]})
        try:
            replacement = self._new_producer(key)
        except MirrorError as failed:
            raise TransactionPending(str(failed)) from None
        self._retire(self.producers[key])
        self.producers[key] = replacement
        self.sound[key] = self.clock()
        self.committing.pop(key, None)
        self.broken.discard(key)
        del self.aborting[key]

    def _send_offsets(self, producer: Producer, slot: TopicPartition, timeout_s: float) -> None:
        """send_offsets_to_transaction, given up STUCK_AFTER_S past its timeout (StuckCall: the caller replaces
        the producer; see bounded_call). A given-up producer is never called again; its thread drops it once
        the call returns (a late TxnOffsetCommit of the fenced epoch is refused by the broker)."""
        call_within(lambda: producer.send_offsets_to_transaction([slot], self.store.group_metadata, timeout_s),
                    timeout_s + STUCK_AFTER_S, lambda: self.abandoned.append(producer),
                    lambda: self.abandoned.remove(producer))

    def close(self, keys) -> None:
        """Drop the producers of partitions this worker no longer owns (their transactions are done)."""
        for key in list(keys):
            self.held.pop(key, None)
            self.committed_at.pop(key, None)
            self.recorded.discard(key)
            self.aborting.pop(key, None)
            self.committing.pop(key, None)
            self.broken.discard(key)
            self.sound.pop(key, None)
            producer = self.producers.pop(key, None)
            if producer is not None and not any(producer is p for p in self.abandoned):
                try:
                    producer.abort_transaction(min(5.0, self.timeout_s))
                except KafkaException:
                    pass  # fenced or already ended: nothing of ours is left open

    def close_all(self) -> None:
        self.close(list(self.producers))
        self.pool.shutdown(wait=False)
        self.store.close()

    def _call(self, method, key: PositionKey, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                # Not given up when slow (see _send_offsets): an init left running could finish later and fence
                # the producer that replaced it.
                method(self.timeout_s)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise MirrorError(f"exactly-once {what} of {key[0]}[{key[1]}] failed: {error.str()}") from None
                time.sleep(0.2)

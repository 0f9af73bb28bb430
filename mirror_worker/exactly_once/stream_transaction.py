"""Exactly-once for a worker: one transactional producer per source cluster, whatever its partitions.

Each transaction carries the records of every partition that progressed and their positions (one
send_offsets_to_transaction for all of them). Threads, sockets and memory no longer grow with partitions;
the layout of the positions is transactions.py's (group kafka-mirror-eos keyed by destination partition, the
positions topic, keep-alives).

A partition's records are no longer written under a transactional.id of its own, so a new owner cannot fence
the old one by opening that id. What replaces it:

  (W) Before a worker hands over any record of partition P, P's committed position names the worker's
      transactional.id as its writer (the claim: a transaction at assignment, CommitCycle.claim), and it
      names it until the worker commits P's last position as released (RELEASED, when it gives P up).
  (F) A new owner, before it reads P's position for good, fences the writer P's position names, then reads
      the position again waiting for the transactions that carry it (read_committed: require_stable), and
      fences the writer that one names if it differs, until the writer named is fenced, released or itself.

By (W) every process that may hold records of P in an open transaction is named by P's position, committed
(seen by the first read) or in a pending transaction (waited for by the stable read). Fencing it aborts its
open transaction and refuses its later ones, so the stable position read after the fence is the last it will
ever commit, and equals P's records in committed transactions: a restart from it neither skips nor repeats.
A position without a writer is of the per-partition layout: its writer is the partition's own id
(positions.transactional_id), fenced once. Probed on a real broker: tests/probes/README.md.

The price: a fence ends all of a writer's partitions' open transaction, not one. A worker that gives a
partition up in a rebalance releases it (nobody fences it); a crashed or frozen one is fenced by the first new
owner of any of its partitions (one init per writer, not per partition). A live worker fenced after a
rebalance re-opens its id and re-sends what the aborted transaction held (CommitCycle).
"""

from __future__ import annotations

import logging
import time
from threading import Thread

from confluent_kafka import KafkaError, KafkaException, Producer

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import client_callback
from mirror_worker.exactly_once.bounded_call import STUCK_AFTER_S, StuckCall, call_within
from mirror_worker.exactly_once.fencing import connect, fence, init_transactions
from mirror_worker.exactly_once.position_store import PositionStore
from mirror_worker.exactly_once.positions import (
    RELEASED, PositionKey, keepalive_due, legacy_transactional_id, offset_sends, transactional_id,
)
from mirror_worker.exactly_once.transactions import (
    FENCED, RETRY_BACKOFF_MS, ProducerFenced, TransactionAborted, TransactionPending,
)
from mirror_worker.exceptions import MirrorError

log = logging.getLogger("mirror_worker")

# Rounds of (F) before a worker gives up: each fences writers the previous round did not know.
MAX_FENCING_ROUNDS = 10


class StreamTransaction:
    """The transactional producer of one source cluster's partitions, and their positions.

    `producers` is a list of one producer (the hot path's index 0), refilled in place when it is replaced.
    `writer_id` is this worker's transactional.id for the source (positions.worker_transactional_id)."""

    def __init__(self, mirror: str, alias: str, producer_settings: dict, group_settings: dict, destination_topic,
                 topic_id, timeout_s: float, positions_topic: str, owner, writer_id: str,
                 clock=time.monotonic, store: PositionStore | None = None, stopping=lambda: False) -> None:
        self.mirror = mirror
        self.alias = alias
        self.producer_settings = producer_settings
        self.destination_topic = destination_topic  # source topic -> destination topic
        self.timeout_s = timeout_s
        self.positions_topic = positions_topic
        self.owner = owner
        self.writer_id = writer_id
        self.clock = clock
        self.stopping = stopping  # a stop was asked: fencing and inits give up
        self.store = store or PositionStore(mirror, alias, group_settings, destination_topic, topic_id, owner,
                                            timeout_s, positions_topic)
        self.producers: list[Producer] = []
        self.held: dict[PositionKey, int] = {}  # the position each owned partition has on the destination
        self.committed_at: dict[PositionKey, float] = {}  # when this worker last committed it
        self.recorded: set[PositionKey] = set()  # partitions whose positions-topic record this run wrote
        self.committing: dict[PositionKey, int] | None = None  # offsets sent, commit_transaction not finished
        self.aborting: str | None = None  # an abort that did not finish yet: why it was started
        self.broken = False  # the producer is to be replaced (a fatal error, or a call that hung)
        # Another producer of this id fenced it: nothing is sent until the group confirms what this worker owns
        # (reopen, or open at an assignment the group just made).
        self.fenced = False
        self.closed = False
        # Transactions ended (committed, aborted, or their producer replaced), counted: a commit that waited across
        # a change of it would name records no longer in any open transaction (TransactionCommits._commit).
        self.ended = 0
        self.live: dict[int, list[bool]] = {}  # id(producer) -> [still in use], read by its error callback
        # Replaced while their send_offsets_to_transaction still blocks; each is dropped by its own thread once
        # that call returns (never destroyed under it).
        self.abandoned: list[Producer] = []
        self.from_legacy: set[PositionKey] = set()  # positions last read from the earlier layout's group

    # ---------------------------------------------------------------- the producer
    def _start(self) -> None:
        """A producer of this worker's transactional.id with a transaction open; its init fences any earlier
        instance of the id (a predecessor of this static member, or the producer it replaces)."""
        settings = {"retry.backoff.ms": RETRY_BACKOFF_MS, **self.producer_settings,
                    "transactional.id": self.writer_id}
        upstream = settings.get("error_cb")
        live = [True]

        def on_error(err: KafkaError) -> None:
            if live[0] and upstream is not None:  # a replaced one's errors are expected: its successor fenced it
                upstream(err)

        settings["error_cb"] = client_callback(on_error)
        producer = factory.producer(settings)
        self.live[id(producer)] = live
        connect(producer, self.positions_topic, self.timeout_s)
        # A stop interrupts the init only when it replaces no producer: an init given up may still complete on the
        # broker and fence the producer it was to replace, whose transaction the stop's final commit needs.
        stopping = self.stopping if not self.producers else (lambda: False)
        try:
            init_transactions(producer, self.timeout_s, f"{self.writer_id} (source {self.alias})", stopping)
            producer.begin_transaction()
        except KafkaException as exc:
            self._retire(producer)
            raise MirrorError(f"exactly-once begin of {self.writer_id} failed: {exc.args[0].str()}") from None
        except MirrorError:
            self._retire(producer)
            raise
        for old in self.producers:
            self._retire(old)
        if self.producers:
            self.ended += 1  # the replaced producer's transaction is aborted by this one's init
        self.producers[:] = [producer]
        self.broken = self.fenced = False
        self.committing = None
        self.aborting = None

    def _retire(self, producer: Producer) -> None:
        self.live.pop(id(producer), [True])[0] = False

    def reopen(self) -> None:
        """A new producer of the same id (it fences the old one, whose transaction aborts): after a fence
        that a rebalance explains, or to take new settings (fit_batches)."""
        self._start()

    # ---------------------------------------------------------------- assignment
    def open(self, keys: list[PositionKey]) -> dict[PositionKey, tuple[int, str] | None]:
        """Refuse partitions another mirror writes, fence their earlier writers (F), and read where each
        one stands. The caller claims them (W) before it hands over any of their records."""
        if not self.producers or self.broken or self.fenced:
            writers = self._start_beside(keys)
        elif keys:
            writers = self.store.refuse_foreign(keys)
        if not keys:
            return {}
        fenced = {self.writer_id, RELEASED}
        self._fence(writers, fenced)
        found, writers = self.positions(keys)
        migrating = [key for key in keys if key in self.from_legacy]
        if migrating:  # an old worker still writing it stops before its position is read for good
            fence(self.producer_settings,
                  [legacy_transactional_id(self.mirror, self.alias, *key) for key in migrating],
                  self.positions_topic, self.timeout_s, self.stopping)
            legacy, _ = self.positions(migrating, stable_legacy=True)
            found.update(legacy)
        for _ in range(MAX_FENCING_ROUNDS):
            if self._fence(writers, fenced) == 0:
                return found
            found_again, writers = self.positions(keys)
            found.update({key: position for key, position in found_again.items() if key not in self.from_legacy})
        raise MirrorError(f"exactly-once: the writers of the partitions of source {self.alias!r} kept changing while "
                          f"{MAX_FENCING_ROUNDS} rounds fenced them: another process claims them meanwhile")

    def _start_beside(self, keys: list[PositionKey]) -> dict[PositionKey, str | None]:
        """_start, with refuse_foreign(keys) and the positions readers' warm-ups side by side: none needs another
        (the refusal reads with a reader of its own, the warm-ups read nothing that matters), and across a WAN
        each is several round trips (a connection and init_transactions: 1.4 s at 200 ms; a reader's connection,
        coordinator and committed offsets: 1.2-1.45 s; py-spy of a start, stop 62). Another mirror's partition
        is refused before this producer's error, and nothing is fenced before all are done."""
        if not keys:
            self._start()
            return {}
        outcome: dict = {}
        beside = [Thread(target=self._refuse_into, args=(keys, outcome), name=f"refuse-{self.alias}", daemon=True),
                  Thread(target=self.store.warm, name=f"positions-{self.alias}", daemon=True),
                  Thread(target=self.store.warm_legacy, name=f"positions-before-{self.alias}", daemon=True)]
        for thread in beside:
            thread.start()
        try:
            self._start()
        finally:
            for thread in beside:
                thread.join()
            if "error" in outcome:
                raise outcome["error"]
        return outcome["writers"]

    def _refuse_into(self, keys: list[PositionKey], outcome: dict) -> None:
        try:
            outcome["writers"] = self.store.refuse_foreign(keys)
        except BaseException as exc:  # re-raised by the caller's thread
            outcome["error"] = exc

    def _fence(self, writers: dict[PositionKey, str | None], fenced: set[str]) -> int:
        """Fence the writers named that are not fenced yet; how many were."""
        ids = {transactional_id(self.destination_topic(key[0]), key[1]) if writer is None else writer
               for key, writer in writers.items()} - fenced
        if ids:
            fence(self.producer_settings, ids, self.positions_topic, self.timeout_s, self.stopping)
            fenced |= ids
        return len(ids)

    def positions(self, keys: list[PositionKey], stable_legacy: bool = False):
        """({key: committed (next offset, source topic id) or None}, {key: the writer each names}); the
        positions found are held from now on, due for a keep-alive."""
        found, legacy, writers = self.store.read(keys, stable_legacy)
        self.from_legacy.difference_update(keys)
        self.from_legacy.update(legacy)
        for key, position in found.items():
            if position is not None:
                self.held[key] = position[0]
                self.committed_at.pop(key, None)  # committed who knows when: due for a keep-alive
        return found, writers

    def vanished(self, keys: list[PositionKey]) -> set[PositionKey]:
        return self.store.vanished(keys)

    def keepalive_due(self, owned, interval_s: float) -> dict[PositionKey, int]:
        if self.committing is not None:
            return {}
        return keepalive_due(self.held, self.committed_at, owned, self.clock(), interval_s)

    # ---------------------------------------------------------------- commit and abort
    def pending_commit(self) -> dict[PositionKey, int] | None:
        """The positions of a commit_transaction that timed out: librdkafka allows nothing but the same call
        again (an abort fails with "Conflicting commit_transaction API call"), so it is finished first."""
        return self.committing

    def unfinished(self) -> bool:
        """A commit or an abort of the open transaction was started and did not finish."""
        return self.committing is not None or self.aborting is not None

    def commit(self, positions: dict[PositionKey, int], released: set[PositionKey],
               timeout_s: float) -> dict[PositionKey, int]:
        """Add the positions to the transaction (naming this worker as their writer, or released), commit it,
        open the next one. Returns the positions committed: `positions`, or the pending commit's.

        librdkafka's classes of error: retriable (timed out: the same call again, TransactionPending),
        abortable (abort, TransactionAborted: every partition is re-sent from its committed position), fatal
        (fenced: ProducerFenced; else the producer is replaced, which aborts its transaction)."""
        self._not_fenced()
        if self.aborting is not None:
            reason = self.aborting
            self._abort(timeout_s)
            raise TransactionAborted(reason)
        producer = self.producers[0]
        try:
            if self.committing is None:  # after a commit that timed out only commit_transaction is called again
                for key in positions:
                    if key not in self.recorded:
                        self.store.record(producer, key)
                slots = [self.store.slot(key, offset, RELEASED if key in released else self.writer_id)
                         for key, offset in positions.items()]
                self._send_offsets(producer, slots, timeout_s)
                self.committing = dict(positions)
            producer.commit_transaction(timeout_s)
            self.ended += 1
        except StuckCall:
            self.aborting = f"send_offsets_to_transaction did not return within {timeout_s + STUCK_AFTER_S:.0f}s"
            self.broken = True
            reason = self.aborting
            self._abort(timeout_s)
            raise TransactionAborted(reason) from None
        except KafkaException as exc:
            error = exc.args[0]
            if _fenced(error):
                self.fenced = True
                raise ProducerFenced(f"{self.writer_id}: {error.str()}") from None
            if error.retriable() and not error.txn_requires_abort() and not error.fatal():
                raise TransactionPending(f"source {self.alias}: {error.str()}") from None
            self.aborting = error.str()
            self.broken = self.broken or error.fatal()
            self._abort(timeout_s)
            raise TransactionAborted(error.str()) from None
        done, self.committing = self.committing, None
        now = self.clock()
        for key, offset in done.items():
            if key in released:
                self.forget([key])
                continue
            self.held[key] = offset
            self.committed_at[key] = now
            self.recorded.add(key)
        try:
            producer.begin_transaction()
        except KafkaException as exc:  # failed since its commit: the next commit's abort classifies the error
            self.aborting = exc.args[0].str()
        return done

    def abort(self, reason: str = "aborted") -> None:
        """Abort the open transaction (TransactionPending: not finished, tried again on commit)."""
        self._not_fenced()
        if self.aborting is None:
            self.aborting = reason
        self._abort(self.timeout_s)

    def _not_fenced(self) -> None:
        if self.fenced:
            raise ProducerFenced(f"{self.writer_id}: fenced, not re-opened yet")

    def _abort(self, timeout_s: float) -> None:
        """Finish the abort of `self.aborting` and open the next transaction. A broken producer is replaced
        instead: a new one with the same transactional.id fences it, which aborts its transaction."""
        if not self.broken:
            producer = self.producers[0]
            try:
                producer.abort_transaction(timeout_s)
                self.ended += 1
                producer.begin_transaction()
                self.aborting = None
                self.committing = None
                return
            except KafkaException as exc:
                error = exc.args[0]
                if _fenced(error):
                    self.fenced = True
                    raise ProducerFenced(f"{self.writer_id}: abort failed: {error.str()}") from None
                if not error.fatal():  # timed out: the abort goes on, and is called again
                    raise TransactionPending(f"source {self.alias}: abort: {error.str()}") from None
            self.broken = True
        log.warning("exactly-once producer replaced", extra={
            "source": self.alias, "writer": self.writer_id, "error": self.aborting})
        try:
            self._start()
        except MirrorError as failed:
            raise TransactionPending(str(failed)) from None

    def _send_offsets(self, producer: Producer, slots: list, timeout_s: float) -> None:
        """send_offsets_to_transaction, in sends the broker can write (positions.offset_sends), each given up
        STUCK_AFTER_S past its timeout (StuckCall: the caller replaces the producer; see bounded_call). A
        given-up producer is never called again; its thread drops it once the call returns (a late
        TxnOffsetCommit of the fenced epoch is refused by the broker). A send that fails leaves the
        transaction to the caller's handling of its error, as one send did: all of them are made again."""
        for send in offset_sends(slots):
            call_within(lambda send=send: producer.send_offsets_to_transaction(send, self.store.group_metadata,
                                                                               timeout_s),
                        timeout_s + STUCK_AFTER_S, lambda: self.abandoned.append(producer),
                        lambda: self.abandoned.remove(producer))

    # ---------------------------------------------------------------- partitions leaving, shutdown
    def forget(self, keys) -> None:
        """Partitions this worker no longer owns: their positions are their next owner's."""
        for key in list(keys):
            self.held.pop(key, None)
            self.committed_at.pop(key, None)
            self.recorded.discard(key)

    def close_all(self) -> None:
        self.closed = True
        for producer in self.producers:
            if not any(producer is p for p in self.abandoned) and self.committing is None:
                try:
                    producer.abort_transaction(min(5.0, self.timeout_s))
                except KafkaException:
                    pass  # fenced or already ended: nothing of ours is left open
        self.store.close()


def _fenced(error: KafkaError) -> bool:
    """Another producer holds the transactional.id now (else: replace the producer)."""
    return error.fatal() and error.code() in FENCED

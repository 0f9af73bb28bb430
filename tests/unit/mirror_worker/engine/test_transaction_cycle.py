"""TransactionCommits: each source's one transaction, committed with every position it carries, retried while
the destination does not answer, and what an abort or a fence takes with it re-sent (engine/transaction_cycle.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.engine.run_state import RunState
from mirror_worker.exactly_once.transactions import ProducerFenced, TransactionAborted, TransactionPending
from mirror_worker.metrics import MirrorMetrics

KEYS = [("t", p) for p in range(6)]


class Destination:
    """StreamTransaction whose commits answer from `script` in turn (a result, or an exception to raise)."""

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.calls: list[tuple[dict, set]] = []
        self.closed = False
        self.reopened = 0
        self.ended = 0  # transactions ended (StreamTransaction.ended)

    def commit(self, positions: dict, released: set, timeout_s: float) -> dict:
        self.calls.append((dict(positions), set(released)))
        answer = self.script.pop(0) if self.script else None
        if isinstance(answer, Exception):
            raise answer
        return dict(positions)

    def abort(self, reason: str) -> None:
        pass

    def reopen(self) -> None:
        self.reopened += 1

    def pending_commit(self):
        return None

    def unfinished(self) -> bool:
        return False

    def keepalive_due(self, owned, interval_s: float) -> dict:
        return {}


class Consumer:
    def __init__(self, member: bool) -> None:
        self.member = member
        self.commits: list = []

    def position(self, partitions):
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001) for tp in partitions]

    def commit(self, offsets=None, asynchronous=True) -> None:
        from confluent_kafka import KafkaError, KafkaException
        if not self.member:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        self.commits.append(offsets)


def _cycle(transactions: Destination, moved=(0, 1, 2), member: bool = True):
    """Six partitions committed at 5; `moved` of them handed over up to 10 since."""
    ledger = OffsetLedger({KEYS[p]: 10 for p in moved}, dict.fromkeys(KEYS, 5))
    stream = SimpleNamespace(alias="src", assigned=set(KEYS), ledger=ledger, producers=[object()], pending={},
                             transactions=transactions, consumer=Consumer(member), topic_ids={}, rebalances=0,
                             interrupted=False, stash=[])
    state = RunState(30.0, time.monotonic)
    cycle = CommitCycle([stream], lambda: [], MirrorMetrics("m"), {"mirror": "m"}, state, time.monotonic,
                        exactly_once=True)
    return cycle, stream, state


def test_one_transaction_carries_every_partition_that_moved_and_is_retried_while_pending():
    destination = Destination(TransactionPending("timed out"), TransactionPending("timed out"), None)
    cycle, stream, _ = _cycle(destination)
    outcome = cycle.checkpoint_and_commit(only=None, source_group=False)
    moved = {KEYS[p]: 10 for p in (0, 1, 2)}
    assert [positions for positions, _ in destination.calls] == [moved, moved, moved]  # one call per attempt
    assert outcome.complete and outcome.aborted == []
    assert stream.ledger.committed == {**dict.fromkeys(KEYS, 5), **moved}


def test_an_aborted_transaction_rewinds_every_partition_it_carried_and_no_other():
    cycle, stream, _ = _cycle(Destination(TransactionAborted("hung")))
    outcome = cycle.checkpoint_and_commit(only=None, source_group=False)
    assert not outcome.complete
    assert sorted(key for _, key, _ in outcome.aborted) == [KEYS[0], KEYS[1], KEYS[2]]
    assert stream.ledger.committed == dict.fromkeys(KEYS, 5)


def test_a_revoke_releases_its_partitions_in_the_same_transaction_as_the_others_progress():
    destination = Destination(None)
    cycle, stream, _ = _cycle(destination, moved=(0,))
    cycle.checkpoint_and_commit(only=(stream, {KEYS[4]}), source_group=False)
    [(positions, released)] = destination.calls
    assert positions == {KEYS[0]: 10, KEYS[4]: 5}  # the revoked one is named released at its position
    assert released == {KEYS[4]}


def test_a_claim_commits_the_new_positions_before_any_record_of_theirs():
    destination = Destination(None)
    cycle, stream, _ = _cycle(destination, moved=())
    outcome = cycle.claim(stream, {("u", 0): 42})
    assert outcome.complete
    assert destination.calls == [({("u", 0): 42}, set())]


def test_fenced_while_the_source_group_confirms_the_membership_reopens_and_re_sends():
    destination = Destination(ProducerFenced("fenced"))
    cycle, stream, state = _cycle(destination, member=True)
    outcome = cycle.checkpoint_and_commit(only=None, source_group=False)
    assert destination.reopened == 1 and state.fatal is None
    assert sorted(key for _, key, _ in outcome.aborted) == [KEYS[0], KEYS[1], KEYS[2]]
    assert stream.consumer.commits  # the membership check: a commit of the owned positions


def test_fenced_while_the_group_no_longer_counts_this_worker_stops_it_without_sending_more():
    destination = Destination(ProducerFenced("fenced"))
    cycle, stream, state = _cycle(destination, member=False)
    cycle.checkpoint_and_commit(only=(stream, set()), source_group=False)  # from a callback: no wait
    assert destination.reopened == 0
    assert "fenced by another worker" in state.fatal
    cycle.checkpoint_and_commit(only=None, source_group=False)
    assert len(destination.calls) == 1  # nothing more is sent once stopping


def test_a_record_failed_in_the_transaction_aborts_it_and_commits_no_position_before_the_rewind():
    """The ledger still counts the aborted records as handed over until the caller rewinds their partitions:
    a position committed in the same cycle would skip them."""
    destination = Destination()
    aborted: list[str] = []
    destination.abort = aborted.append
    cycle, stream, _ = _cycle(destination)
    stream.ledger.halt(KEYS[1], 7, "not delivered", resend=True)
    outcome = cycle.checkpoint_and_commit(only=None, source_group=False)
    assert aborted == ["not delivered"] and destination.calls == []
    assert sorted(key for _, key, _ in outcome.aborted) == [KEYS[0], KEYS[1], KEYS[2]]


def test_records_of_a_transaction_left_open_are_counted_when_a_later_cycle_commits_them():
    """A commit still pending at its bound leaves the transaction open: its records' counts wait for the cycle
    that commits them (they were dropped, and mirror_records_produced undercounted)."""
    destination = Destination(*[TransactionPending("timed out")] * 50)
    cycle, stream, _ = _cycle(destination)
    cycle.state = cycle.transactions.state = RunState(0.3, time.monotonic)  # a callback's bound, short
    stream.pending = {"t": [3, 300, 1]}
    outcome = cycle.checkpoint_and_commit(only=(stream, set()), source_group=False)
    assert not outcome.complete and stream.pending == {"t": [3, 300, 1]}


class _Clock:
    """Time that moves 1 s each time it is read: a wait passes PAUSE_AFTER_S at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_transaction_aborted_while_its_commit_waited_is_not_committed_with_the_positions_of_its_records():
    """A commit that waits on the destination polls the consumers (the group must keep this worker); a rebalance
    callback served by that poll (partitions lost) aborted the open transaction. Its records are gone: a retry
    that committed their positions in the next, empty transaction skipped them for good (the next owner, or this
    worker once the partitions came back, started from those positions)."""
    destination = Destination(TransactionPending("timed out"), None)

    def abort(_reason: str) -> None:
        destination.ended += 1

    cycle, stream, _ = _cycle(destination)
    clock = _Clock()
    cycle.transactions.clock = clock
    cycle.transactions.hold_consumers = lambda: abort("partitions lost with records in the open transaction")
    cycle.transactions.release_consumers = lambda: None
    outcome = cycle.checkpoint_and_commit(only=None, from_loop=True, source_group=False)
    assert len(destination.calls) == 1, "the aborted records' positions were committed by a retry"
    assert not outcome.complete
    assert sorted(key for _, key, _ in outcome.aborted) == [KEYS[0], KEYS[1], KEYS[2]]  # re-sent
    assert stream.ledger.committed == dict.fromkeys(KEYS, 5)

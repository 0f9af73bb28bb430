"""CommitCycle's exactly-once commits while the destination does not answer: retried together, not one by one.

After a destination broker's kill -9, send_offsets_to_transaction may block past its timeout on every partition
(librdkafka issues 5456/5511) and each blocked call costs its bound (~15 s) before the producer is replaced. The
retries used to go one partition at a time, so a cycle took that bound once per partition (90 s for six, seen in
tests/integration/test_broker_faults.py::test_destination_leader_killed_mid_stream[exactly-once]).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.run_state import RunState
from mirror_worker.exactly_once.transactions import TransactionAborted, TransactionPending
from mirror_worker.metrics import MirrorMetrics

KEYS = [("t", p) for p in range(6)]


class SilentDestination:
    """PartitionTransactions whose commits stay pending for `pending_rounds` calls; records each call's keys."""

    def __init__(self, pending_rounds: int, aborted: set | None = None) -> None:
        self.pending_rounds = pending_rounds
        self.aborted = aborted or set()
        self.rounds: list[list] = []

    def commit_many(self, offsets: dict, timeout_s: float) -> dict:
        self.rounds.append(sorted(offsets))
        if len(self.rounds) <= self.pending_rounds:
            return {key: TransactionPending(f"{key}: timed out") for key in offsets}
        return {key: TransactionAborted(f"{key}: hung") if key in self.aborted else offset
                for key, offset in offsets.items()}

    def commit(self, key, offset, timeout_s):  # the one-partition call: not expected from a commit cycle
        raise AssertionError(f"commit of {key} alone")

    def pending_commit(self, key):
        return None

    def unfinished(self, key) -> bool:
        return False


class Ledger:
    def __init__(self, offsets: dict) -> None:
        self.offsets = offsets
        self.committed: dict = {}
        self.next_offsets: dict = {}

    def checkpoint(self) -> dict:
        return dict(self.offsets)

    def committable(self, checkpoint: dict) -> dict:
        return checkpoint

    def mark_committed(self, offsets: dict) -> None:
        self.committed.update(offsets)


def _cycle(transactions: SilentDestination) -> tuple[CommitCycle, SimpleNamespace]:
    stream = SimpleNamespace(alias="src", assigned=set(KEYS), ledger=Ledger({key: 10 for key in KEYS}),
                             producers=dict.fromkeys(KEYS, object()), pending={}, transactions=transactions)
    cycle = CommitCycle([stream], lambda: [], MirrorMetrics("m"), {"mirror": "m"}, RunState(30.0, time.monotonic),
                        time.monotonic, exactly_once=True)
    return cycle, stream


def test_pending_commits_are_retried_together_until_they_finish():
    destination = SilentDestination(pending_rounds=2)
    cycle, stream = _cycle(destination)
    outcome = cycle.checkpoint_and_commit(only=(stream, set(KEYS)), source_group=False)
    assert destination.rounds == [KEYS, KEYS, KEYS]  # never one partition after another
    assert outcome.complete and outcome.aborted == []
    assert stream.ledger.committed == {key: 10 for key in KEYS}


def test_an_aborted_partition_is_rewound_and_the_others_commit():
    destination = SilentDestination(pending_rounds=1, aborted={KEYS[2]})
    cycle, stream = _cycle(destination)
    outcome = cycle.checkpoint_and_commit(only=(stream, set(KEYS)), source_group=False)
    assert destination.rounds == [KEYS, KEYS]
    assert not outcome.complete and [key for _stream, key, _why in outcome.aborted] == [KEYS[2]]
    assert stream.ledger.committed == {key: 10 for key in KEYS if key != KEYS[2]}


def test_a_partition_that_leaves_meanwhile_is_not_tried_again():
    destination = SilentDestination(pending_rounds=1)
    cycle, stream = _cycle(destination)
    original = destination.commit_many

    def losing_one(offsets, timeout_s):
        stream.producers.pop(KEYS[0], None)  # a rebalance run while the consumers were held
        return original(offsets, timeout_s)

    destination.commit_many = losing_one
    outcome = cycle.checkpoint_and_commit(only=(stream, set(KEYS)), source_group=False)
    assert destination.rounds == [KEYS, KEYS[1:]]
    assert not outcome.complete
    assert stream.ledger.committed == {key: 10 for key in KEYS[1:]}

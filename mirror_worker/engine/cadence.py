"""Exactly-once: when the main loop commits its next transactions.

A record becomes visible to `read_committed` readers at the end of the first commit cycle that starts after
it was handed over, and the loop consumes nothing while a cycle runs. So an ordinary rate is served by
cycles that start every `interval` from the previous cycle's *start*: a record waits at most one interval
plus one cycle, where counting from the cycle's end added the cycle's duration once more (the p99 at
10,000 msgs/s was the interval plus two cycles: ~120 ms at 50 ms).
"""

from __future__ import annotations

from collections.abc import Hashable

# While the worker is behind (see Backlog): the next transactions commit no sooner
# than this many times the last cycle's duration after it, so that commits take at most about a tenth of the
# loop's time while it catches up (each cycle ends with a flush that drains the pipeline, and each producer's
# next transaction starts with a round trip). Measured on the local stack, 1M x 1 KiB, 3 alternating pairs:
# 4 -> 8 took exactly-once from 137-145k to 152-171k msgs/s (cycles 18 % -> 9 % of the copy); 16 was not
# clearly better than 8. Not otherwise: a slow cycle at an ordinary rate would make the next records later still.
TRANSACTION_SHARE_FACTOR = 10.0
# Between two cycles the loop consumes for at least this share of the interval: a destination slower than the
# interval never has the loop commit back to back with nothing handed over between cycles.
MIN_CONSUME_SHARE = 0.2


def next_cycle_at(started: float, ended: float, interval_s: float, behind: bool,
                  limit_s: float = float("inf")) -> float:
    """When the next exactly-once cycle starts, after one that ran from `started` to `ended`; while behind, no
    later than `limit_s` after it ended (the transaction stays open meanwhile)."""
    took = ended - started
    if behind:
        return ended + max(interval_s, min(limit_s, TRANSACTION_SHARE_FACTOR * took))
    return max(started + interval_s, ended + MIN_CONSUME_SHARE * interval_s)


FULL, TRANSACTIONS = "full", "transactions"


class Cadence:
    """When the main loop commits. At-least-once: every commit interval (FULL). Exactly-once: a transaction
    cycle every interval, spaced by `next_cycle_at`; the first cycle due after each commit interval also commits
    the source group and the offset syncs (FULL), the others only the transactions (TRANSACTIONS).

    Exactly-once, the commit interval no longer starts a cycle of its own: it did, 30 ms after the last one,
    whatever the catch-up spacing said, so cycles came at least every commit interval (5 s). At 5,000 partitions
    a commit took ~6 s (a marker into every partition), and commits were more than half of the copy.
    `catch_up_limit_s` bounds the spacing: a transaction open that long is not yet near librdkafka's
    transaction.timeout.ms (60 s), and a partition's committed offset moves before the stall watch's timeout.
    """

    def __init__(self, now: float, commit_interval_s: float, transaction_interval_s: float | None,
                 catch_up_limit_s: float) -> None:
        self.commit_interval_s = commit_interval_s
        self.transaction_interval_s = transaction_interval_s
        self.catch_up_limit_s = catch_up_limit_s
        self.next_commit = now + commit_interval_s
        self.next_transactions = now + (transaction_interval_s or 0.0)
        self.spaced = False  # the next cycle was spaced for catch-up

    def due(self, now: float) -> str | None:
        if self.transaction_interval_s is None:
            return FULL if now >= self.next_commit else None
        if now < self.next_transactions:
            return None
        return FULL if now >= self.next_commit else TRANSACTIONS

    def done(self, kind: str, started: float, ended: float, behind: bool) -> None:
        """A cycle of `kind` ran from `started` to `ended`; `behind`: Backlog.cycle() (exactly-once)."""
        if kind == FULL:
            self.next_commit = ended + self.commit_interval_s
        if self.transaction_interval_s is not None:
            self.next_transactions = next_cycle_at(started, ended, self.transaction_interval_s, behind,
                                                   self.catch_up_limit_s)
            self.spaced = behind

    def caught_up(self, now: float) -> None:
        """The loop caught up during a catch-up window (no more than a batch waits in the sources,
        stalls.waiting_more_than): the next cycle comes now, not at the window's end. At 1,000 partitions a live
        stream after a backlog waited up to 15 s for it (p50 16.7 s)."""
        if self.spaced:
            self.next_transactions = min(self.next_transactions, now)
            self.spaced = False

    def wait(self, now: float, timeout: float) -> float:
        """How long the loop may wait for records now: exactly-once, no later than the next cycle."""
        if self.transaction_interval_s is None:
            return timeout
        return min(timeout, max(0.0, self.next_transactions - now))


class Backlog:
    """Whether the loop is behind its sources, for `next_cycle_at`: some source's batches all came full since
    the last cycle, i.e. the loop never emptied what that consumer held, or the loop paused the consumers
    for the destination since then (`paused`).

    Not "a batch came full": the loop consumes nothing during a cycle, so the first batch after a cycle comes
    full whenever the cycle lasted longer than a batch takes to arrive, and a cycle counted as behind spaced
    the next one at TRANSACTION_SHARE_FACTOR times its duration, long enough for the next batch to come full
    again. On the real stack, after a backlog, at 500 msgs/s and batches of 10: 36 of 53 cycles were spaced
    for catch-up (tests/integration/test_exactly_once_cadence.py); 1 of 190 counted this way.
    """

    def __init__(self) -> None:
        self.full: dict[Hashable, bool] = {}  # source -> every batch since the last cycle came full
        self.waited = False  # the consumers were paused for the destination since the last cycle

    def took(self, source: Hashable, records: int, batch_size: int) -> None:
        """A consume round of `source` returned `records` (0: it held nothing)."""
        self.full[source] = self.full.get(source, True) and records >= batch_size

    def held_back(self, source: Hashable) -> None:
        """A round of `source` that consumed nothing because the producers are full: not caught up."""
        self.full.setdefault(source, True)

    def paused(self) -> None:
        """The loop waited so long for room on the producers that it paused the consumers (backpressure.py).

        Behind whatever the batches say next: librdkafka drops a paused partition's prefetch, so the batches
        after a pause come partial however much the source holds. Read as "caught up", exactly-once at 5,000
        partitions committed back to back (37 of 54 cycles, ~0.4 s each) while the destination could not keep up.
        """
        self.waited = True

    def clear(self) -> None:
        """The loop caught up (Cadence.caught_up): what the rounds before said no longer holds."""
        self.full.clear()
        self.waited = False

    def cycle(self) -> bool:
        """At a cycle: whether the loop is behind; counting starts again."""
        behind = self.waited or any(self.full.values())
        self.full.clear()
        self.waited = False
        return behind

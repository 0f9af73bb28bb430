"""Exactly-once: when the main loop commits its next transactions.

A record becomes visible to `read_committed` readers at the end of the first commit cycle that starts after
it was handed over, and the loop consumes nothing while a cycle runs. So an ordinary rate is served by
cycles that start every `interval` from the previous cycle's *start*: a record waits at most one interval
plus one cycle, where counting from the cycle's end added the cycle's duration once more (the p99 at
10,000 msgs/s was the interval plus two cycles: ~120 ms at 50 ms).
"""

from __future__ import annotations

# While the worker is behind (a batch since the last cycle came full): the next transactions commit no sooner
# than this many times the last cycle's duration after it, so that commits take at most about a tenth of the
# loop's time while it catches up (each cycle ends with a flush that drains the pipeline, and each producer's
# next transaction starts with a round trip). Measured on the local stack, 1M x 1 KiB, 3 alternating pairs:
# 4 -> 8 took exactly-once from 137-145k to 152-171k msgs/s (cycles 18 % -> 9 % of the copy); 16 was not
# clearly better than 8. Not otherwise: a slow cycle at an ordinary rate would make the next records later still.
TRANSACTION_SHARE_FACTOR = 10.0
# Between two cycles the loop consumes for at least this share of the interval: a destination slower than the
# interval never has the loop commit back to back with nothing handed over between cycles.
MIN_CONSUME_SHARE = 0.2


def next_cycle_at(started: float, ended: float, interval_s: float, behind: bool) -> float:
    """When the next exactly-once cycle starts, after one that ran from `started` to `ended`."""
    took = ended - started
    if behind:
        return ended + max(interval_s, TRANSACTION_SHARE_FACTOR * took)
    return max(started + interval_s, ended + MIN_CONSUME_SHARE * interval_s)

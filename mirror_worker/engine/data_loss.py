"""Where a partition may resume, and when resuming would silently skip records (pure, broker-free).

A mirror's position (committed offset, with the source topic's id stored in the commit's metadata) is
checked against what the source still holds:

    log:        [ deleted by retention ][ low ............... high )
    position p:        ^ p < low  -> TRUNCATED: records p..low-1 are gone before they were mirrored
                                             p > high -> BEYOND_END: the log was replaced (recreated topic)
    topic id of the commit != the topic's id now -> RECREATED, whatever the offsets say

The default reaction is to halt the partition and say so; resetting to the earliest record still
there is opt-in (`on_data_loss: reset`), and is logged with the skipped range. Pure: its inputs are read
by `groups.committed_positions` and `topics.topic_ids`, for the worker and the Spark catch-up alike.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    RESUME = "resume"          # the position is inside the log: no record is skipped
    FRESH = "fresh"            # no position yet: start where the reset policy says
    TRUNCATED = "truncated"
    BEYOND_END = "beyond_end"
    RECREATED = "recreated"


LOSS = (Verdict.TRUNCATED, Verdict.BEYOND_END, Verdict.RECREATED)


@dataclass(frozen=True)
class StartDecision:
    verdict: Verdict
    offset: int        # where to start fetching (for a loss: the earliest record still there)
    reason: str = ""

    @property
    def lost(self) -> bool:
        return self.verdict in LOSS


def decide_start(
    position: int | None,
    position_topic_id: str | None,
    topic_id: str | None,
    low: int,
    high: int,
    reset_to_earliest: bool,
    where: str,
) -> StartDecision:
    """Where to resume `where` (a "topic[partition]" label) given its position and the log's bounds."""
    if position is None:
        return StartDecision(Verdict.FRESH, low if reset_to_earliest else high)
    if position_topic_id and topic_id and position_topic_id != topic_id:
        return StartDecision(Verdict.RECREATED, low, (
            f"{where}: the source topic was deleted and recreated (topic id {position_topic_id} -> {topic_id}); "
            f"the mirror's position {position} belongs to the old topic"))
    if position < low:
        return StartDecision(Verdict.TRUNCATED, low, (
            f"{where}: records {position}..{low - 1} were deleted from the source (retention) before they were "
            f"mirrored; earliest offset now {low}"))
    if position > high:
        return StartDecision(Verdict.BEYOND_END, low, (
            f"{where}: the mirror's position {position} is past the source's end {high}: the topic was "
            "recreated or its log replaced"))
    return StartDecision(Verdict.RESUME, position)


def resets_to_earliest(reset_policy: str) -> bool:
    """Whether auto.offset.reset starts a partition without a position at the earliest record."""
    return reset_policy in ("earliest", "smallest", "beginning")

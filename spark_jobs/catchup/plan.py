"""Catch-up planning (pure, broker-free): where each partition starts, decided by the worker's own
`decide_start`, the ranges to copy, and the data losses found on the way.

Every start goes through `decide_start`: the mirror group's committed offset with the topic id its
commit carries, or a start a person gave (`--from-offsets`, `--from-timestamp`: no topic id to compare).
A loss (truncated, beyond the end, recreated) halts the partition by default: no range, nothing
committed. With `on_data_loss: reset` the range starts at the earliest record still there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mirror_worker.batch_api import StartDecision, Verdict, decide_start
from spark_jobs.common.job_config import JobInputError, epoch_ms

Range = tuple[str, int, int, int]  # (topic, partition, start, end)
Position = tuple[int, str | None]  # (offset, topic id the commit carries, if any)


@dataclass(frozen=True)
class Loss:
    """A partition whose start would skip records the mirror never copied."""

    topic: str
    partition: int
    position: int
    low: int
    decision: StartDecision
    halted: bool  # on_data_loss=halt: not copied, group offset left where it is

    def line(self) -> str:
        """The one-line report (stderr and log)."""
        where = f"{self.topic}[{self.partition}]"
        if self.halted:
            action = f"{where} not copied, its group offset not moved (on_data_loss=halt)"
        else:
            action = f"copying {where} from offset {self.decision.offset} (on_data_loss=reset)"
        return f"data loss: {self.decision.reason}; {action}"

    def summary(self) -> dict:
        truncated = self.decision.verdict is Verdict.TRUNCATED
        return {
            "topic": self.topic, "partition": self.partition, "kind": self.decision.verdict.value,
            "position": self.position, "earliest": self.low,
            "lost": [self.position, self.low - 1] if truncated else None,  # inclusive; unknown for an old log
            "action": "halt" if self.halted else "reset", "reason": self.decision.reason,
        }


@dataclass(frozen=True)
class Plan:
    ranges: list[Range]   # what to copy (and commit); halted partitions have none
    losses: list[Loss]

    @property
    def halted(self) -> list[Loss]:
        return [loss for loss in self.losses if loss.halted]


def plan_ranges(
    watermarks: dict[str, dict[int, tuple[int, int]]],
    positions: dict[tuple[str, int], Position],
    topic_ids: dict[str, str],
    reset_to_earliest: bool,
    halt_on_loss: bool,
    fresh_start: Callable[[str, int, int, int], int] | None = None,
) -> Plan:
    """Per partition, [decide_start's offset, end); a partition without a position starts as the worker
    would: its auto.offset.reset (`reset_to_earliest`), or for a failback mirror `fresh_start(topic,
    partition, low, end)` (mirror_worker.dr.failback). `watermarks` are (low, end) as the worker's consumer
    sees them: the end is the last stable offset read_committed."""
    ranges, losses = [], []
    for topic, partitions in sorted(watermarks.items()):
        for partition, (low, high) in sorted(partitions.items()):
            position, position_topic_id = positions.get((topic, partition)) or (None, None)
            decision = decide_start(position, position_topic_id, topic_ids.get(topic), low, high,
                                    reset_to_earliest, f"{topic}[{partition}]")
            if decision.verdict is Verdict.FRESH and fresh_start is not None:
                decision = StartDecision(Verdict.FRESH, fresh_start(topic, partition, low, high))
            if decision.lost:
                losses.append(Loss(topic, partition, position, low, decision, halt_on_loss))
                if halt_on_loss:
                    continue
            ranges.append((topic, partition, decision.offset, high))
    return Plan(ranges, losses)


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from `1700000000000` or an ISO-8601 time (UTC unless it says otherwise)."""
    try:
        return epoch_ms(text)
    except ValueError:
        raise JobInputError(f"bad timestamp {text!r}: use epoch milliseconds or ISO-8601") from None


def parse_offsets(text: str) -> dict[tuple[str, int], int]:
    """`topic:partition:offset,...` into {(topic, partition): offset}."""
    result = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        pieces = item.rsplit(":", 2)
        if len(pieces) != 3 or not pieces[1].isdigit() or not pieces[2].isdigit():
            raise JobInputError(f"bad --from-offsets entry {item!r}: expected topic:partition:offset")
        result[(pieces[0], int(pieces[1]))] = int(pieces[2])
    if not result:
        raise JobInputError("--from-offsets is empty")
    return result

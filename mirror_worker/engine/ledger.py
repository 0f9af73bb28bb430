"""Which source offsets may be committed: the at-least-once bookkeeping, pure and broker-free.

Invariant: an offset N is committed for a partition only when every record of that partition below N
was handed to the producer *and* the producer reported all of them delivered (a completed flush with
no delivery error for that partition since the records were handed over).

    consumed:   0 1 2 3 4 5 6 7        next_offset = 8   (handed to the producer)
    checkpoint:           ^ taken when next_offset was 5, then the producer flushed
    committable = 5  ->  records 0..4 are on the destination; 5..7 may not be yet

A delivery error at offset F halts the partition: nothing at or after F is ever committed by this run,
so a restart re-mirrors from F and nothing is skipped. A record that was only not delivered in time (the
destination unreachable past the producer's timeout) holds its partition the same way, for a resend: once
a flush completed, the worker rewinds the partition to its committed offset and mirrors it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartitionKey = tuple[str, int]


@dataclass
class Halt:
    offset: int
    reason: str
    resend: bool = False  # not delivered in time: rewound and mirrored again, not halted for good


@dataclass
class OffsetLedger:
    next_offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)
    committed: dict[TopicPartitionKey, int] = field(default_factory=dict)
    halted: dict[TopicPartitionKey, Halt] = field(default_factory=dict)

    def handed_over(self, key: TopicPartitionKey, offset: int) -> None:
        """The record at `offset` was given to the producer."""
        self.next_offsets[key] = offset + 1

    def position(self, key: TopicPartitionKey) -> int | None:
        """Where the partition stands: the next offset to hand over, else its committed offset, else None."""
        offset = self.next_offsets.get(key)
        return self.committed.get(key) if offset is None else offset

    def seek(self, key: TopicPartitionKey, offset: int) -> None:
        """The partition resumes at `offset` (records before it are skipped, e.g. lost to retention)."""
        self.next_offsets[key] = offset

    def rewind(self, key: TopicPartitionKey) -> int:
        """Drop what was handed over since the last commit (and a hold for a resend); returns the committed
        offset to re-send from."""
        self.next_offsets.pop(key, None)
        halt = self.halted.get(key)
        if halt is not None and halt.resend:
            del self.halted[key]
        return self.committed[key]

    def start(self, key: TopicPartitionKey, committed: int) -> None:
        """A partition (re)assigned to this worker starts afresh at `committed`."""
        self.forget([key])
        self.mark_committed({key: committed})

    def checkpoint(self) -> dict[TopicPartitionKey, int]:
        """Positions to confirm once the producer has flushed everything handed over so far."""
        return dict(self.next_offsets)

    def step_over(self, positions: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The consumer's positions of partitions whose every returned record was handed over.

        A position past the next offset of the ledger passed over offsets that hold no record for this
        consumer (a transaction's commit or abort marker, aborted records under read_committed): nothing
        is left to deliver below it. Halted partitions never move. Returns the positions taken.
        """
        taken = {}
        for key, position in positions.items():
            if key in self.halted:
                continue
            if position > self.next_offsets.get(key, self.committed.get(key, position)):
                self.next_offsets[key] = taken[key] = position
        return taken

    def halt(self, key: TopicPartitionKey, offset: int, reason: str, resend: bool = False) -> None:
        """Record that `offset` could not be delivered; keep the earliest failure. `resend`: it may be sent
        again (see `resends`); a refusal of the same partition makes the halt final."""
        current = self.halted.get(key)
        if current is None or offset < current.offset:
            self.halted[key] = Halt(offset, reason, resend and (current is None or current.resend))
        elif current.resend and not resend:
            current.resend = False

    def resends(self) -> dict[TopicPartitionKey, str]:
        """Partitions held for a resend: {key: why}."""
        return {key: halt.reason for key, halt in self.halted.items() if halt.resend}

    def is_halted(self, key: TopicPartitionKey) -> bool:
        return key in self.halted

    def committable(self, checkpoint: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Offsets to commit after a flush that followed `checkpoint`, only those that advance."""
        result = {}
        for key, offset in checkpoint.items():
            halt = self.halted.get(key)
            if halt is not None:
                offset = min(offset, halt.offset)
            if offset > self.committed.get(key, -1):
                result[key] = offset
        return result

    def mark_committed(self, offsets: dict[TopicPartitionKey, int]) -> None:
        for key, offset in offsets.items():
            if offset > self.committed.get(key, -1):
                self.committed[key] = offset

    def forget(self, keys) -> None:
        """Partitions revoked from this worker: their state belongs to the next owner now."""
        for key in keys:
            self.next_offsets.pop(key, None)
            self.committed.pop(key, None)
            self.halted.pop(key, None)


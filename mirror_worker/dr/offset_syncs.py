"""Offset syncs: where a source position lands on the destination, recorded for consumer failover.

A sync (alias, topic, partition, S -> D) means: every record of the source partition below offset S is
on the destination partition below offset D, and every record at or after S lands at D or later. The
worker takes one right after a producer flush that completed (or a transaction that committed) and
before anything else is produced: S is the position it commits, D the destination partition's high
watermark then. This needs destination partition = source partition (preserve-partitions); with any
other routing one source partition spreads over several destination partitions and no single D exists.

A consumer group that committed C on the source resumes on the destination at the largest D of the
syncs with S <= C (normally the sync with the largest such S):

    source      ... S-1 | S  S+1 ... C-1 | C  C+1 ...        (| = committed positions)
    destination ... D-1 | D  ...............  (copies of S.. land here, in order, maybe twice)
                          ^ resume here: nothing at/after C is missed; S..C-1 are read again

C == S rereads nothing of that source partition; C < every S cannot be translated (no sync that old).
Every sync stays true for as long as the topics exist, so syncs are kept per partition under a few
slots (`slot_for`): the latest sync and older, exponentially spaced ones, so that a consumer behind the
latest sync still translates, with a bounded number of records in the compacted topic.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

SLOTS = 8  # per partition: syncs numbered n land in slot min(trailing zeros of n, SLOTS - 1)


@dataclass(frozen=True)
class OffsetSync:
    source: str          # source cluster alias
    topic: str           # source topic
    partition: int
    source_offset: int   # S
    destination_offset: int  # D
    topic_id: str = ""   # the source topic's id, so syncs of a deleted-and-recreated topic are ignored

    def key(self, slot: int) -> bytes:
        return json.dumps([self.source, self.topic, self.partition, slot]).encode()

    def value(self) -> bytes:
        return json.dumps({"source_offset": self.source_offset, "destination_offset": self.destination_offset,
                           "topic_id": self.topic_id}).encode()

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> "OffsetSync | None":
        """A sync record of the topic, or None for a tombstone or anything not written by a worker."""
        try:
            source, topic, partition, _slot = json.loads(key)
            data = json.loads(value)
            return cls(str(source), str(topic), int(partition), int(data["source_offset"]),
                       int(data["destination_offset"]), str(data.get("topic_id", "")))
        except (TypeError, ValueError, KeyError):
            return None


def slot_for(sequence: int) -> int:
    """The slot of a partition's `sequence`-th sync (1, 2, ...): slot k is rewritten every 2**(k+1) syncs."""
    trailing_zeros = (sequence & -sequence).bit_length() - 1
    return min(trailing_zeros, SLOTS - 1)


@dataclass(frozen=True)
class Translated:
    destination_offset: int
    sync: OffsetSync


def translate_offset(committed: int, syncs: list[OffsetSync]) -> Translated | None:
    """The destination position for a source position `committed` (the next offset to read), or None.

    `syncs`: the syncs of one source partition (any order, duplicates allowed).
    """
    usable = [s for s in syncs if s.source_offset <= committed]
    if not usable:
        return None
    # Each usable sync alone is safe (records at/after S >= ... C land at D or later), so the largest D
    # rereads least. It is the largest S's too, unless a restart re-sent a range and wrote a later sync.
    best = max(usable, key=lambda s: (s.destination_offset, s.source_offset))
    return Translated(best.destination_offset, best)


@dataclass(frozen=True)
class PartitionTranslation:
    source_topic: str
    partition: int
    committed: int
    destination_topic: str
    result: Translated | None
    reason: str = ""


def translate_positions(committed: dict[tuple[str, int], int], syncs: list[OffsetSync], source: str,
                        remote_topic, topic_ids: dict[str, str] | None = None) -> list[PartitionTranslation]:
    """Translate a group's committed source positions {(topic, partition): offset} of cluster `source`.

    `remote_topic`: source topic -> destination topic. `topic_ids`: the source topics' ids now; syncs
    written for an earlier topic of the same name are ignored.
    """
    topic_ids = topic_ids or {}
    by_partition: dict[tuple[str, int], list[OffsetSync]] = {}
    for sync in syncs:
        if sync.source != source:
            continue
        current_id = topic_ids.get(sync.topic)
        if current_id and sync.topic_id and sync.topic_id != current_id:
            continue
        by_partition.setdefault((sync.topic, sync.partition), []).append(sync)
    out = []
    for (topic, partition), offset in sorted(committed.items()):
        candidates = by_partition.get((topic, partition), [])
        result = translate_offset(offset, candidates)
        reason = ""
        if result is None:
            oldest = min((s.source_offset for s in candidates), default=None)
            reason = ("no offset sync for this partition yet" if oldest is None else
                      f"committed offset {offset} is older than the oldest offset sync kept ({oldest})")
        out.append(PartitionTranslation(topic, partition, offset, remote_topic(topic), result, reason))
    return out


class OffsetSyncWriter:
    """The worker's edge: after a completed flush (or committed transaction), one sync per moved partition.

    Must be called before anything else is produced to the mirrored partitions (the worker loop is
    single-threaded: it is called from the commit step, right after the flush/commit).
    """

    def __init__(self, topic: str, admin, remote_topic, timeout: float = 10.0) -> None:
        self.topic = topic
        self.admin = admin
        self.remote_topic = remote_topic
        self.timeout = timeout
        self.sequence: dict[tuple[str, str, int], int] = {}
        self.written: dict[tuple[str, str, int], int] = {}  # last S written per (alias, topic, partition)

    def write(self, producer, alias: str, positions: dict[tuple[str, int], int],
              topic_ids: dict[str, str]) -> tuple[list[OffsetSync], dict[str, str]]:
        """Returns the syncs written and {"topic[partition]": error} of the partitions without one."""
        moved = {key: offset for key, offset in positions.items() if self.written.get((alias, *key)) != offset}
        if not moved:
            return [], {}
        highs, errors = self._high_watermarks({(self.remote_topic(t), p) for t, p in moved})
        syncs = []
        for (topic, partition), offset in sorted(moved.items()):
            high = highs.get((self.remote_topic(topic), partition))
            if high is None:
                continue
            sync = OffsetSync(alias, topic, partition, offset, high, topic_ids.get(topic, ""))
            full_key = (alias, topic, partition)
            self.sequence[full_key] = self.sequence.get(full_key, 0) + 1
            producer.produce(self.topic, sync.value(), sync.key(slot_for(self.sequence[full_key])))
            self.written[full_key] = offset
            syncs.append(sync)
        # Not flushed here: the loop polls this producer and close() flushes it. A sync lost with the
        # process only leaves translation to the syncs before it (the next run writes new ones).
        producer.poll(0)
        return syncs, errors

    def _high_watermarks(self, partitions: set[tuple[str, int]], attempts: int = 5) -> tuple[dict, dict]:
        """Destination high watermarks; a partition just created may need a few tries (leader not known yet)."""
        highs, errors = {}, {}
        for attempt in range(attempts):
            requests = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions if (t, p) not in highs}
            if not requests:
                break
            if attempt:
                time.sleep(0.2 * attempt)
            errors = {}
            for tp, future in self.admin.list_offsets(requests, request_timeout=self.timeout).items():
                try:
                    high = future.result(self.timeout).offset
                except KafkaException as exc:
                    errors[f"{tp.topic}[{tp.partition}]"] = exc.args[0].str()
                except TimeoutError:  # the destination (or the partition's leader) did not answer in time
                    errors[f"{tp.topic}[{tp.partition}]"] = f"no answer within {self.timeout:.0f}s"
                else:
                    # A leader that died and is not fenced yet answers -1001 (no offset), not an error: never a
                    # sync to a negative offset (issue 28, three-node destination).
                    if high >= 0:
                        highs[(tp.topic, tp.partition)] = high
                    else:
                        errors[f"{tp.topic}[{tp.partition}]"] = f"no high watermark (offset {high})"
            if len(errors) == len(requests) and any(e.startswith("no answer") for e in errors.values()):
                break  # unreachable: no more tries now, the next commit writes the syncs
        return highs, errors


"""The schema gate of one source: subjects of newly mirrored topics, schema ids first seen mid-stream, conflicts."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from mirror_worker.engine.halts import HaltableStream, Halts
from mirror_worker.exceptions import SchemaConflict, UnknownSchemaId
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.framing import MAX_ANSWERED_IDS, RECHECK_INTERVAL_S, needs_recheck, rewritten_fields

if TYPE_CHECKING:
    from mirror_worker.schemas.sync import SchemaSyncer

log = logging.getLogger("mirror_worker")


class SchemaGate:
    """Subjects synced before records need them; a conflict halts its topic.

    `id_headers` (source framing header -> destination's) is what the hot path rewrites with; a miss
    comes back here (`new_schema_ids`).
    """

    def __init__(self, syncer: SchemaSyncer, halts: Halts, metrics: MirrorMetrics, label: dict, alias: str,
                 rewrite_mode: str = "auto") -> None:
        self.syncer = syncer
        self.rewrite_mode = rewrite_mode  # auto (by the topic's subjects), force or off
        self.halts = halts
        self.metrics = metrics
        self.label = label
        self.alias = alias
        self.conflicts: dict[str, str] = {}  # topic -> why it is not mirrored
        # topic -> schema ids that looked framed in a field without a subject, a look at the registry made for each
        self._answered: dict[str, set[int]] = {}
        self._by_interval: set[str] = set()  # topics past MAX_ANSWERED_IDS (logged once)

    @property
    def id_headers(self) -> dict[bytes, bytes]:
        return self.syncer.id_headers

    def fields(self, topic: str) -> tuple[bool, bool]:
        """Whether the topic's keys and values are rewritten, from what is known of its subjects."""
        return rewritten_fields(self.rewrite_mode, self.syncer.framing.get(topic))

    def recheck_framing(self, stream: HaltableStream, msg) -> tuple[bool, bool]:
        """`msg`'s key or value looks framed where its topic had no subject: look again if its id is new here.

        Decided by the record's schema ids and the registry, not by its timestamp (schemas/framing.py). A
        conflict found here halts `msg`'s partition at `msg`: the records of its run before it are handed
        over already (exactly-once commits them with that position), the ledger does not count them yet.
        """
        topic = msg.topic()
        framing = self.syncer.framing.get(topic)
        keys, values = (framing.keys, framing.values) if framing is not None else (False, False)
        ids = [wire_format.schema_id(data) for framed, data in ((keys, msg.key()), (values, msg.value()))
               if not framed and wire_format.is_framed(data)]
        answered = self._answered.setdefault(topic, set())
        if needs_recheck(framing, ids, answered, time.monotonic()):
            try:
                framing = self.syncer.recheck_topic(topic)
            except SchemaConflict as exc:
                self.conflict(stream, topic, str(exc), at=msg)
            self._count_ids()
            room = MAX_ANSWERED_IDS - len(answered)
            answered.update(ids[:max(room, 0)])
            if room < len(ids) and topic not in self._by_interval:
                self._by_interval.add(topic)
                log.warning("schema framing: more distinct ids look framed than the worker remembers; the "
                            "registry is asked again at most once per interval", extra={
                                **self.label, "source": self.alias, "topic": topic, "ids": MAX_ANSWERED_IDS,
                                "interval_s": RECHECK_INTERVAL_S})
        return rewritten_fields(self.rewrite_mode, framing)

    def sync_topics(self, stream: HaltableStream, topics: list[str]) -> None:
        """Copy the subjects of newly mirrored topics before any of their records is produced."""
        for topic in topics:
            try:
                self.syncer.sync_topic(topic)
            except SchemaConflict as exc:
                self.conflict(stream, topic, str(exc))
        self._count_ids()

    def new_schema_ids(self, stream: HaltableStream, msg, keys: bool = True, values: bool = True) -> tuple | None:
        """A key or value framed with a schema id not mapped yet: sync its subjects, then map it.

        Returns the rewritten (key, value), or None when the record was refused (unknown id: dead-lettered or
        its partition halted) or its topic halted (schema conflict). A registry that does not answer stops
        the worker (SchemaRegistryUnavailable): the next run resumes from the last commit.
        """
        topic, syncer = msg.topic(), self.syncer
        self.metrics.schema_id_cache_misses.labels(source=self.alias, **self.label).inc()
        if topic in self.conflicts:
            self.conflict(stream, topic, self.conflicts[topic], at=msg)
            return None
        key, value = msg.key(), msg.value()
        framed_key, framed_value = keys and wire_format.is_framed(key), values and wire_format.is_framed(value)
        try:
            for data in (key if framed_key else None, value if framed_value else None):
                if wire_format.is_framed(data) and data[:wire_format.HEADER_SIZE] not in syncer.id_headers:
                    syncer.destination_header(topic, wire_format.schema_id(data))
        except UnknownSchemaId as exc:
            self.halts.refuse(stream, msg, f"unknown schema: {exc}")
            return None
        except SchemaConflict as exc:
            self.conflict(stream, topic, str(exc), at=msg)
            return None
        finally:
            self._count_ids()
        return (wire_format.rewrite(key, syncer.id_headers) if framed_key else key,
                wire_format.rewrite(value, syncer.id_headers) if framed_value else value)

    def conflict(self, stream: HaltableStream, topic: str, reason: str, at=None) -> None:
        """The topic's subjects cannot be synced: halt every partition of it this worker holds."""
        if topic not in self.conflicts:
            self.conflicts[topic] = reason
            labels = {**self.label, "source": self.alias, "topic": topic}
            self.metrics.schema_conflicts.labels(**labels).set(1)
            log.error("schema conflict: topic not mirrored", extra={**labels, "error": reason})
            print(f"mirror_worker: {reason} (source {self.alias!r}; the topic is not mirrored)",
                  file=sys.stderr, flush=True)
        if at is not None:
            self.halts.halt(stream, topic, at.partition(), at.offset(), reason)
        ledger = stream.ledger
        for key in sorted(stream.assigned):
            if key[0] == topic and key not in ledger.halted:
                self.halts.halt(stream, topic, key[1], _or_zero(ledger.position(key)), reason)

    def conflict_halts(self, partitions: list[TopicPartition]) -> list[tuple[tuple[str, int], int, str]]:
        """Newly assigned partitions of topics in conflict: (key, start offset, reason) to halt."""
        return [((tp.topic, tp.partition), tp.offset, self.conflicts[tp.topic])
                for tp in partitions if tp.topic in self.conflicts]

    def _count_ids(self) -> None:
        self.metrics.schema_id_cache_size.labels(source=self.alias, **self.label).set(len(self.syncer.id_headers))


def _or_zero(offset: int | None) -> int:
    return 0 if offset is None else offset

"""Schema sync in the worker: subjects of newly mirrored topics, schema ids first seen mid-stream, conflicts.

A part of MirrorWorker (worker.py), which holds the state these methods share.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING


from mirror_worker import wire_format
from mirror_worker.exceptions import SchemaConflict, UnknownSchemaId
from mirror_worker.framing import needs_recheck, rewritten_fields

if TYPE_CHECKING:
    from mirror_worker.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class SchemaHandling:
    """Subjects synced before records need them; a conflict halts its topic."""

    def _sync_schemas(self, stream: SourceStream, topics: list[str]) -> None:
        """Copy the subjects of newly mirrored topics before any of their records is produced."""
        if stream.schemas is None:
            return
        for topic in topics:
            try:
                stream.schemas.sync_topic(topic)
            except SchemaConflict as exc:
                self._schema_conflict(stream, topic, str(exc))
        self.metrics.schema_id_cache_size.labels(source=stream.alias, **self._label).set(len(stream.schemas.id_headers))

    def _recheck_framing(self, stream: SourceStream, topic: str, timestamp_ms: int) -> tuple[bool, bool]:
        """A key or value looks framed where the topic had no subject: look again if it may have one now."""
        syncer = stream.schemas
        framing = syncer.framing.get(topic)
        if needs_recheck(framing, timestamp_ms, time.time() * 1000):
            try:
                framing = syncer.recheck_topic(topic)
            except SchemaConflict as exc:
                self._schema_conflict(stream, topic, str(exc))
            self.metrics.schema_id_cache_size.labels(source=stream.alias, **self._label).set(len(syncer.id_headers))
        return rewritten_fields(self.config.schema_id_rewrite, framing)

    def _new_schema_ids(self, stream: SourceStream, msg, keys: bool = True, values: bool = True) -> tuple | None:
        """A key or value framed with a schema id not mapped yet: sync its subjects, then map it.

        Returns the rewritten (key, value), or None when the record was refused (unknown id: dead-lettered or
        its partition halted) or its topic halted (schema conflict). A registry that does not answer stops
        the worker (SchemaRegistryUnavailable): the next run resumes from the last commit.
        """
        topic, syncer = msg.topic(), stream.schemas
        self.metrics.schema_id_cache_misses.labels(source=stream.alias, **self._label).inc()
        if topic in stream.schema_conflicts:
            self._schema_conflict(stream, topic, stream.schema_conflicts[topic], at=msg)
            return None
        key, value = msg.key(), msg.value()
        framed_key, framed_value = keys and wire_format.is_framed(key), values and wire_format.is_framed(value)
        try:
            for data in (key if framed_key else None, value if framed_value else None):
                if wire_format.is_framed(data) and data[:wire_format.HEADER_SIZE] not in syncer.id_headers:
                    syncer.destination_header(topic, wire_format.schema_id(data))
        except UnknownSchemaId as exc:
            self._refuse(stream, msg, f"unknown schema: {exc}")
            return None
        except SchemaConflict as exc:
            self._schema_conflict(stream, topic, str(exc), at=msg)
            return None
        finally:
            self.metrics.schema_id_cache_size.labels(source=stream.alias, **self._label).set(len(syncer.id_headers))
        return (wire_format.rewrite(key, syncer.id_headers) if framed_key else key,
                wire_format.rewrite(value, syncer.id_headers) if framed_value else value)

    def _schema_conflict(self, stream: SourceStream, topic: str, reason: str, at=None) -> None:
        """The topic's subjects cannot be synced: halt every partition of it this worker holds."""
        if topic not in stream.schema_conflicts:
            stream.schema_conflicts[topic] = reason
            labels = {**self._label, "source": stream.alias, "topic": topic}
            self.metrics.schema_conflicts.labels(**labels).set(1)
            log.error("schema conflict: topic not mirrored", extra={**labels, "error": reason})
            print(f"mirror_worker: {reason} (source {stream.alias!r}; the topic is not mirrored)",
                  file=sys.stderr, flush=True)
        if at is not None:
            self._halt(stream, topic, at.partition(), at.offset(), reason)
        ledger = stream.ledger
        for key in sorted(stream.assigned):
            if key[0] == topic and key not in ledger.halted:
                self._halt(stream, topic, key[1], ledger.next_offsets.get(key, ledger.committed.get(key, 0)), reason)


"""The timestamp a copied record is produced with: the one rule the worker, the catch-up and the check share.

librdkafka reads a produce timestamp of 0 as "stamp it now" (rdkafka.h, RD_KAFKA_V_TIMESTAMP), so a source
record stamped at the epoch (CreateTime 0, which Kafka allows) cannot be produced with its own timestamp
through this client. It goes out stamped EPOCH_ZERO_STAMP_MS (1 ms after the epoch) instead of "now": retention
and `offsetsForTimes` see it where the source has it, give or take that millisecond, and the consistency check
maps a source 0 to it (`expected_destination_timestamp`). Every such record is counted, never silent.

A record without a timestamp (TIMESTAMP_NOT_AVAILABLE, -1) is handed over as 0: the producer stamps it, as the
Java client stamps a record produced without one.
"""

from __future__ import annotations

EPOCH_ZERO_STAMP_MS = 1


def produced_timestamp(source_timestamp_ms: int) -> int:
    """What to hand librdkafka for a source record stamped `source_timestamp_ms` (-1: none)."""
    if source_timestamp_ms > 0:
        return source_timestamp_ms
    return EPOCH_ZERO_STAMP_MS if source_timestamp_ms == 0 else 0


def expected_destination_timestamp(source_timestamp_ms: int) -> int:
    """The destination timestamp a faithful copy of a record stamped `source_timestamp_ms` (>= 0) carries."""
    return EPOCH_ZERO_STAMP_MS if source_timestamp_ms == 0 else source_timestamp_ms

"""Which of a topic's keys and values are in Confluent framing (pure): a property of the topic, never of a byte.

An 8-byte big-endian long below 2^56, raw Avro, or any payload may start with byte 0: only a subject says a
field is framed. With `schema-id-rewrite: auto` (the default) a topic's keys are framed when the source
registry has `<topic>-key`, its values when it has `<topic>-value` (the topic-name strategy schema sync
copies); `force` treats every key and value that looks framed as framed; `off` rewrites nothing.

Subjects are looked up when the topic is first mirrored. A subject registered later is seen on demand: a
key (value) that looks framed in a field without a subject re-checks the registry when the record is newer
than the last check (producers register a schema before they write with it), at most once per
RECHECK_INTERVAL_S per topic, so a raw topic costs one registry request per interval at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RewriteMode = Literal["auto", "off", "force"]

RECHECK_INTERVAL_S = 1.0
# Producer clocks may run behind the worker's: a record stamped up to this much before a check may still
# have been written after the subject it uses was registered.
CLOCK_SKEW_MS = 1000


@dataclass(frozen=True)
class TopicFraming:
    """Whether the topic has a key / value subject, as of `checked_at_ms` (wall clock)."""

    keys: bool
    values: bool
    checked_at_ms: float


def rewritten_fields(mode: RewriteMode, framing: TopicFraming | None) -> tuple[bool, bool]:
    """(rewrite keys, rewrite values) of a topic."""
    if mode == "force":
        return True, True
    if mode == "off" or framing is None:
        return False, False
    return framing.keys, framing.values


def needs_recheck(framing: TopicFraming | None, record_timestamp_ms: int, now_ms: float) -> bool:
    """A field without a subject holds a record that looks framed: ask the registry again?"""
    if framing is None:
        return True
    if framing.keys and framing.values:
        return False
    if record_timestamp_ms and record_timestamp_ms < framing.checked_at_ms - CLOCK_SKEW_MS:
        return False  # written before the last check, which would have seen a subject registered before it
    return now_ms - framing.checked_at_ms >= RECHECK_INTERVAL_S * 1000

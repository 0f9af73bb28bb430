"""Which of a topic's keys and values are in Confluent framing (pure): a property of the topic, never of a byte.

An 8-byte big-endian long below 2^56, raw Avro, or any payload may start with byte 0: only a subject says a
field is framed. With `schema-id-rewrite: auto` (the default) a topic's keys are framed when the source
registry has `<topic>-key`, its values when it has `<topic>-value` (the topic-name strategy schema sync
copies); `force` treats every key and value that looks framed as framed; `off` rewrites nothing.

Subjects are looked up when the topic is first mirrored. A subject registered later is seen on demand, decided
by the bytes and the registry, never by a clock: a key (value) that looks framed in a field without a subject
makes the worker look at the registry again when its schema id is one not met before in that topic. A producer
registers its subject before it writes with the id the registry gave it, so the first record that uses a new
subject carries an id the topic had not shown: that record triggers the look, whatever its timestamp (event
time, a backfill, a replay; the record's CreateTime decided this before, and such records kept the source's ids).
Ids already answered are remembered per topic, so a raw topic whose bytes happen to look framed costs one registry
request per distinct id, up to MAX_ANSWERED_IDS; past that (random bytes) the topic is looked at again at most once
per RECHECK_INTERVAL_S, as every topic was before, and the worker says so once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RewriteMode = Literal["auto", "off", "force"]

RECHECK_INTERVAL_S = 1.0
MAX_ANSWERED_IDS = 1024  # per topic: ids a look at the registry found no subject for


@dataclass(frozen=True)
class TopicFraming:
    """Whether the topic has a key / value subject, as of `checked_at` (the worker's monotonic clock, seconds)."""

    keys: bool
    values: bool
    checked_at: float


def rewritten_fields(mode: RewriteMode, framing: TopicFraming | None) -> tuple[bool, bool]:
    """(rewrite keys, rewrite values) of a topic."""
    if mode == "force":
        return True, True
    if mode == "off" or framing is None:
        return False, False
    return framing.keys, framing.values


def needs_recheck(framing: TopicFraming | None, schema_ids: list[int], answered: set[int], now: float) -> bool:
    """Fields without a subject hold values framed with `schema_ids`: ask the registry again?

    `answered`: the ids of this topic that earlier looks were made for (at most MAX_ANSWERED_IDS).
    """
    if framing is None:
        return True
    if framing.keys and framing.values:
        return False
    if any(i not in answered for i in schema_ids):
        if len(answered) < MAX_ANSWERED_IDS:
            return True
        return now - framing.checked_at >= RECHECK_INTERVAL_S  # too many ids to remember: by the interval
    return False

"""Static group membership (KIP-345): one stable `group.instance.id` per worker slot, stream and source.

A restarted static member gets its partitions back at once, without a rebalance of the others, as long
as it rejoins within `session.timeout.ms`. Two live consumers must never share an id: the broker fences
the older one (FENCED_INSTANCE_ID, fatal). So the id names the mirror's group, the source, the worker
slot (one per host or Airflow map index: `--worker.slot`) and the `--num.streams` process index.
Pure: the command layer parses the slot, the worker adds the id to each source consumer's settings.
"""

from __future__ import annotations

import re

from mirror_worker.exceptions import ConfigError

SLOT_FLAG = "--worker.slot"
SLOT_ENV = "MIRROR_WORKER_SLOT"
# What the broker accepts as a group.instance.id (as for topic names).
_LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def parse_slot(text: str | None, key: str) -> int | None:
    """A worker slot as given on the command line or in the environment; `key` names it in the error."""
    if text is None or text == "":
        return None
    value = text.strip()
    if not value.isdigit() or not value.isascii():
        raise ConfigError(f"{key}: a non-negative integer is expected, got {text!r}")
    return int(value)


def instance_id(group_id: str, source: str, slot: int, stream: int) -> str:
    return f"{group_id}.{source}.slot-{slot}.stream-{stream}"


def check_instance_id(group_id: str, source: str, slot: int, streams: int) -> None:
    """The id of the highest stream index is legal (the others differ only in that digit)."""
    example = instance_id(group_id, source, slot, streams - 1)
    if not _LEGAL.match(example):
        raise ValueError(f"group.instance.id {example!r} (from the group id and the source name) must be at most "
                         "249 letters, digits, '.', '_' or '-': rename the source or the group")


def membership_settings(static: bool, group_id: str, source: str, slot: int, stream: int) -> dict[str, str]:
    """The consumer settings of one source consumer's membership: none when dynamic (the default)."""
    if not static:
        return {}
    return {"group.instance.id": instance_id(group_id, source, slot, stream)}

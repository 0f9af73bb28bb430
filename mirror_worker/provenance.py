"""The provenance header: a mirrored record's source cluster, topic, partition and offset (pure)."""

from __future__ import annotations

PROVENANCE_HEADER = "mirror.source"


def provenance_value(alias: str, cluster_id: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{alias}:{cluster_id}:{topic}:{partition}:{offset}".encode()


def parse_provenance(value: bytes) -> tuple[str, str, str, int, int] | None:
    parts = value.decode(errors="replace").split(":")
    if len(parts) != 5:
        return None
    alias, cluster_id, topic, partition, offset = parts
    try:
        return alias, cluster_id, topic, int(partition), int(offset)
    except ValueError:
        return None

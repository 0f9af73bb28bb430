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


def names_cluster(value: bytes | None, cluster_id: str) -> bool:
    """Whether a provenance header value names `cluster_id` as the record's source cluster."""
    origin = parse_provenance(value) if value else None
    return origin is not None and bool(cluster_id) and origin[1] == cluster_id


def mirrored_headers(headers, provenance: bytes | None, destination_cluster_id: str) -> list | bytes:
    """The headers a mirrored record carries: the source record's, with this hop's provenance (when given)
    in place of an earlier hop's. A provenance header naming `destination_cluster_id` is a cycle: that
    header's value comes back (bytes) instead of a list, and the record must not be mirrored."""
    out = []
    for name, value in headers or ():
        if name == PROVENANCE_HEADER:
            if names_cluster(value, destination_cluster_id):
                return value
            if provenance is not None:
                continue  # replaced by this hop's provenance below
        out.append((name, value))
    if provenance is not None:
        out.append((PROVENANCE_HEADER, provenance))
    return out

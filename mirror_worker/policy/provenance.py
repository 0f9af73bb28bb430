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


def is_copy_from(value: bytes | None, cluster_id: str, topic: str, destination_topic: str) -> bool:
    """Whether a record of `topic` whose provenance header is `value` is a mirror's copy of a record of cluster
    `cluster_id` (a loop when that cluster is the destination), which mirrors it to `destination_topic`.

    The header alone does not say so: Kafka Streams and Connect forward input headers, so an application that
    read a copy and wrote a topic of its own leaves the header on records it made. A copy sits where a mirror
    puts one: in the topic the header names, or that topic under a prefix (identity and prefix naming), or in
    the topic this mirror maps back onto it (a failback pair: `destination_topic` is the header's topic).
    """
    origin = parse_provenance(value) if value else None
    if origin is None or not cluster_id or origin[1] != cluster_id or not origin[2]:
        return False
    return topic.endswith(origin[2]) or destination_topic == origin[2]


def mirrored_headers(headers, provenance: bytes | None, destination_cluster_id: str, topic: str,
                     destination_topic: str) -> list | bytes:
    """The headers a record of `topic` carries to `destination_topic`: the source record's, with this hop's
    provenance (when given) in place of an earlier hop's. A copy of a record of `destination_cluster_id`
    (`is_copy_from`) is a cycle: its header's value comes back (bytes) instead of a list, and the record must
    not be mirrored. Any other provenance header is kept as it is when this hop adds none."""
    out = []
    for name, value in headers or ():
        if name == PROVENANCE_HEADER:
            if is_copy_from(value, destination_cluster_id, topic, destination_topic):
                return value
            if provenance is not None:
                continue  # replaced by this hop's provenance below
        out.append((name, value))
    if provenance is not None:
        out.append((PROVENANCE_HEADER, provenance))
    return out

"""Confluent schema-registry framing of a key or value: magic byte 0, a 4-byte big-endian schema id, the payload.

The one definition of the framing, shared by the worker's schema-id rewrite and the consistency check.
"""

from __future__ import annotations

MAGIC_BYTE = 0
ID_SIZE = 4
HEADER_SIZE = 1 + ID_SIZE


def is_framed(data: bytes | None) -> bool:
    return data is not None and len(data) >= HEADER_SIZE and data[0] == MAGIC_BYTE


def header(schema_id: int) -> bytes:
    """The 5 bytes that start a record framed with `schema_id`."""
    return bytes((MAGIC_BYTE,)) + schema_id.to_bytes(ID_SIZE, "big")


def schema_id(data: bytes) -> int:
    """The schema id of framed `data` (check `is_framed` first)."""
    return int.from_bytes(data[1:HEADER_SIZE], "big")


def rewrite(data: bytes, headers: dict[bytes, bytes]) -> bytes:
    """`data` with its header replaced from `headers` (source header -> destination header), bytes only.

    Raises KeyError(source header) when the header is not mapped yet.
    """
    old = data[:HEADER_SIZE]
    new = headers[old]
    if new == old:
        return data
    return b"".join((new, memoryview(data)[HEADER_SIZE:]))

"""What a schema id names, by content: the consistency check's proof that a copy's ids mean what the source's do.

Two registries number their schemas, and the versions of their subjects, each its own way: the same schema has
one id on the source and another on the destination, and a subject referenced as version 3 on one side may be
version 1 on the other. So a schema is identified here by its content only: its type, its canonical text
(`sync.fingerprint`: logical types, precision and scale kept) and, for each reference, the name it is
referenced by and the meaning of the schema it resolves to (recursively), never a subject version number.
Equal meanings on the two sides <=> the destination id names the schema the source id names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from mirror_worker.schemas.registry import Registry, SubjectVersion
from mirror_worker.schemas.sync import fingerprint

MEANING_HEX = 32              # 128 bits of sha256: a short tag, still never equal by accident


class _Unresolved(Exception):
    """A reference the registry cannot resolve: the schema's meaning is unknown."""


def schema_meaning(registry: Registry, schema_id: int) -> str | None:
    """A hex digest of the schema `schema_id` names in `registry`; None when the registry does not know the id
    (or one of its references)."""
    return schema_meanings(registry, [schema_id]).get(schema_id)


def schema_meanings(registry: Registry, schema_ids: Iterable[int]) -> dict[int, str]:
    """{id: meaning} of the ids `registry` knows (see `schema_meaning`); referenced schemas read once."""
    memo: dict[tuple[str, int], str] = {}
    out = {}
    for schema_id in sorted(set(schema_ids)):
        schema = registry.schema(schema_id)
        if schema is None:
            continue
        try:
            out[schema_id] = _meaning(registry, schema, memo, frozenset())
        except _Unresolved:
            continue
    return out


def _meaning(registry: Registry, schema: SubjectVersion, memo: dict, visiting: frozenset) -> str:
    references = []
    for reference in schema.references:
        key = (reference.subject, reference.version)
        if key not in memo:
            if key in visiting:       # registries refuse cycles; a broken one must not loop forever
                raise _Unresolved(key)
            referenced = registry.version(reference.subject, reference.version)
            if referenced is None:
                raise _Unresolved(key)
            memo[key] = _meaning(registry, referenced, memo, visiting | {key})
        references.append((reference.name, memo[key]))
    content = fingerprint(schema.schema_type, schema.schema_str, tuple(sorted(references)))
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:MEANING_HEX]

"""The consistency check's proof of schema ids: a copy's framed key or value is the same as its source's only
if the body is equal and the destination id names, in the destination registry, the schema the source id names
in the source registry (issue 43 defect 3). Bodies are compared as before (records.normalise_schema_id); this
module gives every record `schema_d`, a string equal on the two sides exactly when the ids mean the same.

Which fields are framed is decided as the worker decides it (mirror_worker/schemas/framing.py): a topic's keys
(values) are framed when the source registry has its key (value) subject, or for every topic with
`schema-id-rewrite: force`, none with `off`. In a framed field a key or value that starts with magic byte 0
(5 bytes or more) stands for the meaning of its id on its own side (mirror_worker/schemas/meaning.py: type and
full text, logical types kept, references by content); an id its registry does not know stands for
`?side:id`, which nothing on the other side equals. Every other key or value stands for `-`: ids in fields the
worker does not rewrite are left out of the comparison as they were before.

Registries are known only from a mirror spec with them (`--config`); without (flags, or a spec without
registries) `schema_d` stays null on both sides and the check compares as before, ids left out, and says so
in the report's `schemas` section.

Two passes: the fingerprints carry each framed-looking field's id (`key_sid`, `value_sid`), the driver collects
the distinct ids of each side (few: one per schema version in use) and resolves them once, and the meanings
reach the rows as a literal map (id -> meaning) in the expression, with no join.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from mirror_worker.batch_api import SUBJECT_SUFFIXES, TopicFraming, rewritten_fields

NOT_FRAMED = "-"
SOURCE, DESTINATION = "source", "destination"
UNCHECKED = {"checked": False, "reason": "no schema registries in the mirror spec (or no --config): schema ids "
                                         "are left out of the comparison, as the bodies are compared"}


@dataclass(frozen=True)
class SchemaCheck:
    """The registries of a mirror and, per source topic, whether its keys and its values are framed."""

    # SchemaRegistryClient config of each side (URL, auth, TLS: MirrorConfig.source_registry/destination_registry)
    source_registry: dict
    destination_registry: dict
    fields: dict[str, tuple[bool, bool]]       # source topic -> (keys framed, values framed)
    mode: str = "auto"                         # the mirror's schema-id-rewrite

    def framed_topics(self) -> set[str]:
        """Source topics with a framed field: their digest windows cannot prove the ids (see job.run_check)."""
        return {t for t, (keys, values) in self.fields.items() if keys or values}

    def only(self, topics: Iterable[str]) -> SchemaCheck:
        wanted = set(topics)
        return SchemaCheck(self.source_registry, self.destination_registry,
                           {t: f for t, f in self.fields.items() if t in wanted}, self.mode)

    def summary(self) -> dict:
        """The report's `schemas` section (registries are left out: their settings carry credentials)."""
        return {"checked": True, "schema_id_rewrite": self.mode,
                "framed_keys": sorted(t for t, (k, _) in self.fields.items() if k),
                "framed_values": sorted(t for t, (_, v) in self.fields.items() if v)}


def framed_fields(mode: str, topics: Iterable[str], has_subject: Callable[[str], bool]) -> dict[str, tuple[bool, bool]]:
    """{source topic: (keys framed, values framed)} as the worker's `rewritten_fields` decides them;
    `has_subject` asks the source registry (only asked in mode auto)."""
    out = {}
    for topic in topics:
        framing = (TopicFraming(*(has_subject(topic + suffix) for suffix in SUBJECT_SUFFIXES), 0.0)
                   if mode == "auto" else None)
        out[topic] = rewritten_fields(mode, framing)
    return out


def schema_check(mirror, topics: Iterable[str], registry_factory=None) -> SchemaCheck | None:
    """The SchemaCheck of a MirrorConfig (None: no registries, or no spec). `registry_factory(config, role)`
    builds a registry client from SchemaRegistryClient config (default: the worker's Registry)."""
    if mirror is None or not mirror.syncs_schemas:
        return None
    source = mirror.source_registry(mirror.sources[0])
    if source is None:
        return None
    registry = _registry(registry_factory, source, SOURCE)
    fields = framed_fields(mirror.schema_id_rewrite, topics, registry.has_subject)
    return SchemaCheck(source, mirror.destination_registry, fields, mirror.schema_id_rewrite)


def _registry(factory, config: dict, role: str):
    if factory is None:
        from mirror_worker.batch_api import Registry

        factory = Registry
    return factory(config, role)


# ------------------------------------------------------------------ Spark (driver and expressions)


def schema_ids(fingerprints: DataFrame) -> set[int]:
    """The distinct ids of framed-looking keys and values (`key_sid`, `value_sid`), collected on the driver."""
    ids = fingerprints.select(F.explode(F.array("key_sid", "value_sid")).alias("sid")).where("sid IS NOT NULL")
    return {row.sid for row in ids.distinct().collect()}


def meanings_of(check: SchemaCheck, side: str, ids: set[int], registry_factory=None) -> dict[int, str]:
    """{id: meaning} of the ids the side's registry knows (mirror_worker/schemas/meaning.py)."""
    from mirror_worker.batch_api import schema_meanings

    if not ids:
        return {}
    config = check.source_registry if side == SOURCE else check.destination_registry
    return schema_meanings(_registry(registry_factory, config, side), ids)


def schema_digest(side: str, keys_framed: set[str], values_framed: set[str], meanings: dict[int, str]) -> Column:
    """`schema_d` of fingerprint rows (topic, key_sid, value_sid) of one side: 'key part|value part', each the
    meaning of the id in a framed field, `?side:id` for an id the registry does not know, else NOT_FRAMED."""
    lookup = (F.create_map(*chain.from_iterable((F.lit(i).cast("bigint"), F.lit(m)) for i, m in meanings.items()))
              if meanings else None)

    def part(sid: str, topics: set[str]) -> Column:
        if not topics:
            return F.lit(NOT_FRAMED)
        found = F.try_element_at(lookup, F.col(sid)) if lookup is not None else F.lit(None).cast("string")
        unknown = F.concat(F.lit(f"?{side}:"), F.col(sid).cast("string"))
        return (F.when(F.col("topic").isin(*sorted(topics)) & F.col(sid).isNotNull(), F.coalesce(found, unknown))
                .otherwise(F.lit(NOT_FRAMED)))

    return F.concat_ws("|", part("key_sid", keys_framed), part("value_sid", values_framed))


def with_schema_meaning(source: DataFrame, destination: DataFrame, check: SchemaCheck | None,
                        topic_map: dict[str, str], registry_factory=None) -> tuple[DataFrame, DataFrame]:
    """Source and destination fingerprints (with `key_sid`, `value_sid`; destination topics named as on the
    destination, `topic_map`: destination -> source) with `schema_d` set; unchanged (null) without a check.
    Collects each side's ids: give cached fingerprints, or each side is read once more."""
    if check is None:
        return source, destination
    to_destination = {s: d for d, s in topic_map.items()}
    keys = {t for t, (k, _) in check.fields.items() if k}
    values = {t for t, (_, v) in check.fields.items() if v}
    out = []
    def on_destination(topics: set[str]) -> set[str]:
        return {to_destination[t] for t in topics if t in to_destination}

    for side, df, names in ((SOURCE, source, lambda ts: ts), (DESTINATION, destination, on_destination)):
        meanings = meanings_of(check, side, schema_ids(df), registry_factory)
        out.append(df.withColumn("schema_d", schema_digest(side, names(keys), names(values), meanings)))
    return out[0], out[1]

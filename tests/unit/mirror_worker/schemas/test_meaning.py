"""What a schema id names, by content (mirror_worker/schemas/meaning.py), against in-memory registries."""

from __future__ import annotations

import json

from mirror_worker.schemas.meaning import schema_meaning, schema_meanings
from mirror_worker.schemas.registry import Reference, SubjectVersion


class FakeRegistry:
    """Schemas by id and subject versions, numbered as the test says (two registries number apart)."""

    def __init__(self, schemas: dict[int, SubjectVersion], versions: dict[tuple[str, int], SubjectVersion] = None):
        self.schemas, self.versions = schemas, versions or {}
        self.asked: list = []

    def schema(self, schema_id):
        self.asked.append(schema_id)
        return self.schemas.get(schema_id)

    def version(self, subject, number):
        self.asked.append((subject, number))
        return self.versions.get((subject, number))


def avro(ts_type, name="Event", doc=None) -> str:
    schema = {"type": "record", "name": name, "fields": [{"name": "ts", "type": ts_type}]}
    if doc:
        schema["doc"] = doc
    return json.dumps(schema)


def schema(schema_id, text, kind="AVRO", references=()) -> SubjectVersion:
    return SubjectVersion(0, schema_id, kind, text, tuple(references))


MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


def test_the_same_schema_under_other_ids_has_one_meaning():
    source = FakeRegistry({1: schema(1, avro(MILLIS))})
    destination = FakeRegistry({7: schema(7, avro(MILLIS, doc="reworded docs are not meaning"))})
    assert schema_meaning(source, 1) == schema_meaning(destination, 7)


def test_a_logical_type_or_another_record_is_another_meaning():
    registry = FakeRegistry({1: schema(1, avro(MILLIS)), 2: schema(2, avro("long")),
                             3: schema(3, avro(MILLIS, "Other")), 4: schema(4, json.dumps({"type": "object"}), "JSON")})
    meanings = schema_meanings(registry, [1, 2, 3, 4])
    assert len(set(meanings.values())) == 4


def test_an_unknown_id_has_no_meaning():
    registry = FakeRegistry({1: schema(1, avro(MILLIS))})
    assert schema_meanings(registry, [1, 99]).keys() == {1}
    assert schema_meaning(registry, 99) is None


def test_references_count_by_content_not_by_version_number():
    inner, other = avro(MILLIS, "Inner"), avro("long", "Inner")
    outer = json.dumps({"type": "record", "name": "Outer", "fields": [{"name": "i", "type": "Inner"}]})
    source = FakeRegistry({1: schema(1, outer, references=[Reference("Inner", "inner", 3)])},
                          {("inner", 3): SubjectVersion(3, 10, "AVRO", inner)})
    same = FakeRegistry({5: schema(5, outer, references=[Reference("Inner", "inner", 1)])},
                        {("inner", 1): SubjectVersion(1, 4, "AVRO", inner)})
    changed = FakeRegistry({5: schema(5, outer, references=[Reference("Inner", "inner", 1)])},
                           {("inner", 1): SubjectVersion(1, 4, "AVRO", other)})
    assert schema_meaning(source, 1) == schema_meaning(same, 5)
    assert schema_meaning(source, 1) != schema_meaning(changed, 5)


def test_an_unresolvable_reference_has_no_meaning_and_shared_references_are_read_once():
    outer = json.dumps({"type": "record", "name": "Outer", "fields": [{"name": "i", "type": "Inner"}]})
    broken = FakeRegistry({1: schema(1, outer, references=[Reference("Inner", "gone", 1)])})
    assert schema_meaning(broken, 1) is None
    shared = FakeRegistry({1: schema(1, outer, references=[Reference("Inner", "inner", 1)]),
                           2: schema(2, outer.replace("Outer", "Outer2"), references=[Reference("Inner", "inner", 1)])},
                          {("inner", 1): SubjectVersion(1, 9, "AVRO", avro("long", "Inner"))})
    assert len(schema_meanings(shared, [1, 2])) == 2
    assert shared.asked.count(("inner", 1)) == 1

"""Schema sync without a registry: the planning table, schema comparison, the byte-level id rewrite, config."""

from __future__ import annotations

import json

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.exceptions import ConfigError
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.registry import redact
from mirror_worker.schemas.sync import STRICT, LENIENT, canonical_text, plan_subject


def versions(*fingerprints: str) -> list[tuple[int, str]]:
    return [(i + 1, fp) for i, fp in enumerate(fingerprints)]


# (mode, source fingerprints, destination fingerprints, versions to register (indexes), conflict expected)
PLANS = [
    (STRICT, "abc", "", (0, 1, 2), False),
    (STRICT, "abc", "ab", (2,), False),
    (STRICT, "abc", "abc", (), False),
    (STRICT, "", "", (), False),
    (STRICT, "abc", "ax", (), True),          # same length prefix, different schema
    (STRICT, "abc", "abcd", (), True),        # an extra destination version
    (STRICT, "abc", "b", (), True),           # not a prefix
    (STRICT, "ab", "xab", (), True),
    (LENIENT, "abc", "", (0, 1, 2), False),
    (LENIENT, "abc", "xaybzc", (), False),    # extras interleaved, order kept
    (LENIENT, "abc", "xab", (2,), False),     # the missing one goes after the extras
    (LENIENT, "abc", "abcx", (), False),
    (LENIENT, "abc", "xy", (0, 1, 2), False),
    (LENIENT, "abc", "ba", (), True),         # relative order broken
    (LENIENT, "abc", "ac", (), True),         # b missing but c (later) there: appending b breaks the order
    (LENIENT, "abc", "xbc", (), True),        # a missing, later ones present
]


@pytest.mark.parametrize("mode, source, destination, register, conflict", PLANS)
def test_plan_subject(mode, source, destination, register, conflict):
    plan = plan_subject(versions(*source), versions(*destination), mode)
    if conflict:
        assert plan.conflict and not plan.register
    else:
        assert plan.conflict is None
        assert plan.register == register


def test_conflict_names_versions():
    plan = plan_subject(versions("a", "b"), versions("a", "x"), STRICT)
    assert plan.conflict == "destination version 2 differs from source version 2 (strict mode needs an exact copy)"
    plan = plan_subject(versions("a", "b", "c"), versions("a", "c"), LENIENT)
    assert "source version 2 is missing" in plan.conflict and "source version 3" in plan.conflict


def test_avro_compares_by_canonical_form():
    a = {"type": "record", "name": "O", "namespace": "d", "doc": "an order", "fields": [{"name": "id", "type": "long"}]}
    b = {"fields": [{"type": "long", "name": "id"}], "name": "d.O", "type": "record"}
    c = {"type": "record", "name": "O", "namespace": "d", "fields": [{"name": "id", "type": "int"}]}
    assert canonical_text("AVRO", json.dumps(a)) == canonical_text("AVRO", json.dumps(b, indent=2))
    assert canonical_text("AVRO", json.dumps(a)) != canonical_text("AVRO", json.dumps(c))


def _field(field_type, **extra) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": field_type, **extra}]})


@pytest.mark.parametrize("a, b", [
    ("long", {"type": "long", "logicalType": "timestamp-millis"}),
    ({"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "timestamp-micros"}),
    ({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 4}),
    ({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}),
    ("string", {"type": "string", "logicalType": "uuid"}),
    ("long", {"type": "long", "connect.name": "io.debezium.time.Timestamp"}),
])
def test_avro_attributes_that_change_decoding_count(a, b):
    assert canonical_text("AVRO", _field(a)) != canonical_text("AVRO", _field(b))
    assert canonical_text("AVRO", json.dumps(a)) != canonical_text("AVRO", json.dumps(b))


def test_avro_with_a_referenced_type_keeps_the_logical_type_too():
    # fastavro cannot parse a schema naming a type from a reference: the comparison falls back to its JSON.
    with_ref = [{"name": "a", "type": "other.Address"}]
    plain = json.dumps({"type": "record", "name": "R", "fields": with_ref + [{"name": "f", "type": "long"}]})
    timestamp = json.dumps({"type": "record", "name": "R", "fields": with_ref + [
        {"name": "f", "type": {"type": "long", "logicalType": "timestamp-millis"}, "doc": "when"}]})
    assert canonical_text("AVRO", plain) != canonical_text("AVRO", timestamp)
    assert canonical_text("AVRO", timestamp) == canonical_text("AVRO", timestamp.replace('"doc": "when"', '"doc": "x"'))


def test_avro_attributes_a_decoder_ignores_do_not_count():
    plain = canonical_text("AVRO", _field("long"))
    assert canonical_text("AVRO", _field({"type": "long"})) == plain
    assert canonical_text("AVRO", _field("long", doc="d", default=1, aliases=["g"], order="descending")) == plain
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    assert canonical_text("AVRO", _field({**ts, "doc": "x"})) == canonical_text("AVRO", _field(ts))


def test_json_and_protobuf_compare_modulo_layout():
    assert canonical_text("JSON", '{"type": "object", "a": 1}') == canonical_text("JSON", '{"a":1,"type":"object"}')
    assert canonical_text("PROTOBUF", 'syntax = "proto3";\nmessage M {  int32 a = 1; }\n') == \
        canonical_text("PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; }')
    # Inside a string literal, spaces are content.
    assert canonical_text("PROTOBUF", 'message M { int32 a = 1 [json_name = "a  b"]; }') != \
        canonical_text("PROTOBUF", 'message M { int32 a = 1 [json_name = "a b"]; }')
    assert canonical_text("PROTOBUF", "message M { int32 a = 1; }") != canonical_text("PROTOBUF", "message M { int64 a = 1; }")


def test_rewrite_replaces_only_the_schema_id():
    source, destination = wire_format.header(7), wire_format.header(70000)
    framed = source + b"payload\x00\x01"
    assert wire_format.is_framed(framed) and wire_format.schema_id(framed) == 7
    rewritten = wire_format.rewrite(framed, {source: destination})
    assert rewritten == b"\x00\x00\x01\x11\x70payload\x00\x01"
    assert wire_format.schema_id(rewritten) == 70000
    assert wire_format.rewrite(framed, {source: source}) is framed  # same id: the record's own bytes
    with pytest.raises(KeyError):
        wire_format.rewrite(wire_format.header(8) + b"x", {source: destination})


@pytest.mark.parametrize("data", [None, b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x07abc", b"plain text"])
def test_unframed_is_recognised(data):
    assert not wire_format.is_framed(data)


def test_framed_minimum_is_five_bytes():
    assert wire_format.is_framed(b"\x00\x00\x00\x00\x01")


BASE = {
    "name": "m", "sources": [{"name": "s", "consumer": {"bootstrap.servers": "a:1"}}],
    "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g",
}


def test_registry_config_defaults_and_levels():
    config = build_mirror_config({**BASE, "schema_registry_url": "http://src", "destination_schema_registry_url": "http://dst"})
    assert config.syncs_schemas and config.schema_sync == "strict" and config.schema_compatibility == "MIRROR"
    assert config.source_registry_url(config.sources[0]) == "http://src"
    forced = build_mirror_config({**BASE, "schema_registry_url": "http://src", "destination_schema_registry_url": "http://dst",
                                  "schema_compatibility": "backward_transitive", "schema_sync": "lenient"})
    assert forced.schema_compatibility == "BACKWARD_TRANSITIVE" and forced.schema_sync == "lenient"
    assert not build_mirror_config(BASE).syncs_schemas


@pytest.mark.parametrize("extra, error", [
    ({"destination_schema_registry_url": "http://dst"},
     "a destination schema registry needs a source schema registry (--schema.registry.url or the source's "
     "schema-registry-url)"),
    ({"schema_registry_url": "http://src"}, "a source schema registry needs a destination schema registry"),
    ({"schema_registry_url": "http://src", "destination_schema_registry_url": "http://dst", "schema_sync": "loose"},
     "schema_sync: Input should be 'strict' or 'lenient'"),
    ({"schema_registry_url": "ftp://user:s3cret@src", "destination_schema_registry_url": "http://dst"},
     "schema_registry_url: a schema registry URL must start with http:// or https://"),
])
def test_registry_config_errors(extra, error):
    with pytest.raises(ConfigError) as info:
        build_mirror_config({**BASE, **extra}, where="flags")
    assert error in str(info.value)
    assert "s3cret" not in str(info.value)


def test_redact_drops_credentials():
    assert redact("https://user:s3cret@registry:8081/apis/ccompat/v7") == "https://registry:8081/apis/ccompat/v7"


def test_flags_set_the_registries(tmp_path):
    from mirror_worker.commands.cli import config_from_args, parse_args

    consumer = tmp_path / "dc1.properties"
    consumer.write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\n")
    producer = tmp_path / "dest.properties"
    producer.write_text("bootstrap.servers=127.0.0.1:2\nallow-insecure=http-registry\n")
    argv = ["--consumer.config", str(consumer), "--producer.config", str(producer), "--whitelist", "t",
            "--schema.registry.url", "http://src:8081", "--destination.schema.registry.url=http://dst:8081",
            "--schema.sync.mode", "lenient", "--schema.compatibility", "full"]
    # http:// off loopback: each side's properties name the opt-in (config/posture.py), or it is refused.
    with pytest.raises(ConfigError, match=r"^--schema.registry.url \(.*dc1.properties\): a schema registry over "
                                          r"http:// refused; add http-registry to allow-insecure"):
        config_from_args(parse_args(argv))
    consumer.write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\nallow-insecure=http-registry\n")
    config = config_from_args(parse_args(argv))
    assert config.source_registry_url(config.sources[0]) == "http://src:8081"
    assert config.destination_schema_registry_url == "http://dst:8081"
    assert (config.schema_sync, config.schema_compatibility) == ("lenient", "FULL")


def test_spec_registries_per_source_and_destination(tmp_path):
    from mirror_worker.config.spec import select_mirror

    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "g",
        "sources": [
            {"name": "a", "kafka": {"bootstrap.servers": "h:1"}, "schema-registry-url": "http://reg-a",
             "allow-insecure": ["http-registry"]},
            {"name": "b", "kafka": {"bootstrap.servers": "h:2"}},
        ],
        "destination": {"kafka": {"bootstrap.servers": "h:3"}, "schema-registry-url": "https://reg-dst"},
        "settings": {"schema-sync": "lenient"},
        "mirrors": [{"name": "m", "whitelist": "t", "schema-compatibility": "NONE"}],
    }]}))
    config = select_mirror(spec, "m")
    assert [config.source_registry_url(s) for s in config.sources] == ["http://reg-a", None]
    assert config.destination_schema_registry_url == "https://reg-dst"
    assert (config.schema_sync, config.schema_compatibility) == ("lenient", "NONE")


def test_unreachable_registry_error_hides_credentials():
    from mirror_worker.exceptions import SchemaRegistryUnavailable
    from mirror_worker.schemas.registry import Registry

    with pytest.raises(SchemaRegistryUnavailable) as info:
        Registry("http://user:s3cret@127.0.0.1:1/apis/ccompat/v7", "source 'dc1'").versions("orders-value")
    assert str(info.value).startswith("source 'dc1' schema registry unreachable: ")
    assert "s3cret" not in str(info.value) and "user" not in str(info.value)


@pytest.mark.parametrize("registries, argv, error", [
    (True, [], "the following arguments are required: --config"),
    (True, ["--mirror", "nope"], "no mirror named 'nope' (have: m)"),
    (False, ["--mirror", "m"], "mirror 'm' has no schema registries"),
    (True, ["--mirror", "m", "--topics", ","], "--topics: at least one topic name is required"),
])
def test_sync_schemas_bad_input_exits_2(tmp_path, capsys, registries, argv, error):
    from mirror_worker.__main__ import main

    spec = tmp_path / "spec.yaml"
    source = {"kafka": {"bootstrap.servers": "h:1"}}
    destination = {"kafka": {"bootstrap.servers": "h:2"}}
    if registries:
        source["schema-registry-url"], destination["schema-registry-url"] = "http://a", "http://b"
        source["allow-insecure"] = destination["allow-insecure"] = ["http-registry"]
    spec.write_text(json.dumps({"groups": [{"name": "g", "source": source, "destination": destination,
                                            "mirrors": [{"name": "m", "whitelist": "t"}]}]}))
    config = [] if argv == [] else ["--config", str(spec)]
    assert main(["sync-schemas", *config, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirror_worker: ") and error in err and len(err.strip().splitlines()) == 1


class FakeRegistry:
    """The few registry calls SchemaSyncer makes, in memory (ids global, versions per subject)."""

    def __init__(self, role: str, first_id: int = 1) -> None:
        self.role, self.next_id = role, first_id
        self.subjects: dict[str, list] = {}
        self.levels: dict[str | None, str] = {None: "BACKWARD"}

    def register(self, subject, version, references=()):
        from mirror_worker.schemas.registry import SubjectVersion

        versions = self.subjects.setdefault(subject, [])
        for existing in versions:
            if (existing.schema_str, existing.references) == (version.schema_str, tuple(references)):
                return existing.schema_id
        self.next_id += 1
        versions.append(SubjectVersion(len(versions) + 1, self.next_id, version.schema_type, version.schema_str,
                                       tuple(references)))
        return self.next_id

    def versions(self, subject):
        return list(self.subjects.get(subject, []))

    def has_subject(self, subject):
        return bool(self.subjects.get(subject))

    def subjects_of_id(self, schema_id):
        from mirror_worker.exceptions import UnknownSchemaId

        found = sorted(s for s, vs in self.subjects.items() if any(v.schema_id == schema_id for v in vs))
        if not found:
            raise UnknownSchemaId(f"schema id {schema_id} is not in the {self.role} registry")
        return found

    def compatibility(self, subject):
        return self.levels.get(subject)

    def set_compatibility(self, subject, level):
        self.levels[subject] = level


def _avro(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "long"} for f in fields]})


def test_syncer_translates_references_and_maps_ids():
    from mirror_worker.policy.naming import PrefixPolicy
    from mirror_worker.schemas.registry import Reference, SubjectVersion
    from mirror_worker.schemas.sync import SchemaSyncer

    source, destination = FakeRegistry("source"), FakeRegistry("destination", first_id=100)
    common = SubjectVersion(0, 0, "AVRO", _avro("Common", "a"), ())
    source.register("common", common)
    destination.register("common", SubjectVersion(0, 0, "AVRO", _avro("Extra", "x"), ()))  # common v1 there is another
    order = SubjectVersion(0, 0, "AVRO", _avro("Order", "id"), ())
    ref = (Reference("Common", "common", 1),)
    source.register("orders-value", order, ref)
    source.levels["orders-value"] = "FULL"
    syncer = SchemaSyncer(source, destination, PrefixPolicy("dc1."), LENIENT, "MIRROR")

    assert syncer.sync_topic("orders") == 2
    [copy] = destination.versions("dc1.orders-value")
    assert copy.references == (Reference("Common", "common", 2),)  # the copy of common v1 is v2 there
    assert destination.levels["dc1.orders-value"] == "FULL" and destination.levels["common"] == "BACKWARD"
    order_id = source.versions("orders-value")[0].schema_id
    assert syncer.id_headers[wire_format.header(order_id)] == wire_format.header(copy.schema_id)
    assert syncer.sync_topic("orders") == 0

    # A version registered on the source later is synced when a record first carries its id.
    new_id = source.register("orders-value", SubjectVersion(0, 0, "AVRO", _avro("Order", "id", "qty"), ()), ref)
    header = syncer.destination_header("orders", new_id)
    assert header == wire_format.header(destination.versions("dc1.orders-value")[1].schema_id)


def test_syncer_conflicts_and_unknown_ids():
    from mirror_worker.exceptions import SchemaConflict, UnknownSchemaId
    from mirror_worker.policy.naming import IdentityPolicy
    from mirror_worker.schemas.registry import SubjectVersion
    from mirror_worker.schemas.sync import SchemaSyncer

    source, destination = FakeRegistry("source"), FakeRegistry("destination", first_id=50)
    source.register("t-value", SubjectVersion(0, 0, "AVRO", _avro("A", "a"), ()))
    destination.register("t-value", SubjectVersion(0, 0, "AVRO", _avro("B", "b"), ()))
    syncer = SchemaSyncer(source, destination, IdentityPolicy(), STRICT, "NONE")
    with pytest.raises(SchemaConflict) as info:
        syncer.sync_topic("t")
    assert str(info.value) == ("schema conflict on topic t: subject t-value -> t-value: destination version 1 "
                               "differs from source version 1 (strict mode needs an exact copy)")
    assert len(destination.versions("t-value")) == 1
    with pytest.raises(UnknownSchemaId):
        syncer.destination_header("u", 12345)


def test_syncer_records_which_fields_are_framed_and_sees_a_late_subject():
    from mirror_worker.policy.naming import IdentityPolicy
    from mirror_worker.schemas.registry import SubjectVersion
    from mirror_worker.schemas.sync import SchemaSyncer

    source, destination = FakeRegistry("source"), FakeRegistry("destination", first_id=50)
    source.register("t-value", SubjectVersion(0, 0, "AVRO", _avro("A", "a"), ()))
    syncer = SchemaSyncer(source, destination, IdentityPolicy(), STRICT, "NONE")
    syncer.sync_topic("t")
    syncer.sync_topic("raw")
    assert (syncer.framing["t"].keys, syncer.framing["t"].values) == (False, True)
    assert (syncer.framing["raw"].keys, syncer.framing["raw"].values) == (False, False)

    assert (syncer.recheck_topic("raw").keys, syncer.recheck_topic("raw").values) == (False, False)
    late_id = source.register("raw-value", SubjectVersion(0, 0, "AVRO", _avro("L", "l"), ()))
    framing = syncer.recheck_topic("raw")
    assert (framing.keys, framing.values) == (False, True)
    # Synced before it is used: the late subject's id is mapped already.
    assert wire_format.header(late_id) in syncer.id_headers

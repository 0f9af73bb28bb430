"""Which fields of a topic get their schema ids rewritten, and when the registry is asked again (framing.py)."""

from __future__ import annotations

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.exceptions import ConfigError
from mirror_worker.schemas.framing import (
    MAX_ANSWERED_IDS,
    RECHECK_INTERVAL_S,
    TopicFraming,
    needs_recheck,
    rewritten_fields,
)

VALUES_ONLY = TopicFraming(keys=False, values=True, checked_at=1_000.0)
BOTH = TopicFraming(keys=True, values=True, checked_at=1_000.0)
FULL = set(range(MAX_ANSWERED_IDS))


@pytest.mark.parametrize("mode, framing, expected", [
    ("auto", VALUES_ONLY, (False, True)),
    ("auto", BOTH, (True, True)),
    ("auto", None, (False, False)),  # not looked up: nothing is framed until a subject says so
    ("force", None, (True, True)),
    ("force", VALUES_ONLY, (True, True)),
    ("off", BOTH, (False, False)),
])
def test_rewritten_fields(mode, framing, expected):
    assert rewritten_fields(mode, framing) == expected


@pytest.mark.parametrize("framing, ids, answered, now, expected", [
    (None, [5], set(), 1_000.0, True),
    (BOTH, [5], set(), 2_000.0, False),  # nothing left to find
    # An id the topic had not shown asks again at once, however recent the last look (and whatever the record's
    # timestamp: issue 43 defect 2); an id already answered does not, however long ago.
    (VALUES_ONLY, [5], set(), 1_000.0, True),
    (VALUES_ONLY, [5], {7}, 1_000.0, True),
    (VALUES_ONLY, [5, 7], {5}, 1_000.0, True),
    (VALUES_ONLY, [5], {5}, 1_000.0 + 3_600, False),
    (VALUES_ONLY, [5, 7], {5, 7}, 1_000.0 + 3_600, False),
    # Too many ids to remember (random bytes): at most once per interval.
    (VALUES_ONLY, [-1], FULL, 1_000.0 + RECHECK_INTERVAL_S - 0.01, False),
    (VALUES_ONLY, [-1], FULL, 1_000.0 + RECHECK_INTERVAL_S, True),
    (VALUES_ONLY, [0], FULL, 1_000.0 + 3_600, False),  # remembered
])
def test_needs_recheck(framing, ids, answered, now, expected):
    assert needs_recheck(framing, ids, answered, now) is expected


BASE = {
    "name": "m", "sources": [{"name": "s", "consumer": {"bootstrap.servers": "a:1"}}],
    "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g",
}


def test_schema_id_rewrite_defaults_to_auto_and_reads_yaml_off(tmp_path):
    from mirror_worker.config.spec import select_mirror

    assert build_mirror_config(BASE).schema_id_rewrite == "auto"
    spec = tmp_path / "spec.yaml"
    for written, expected in (("off", "off"), ('"off"', "off"), ("force", "force")):
        spec.write_text(f"""
groups:
  - name: g
    source: {{name: s, kafka: {{bootstrap.servers: "a:1"}}}}
    destination: {{kafka: {{bootstrap.servers: "b:1"}}}}
    mirrors:
      - {{name: m, whitelist: t, schema-id-rewrite: {written}}}
""")
        assert select_mirror(spec, "m").schema_id_rewrite == expected
    spec.write_text(spec.read_text().replace("force", "always"))
    with pytest.raises(ConfigError) as info:
        select_mirror(spec, "m")
    assert str(info.value).endswith("mirror 'm': schema-id-rewrite: Input should be 'auto', 'off' or 'force'")


def test_schema_id_rewrite_flag(tmp_path):
    from mirror_worker.commands.cli import config_from_args, parse_args

    consumer = tmp_path / "c.properties"
    consumer.write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\n")
    producer = tmp_path / "p.properties"
    producer.write_text("bootstrap.servers=127.0.0.1:2\n")
    config = config_from_args(parse_args(["--consumer.config", str(consumer), "--producer.config", str(producer),
                                          "--whitelist", "t", "--schema.id.rewrite", "force"]))
    assert config.schema_id_rewrite == "force"

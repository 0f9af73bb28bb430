"""Unknown keys of the YAML spec: every one reported in the one line, each with a suggestion when a known key
is close (issue 44: only the first was reported, with none)."""

from __future__ import annotations

import pytest

from mirror_worker.config.spec import load_entries, select_mirror
from mirror_worker.exceptions import ConfigError

SPEC = """\
groups:
  - name: g
    source: {name: src, kafka: {bootstrap.servers: "127.0.0.1:1"}}
    destination: {kafka: {bootstrap.servers: "127.0.0.1:2"}}
    mirrors:
      - name: m
        whitelist: "a"
{extra}
"""


def _error(tmp_path, extra: str) -> str:
    path = tmp_path / "mirrors.yaml"
    path.write_text(SPEC.replace("{extra}", extra))
    with pytest.raises(ConfigError) as caught:
        select_mirror(path, "m")
    return str(caught.value)


def test_every_unknown_mirror_key_is_reported_with_a_suggestion(tmp_path):
    message = _error(tmp_path, "        queue-sise: 10\n        preserve-partitionz: true\n        zzzz: 1")
    where = f"{tmp_path / 'mirrors.yaml'}: mirror 'm': "
    assert message == (where + "preserve-partitionz: unknown key (did you mean preserve-partitions?); "
                               "queue-sise: unknown key (did you mean queue-size?); zzzz: unknown key")
    assert "\n" not in message


def test_a_nested_unknown_key_is_suggested_from_its_own_level(tmp_path):
    message = _error(tmp_path, "        topic-creation: {replicaton-factor: 3}")
    assert message.endswith("topic-creation.replicaton-factor: unknown key (did you mean replication-factor?)")


def test_unknown_keys_beside_another_error_are_reported_first(tmp_path):
    message = _error(tmp_path, "        queue-size: lots\n        whitelistt: b")
    assert message.endswith("mirror 'm': whitelistt: unknown key (did you mean whitelist?)")


@pytest.mark.parametrize("text, message", [
    ("groupz: []\ngroup-id-prefx: x\n", "group-id-prefx: unknown key (did you mean group-id-prefix?); "
                                        "groupz: unknown key (did you mean groups?)"),
])
def test_unknown_top_level_keys_are_all_reported(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_entries(path)
    assert str(caught.value) == f"{path}: {message}"


def test_unknown_source_and_destination_keys_are_all_reported(tmp_path):
    path = tmp_path / "mirrors.yaml"
    path.write_text(SPEC.replace("{extra}", "").replace("kafka: {bootstrap.servers: \"127.0.0.1:1\"}",
                                                  "kafka: {bootstrap.servers: \"127.0.0.1:1\"}, schema-registry-uri: x, "
                                                  "nme: y"))
    [entry] = load_entries(path)
    assert entry.error.endswith("mirror 'm': source: nme: unknown key (did you mean name?); "
                                "schema-registry-uri: unknown key (did you mean schema-registry-url?)")

"""`load_entries(path, only=NAME)`: one mirror's entry exactly as the whole load gives it, validating only the
mirrors it depends on (a DAG file builds one mirror; validating the whole spec in each of N files made parsing
grow with N², issue 42)."""

from __future__ import annotations

import pytest

import mirror_worker.config.spec as spec_module
from mirror_worker.config.spec import load_entries

SPEC = """
group-id-prefix: "mirror."
groups:
  - name: main
    source: {name: src, kafka: {bootstrap.servers: "127.0.0.1:1"}}
    destination: {kafka: {bootstrap.servers: "127.0.0.1:2"}}
    settings: {preserve-partitions: true}
    mirrors:
      - name: orders
        whitelist: "orders.*"
        prefix: "src."
        provenance-headers: true
      - name: broken-owner
        whitelist: "x"
        group-id: shared
        preserve-partitionz: true
      - name: takes-shared
        whitelist: "y"
        group-id: shared
      - name: second-shared
        whitelist: "z"
        group-id: shared
      - name: users
        whitelist: "users"
        group-id: mirror.orders
      - name: orders-back
        reverse-of: orders
      - name: paused
        whitelist: "p"
        enabled: false
"""


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "mirrors.yaml"
    path.write_text(SPEC + "".join(f"      - name: m{i}\n        whitelist: \"t{i}\"\n" for i in range(40)))
    return path


def test_one_entry_is_the_whole_loads_entry_for_every_mirror(spec):
    whole = {entry.name: entry for entry in load_entries(spec)}
    # The cases that depend on other mirrors, as the whole load decides them:
    assert "is also mirror 'orders''s consumer group" in whole["users"].error
    # An invalid mirror owns no group: the next one naming it does.
    assert whole["broken-owner"].config is None and whole["takes-shared"].config is not None
    assert "is also mirror 'takes-shared''s" in whole["second-shared"].error
    assert whole["orders-back"].config.reverse_of.name == "orders" and whole["orders"].config.origin_records == "skip"
    for name, entry in whole.items():
        assert load_entries(spec, only=name) == [entry], name
    assert load_entries(spec, only="nobody") == []


def test_one_entry_validates_only_what_it_depends_on(spec, monkeypatch):
    validated = []
    real = spec_module._mirror_config
    monkeypatch.setattr(spec_module, "_mirror_config",
                        lambda group, mirror, *args, **kwargs: validated.append(mirror.get("name")) or
                        real(group, mirror, *args, **kwargs))
    load_entries(spec, only="m7")
    assert validated == ["m7"]
    validated.clear()
    load_entries(spec, only="second-shared")
    assert sorted(validated) == ["broken-owner", "second-shared", "takes-shared"]
    validated.clear()
    load_entries(spec, only="orders-back")
    assert sorted(validated) == ["orders", "orders-back"]
    validated.clear()
    load_entries(spec)
    assert len(validated) == 47

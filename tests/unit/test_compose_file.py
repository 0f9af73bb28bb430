"""docker-compose.yaml cannot run here (no Docker engine); check what can be checked without one."""

from __future__ import annotations

import base64

import yaml

from devstack.paths import ROOT


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_compose_has_both_clusters_and_registries():
    services = _compose()["services"]
    assert {"kafka-source", "kafka-destination", "registry-source", "registry-destination"} <= set(services)


def test_kafka_cluster_ids_are_valid_and_distinct():
    services = _compose()["services"]
    ids = [services[s]["environment"]["CLUSTER_ID"] for s in ("kafka-source", "kafka-destination")]
    assert len(set(ids)) == 2
    for cluster_id in ids:
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_published_ports_do_not_collide():
    published = [p.split(":")[0] for s in _compose()["services"].values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))

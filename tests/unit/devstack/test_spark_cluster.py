"""SparkCluster's look-up of an application in the master's JSON view: by name while the name is the master's
only one, else by the id the job recorded (a cluster shared by several tests runs a job's fixed name again)."""

from __future__ import annotations

import pytest

from devstack.errors import StackError
from devstack.spark_cluster import SparkCluster

STATE = {"activeapps": [{"id": "app-3", "name": "consistency_check"}],
         "completedapps": [{"id": "app-1", "name": "mirror-catchup"}, {"id": "app-2", "name": "mirror-catchup"}]}


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> SparkCluster:
    cluster = SparkCluster(tmp_path)
    monkeypatch.setattr(cluster, "state", lambda: STATE)
    return cluster


def test_an_application_is_found_by_its_only_name_running_or_completed(cluster):
    assert cluster.application("consistency_check")["id"] == "app-3"


def test_a_name_run_twice_is_refused_and_the_id_finds_each(cluster):
    with pytest.raises(StackError, match="2 applications named 'mirror-catchup'"):
        cluster.application("mirror-catchup")
    assert cluster.application(app_id="app-2") == {"id": "app-2", "name": "mirror-catchup"}
    with pytest.raises(StackError, match="0 applications with id app-9"):
        cluster.application(app_id="app-9")


def test_a_name_or_an_id_not_both(cluster):
    with pytest.raises(ValueError):
        cluster.application("mirror-catchup", app_id="app-1")
    with pytest.raises(ValueError):
        cluster.application()

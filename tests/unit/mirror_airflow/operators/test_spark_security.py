"""The Spark operators apply the jobs' security posture before spark-submit (issue 46 item 5): a mirror with
credentials goes to a cluster only with authentication and RPC encryption on, else the task fails first."""

from __future__ import annotations

import json
import shutil

import pytest

from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator
from spark_jobs.api import UnprotectedCredentials
from tests.worker_util import write_mirror_spec

SASL = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
        "sasl.password": "Op-Pa55word-1234"}


@pytest.fixture
def spec(tmp_path):
    return write_mirror_spec(tmp_path / "mirrors.yaml", None, "orders", "orders", source="src:9092",
                             destination="dst:9092", source_kafka=SASL)


@pytest.fixture
def conf_dir(tmp_path, monkeypatch):
    directory = tmp_path / "spark-conf"
    directory.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(directory))
    return directory


def prepared(kind, spec, host: str, port: int | None, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_T", json.dumps({"conn_type": "spark", "host": host,
                                                           **({"port": port} if port else {})}))
    op = kind(task_id="t", spec_path=str(spec), mirror_name="orders", conn_id="spark_t", report_dir=str(tmp_path))
    try:
        op.prepare({"params": {}})
    finally:
        if op.shipped_dir is not None:
            shutil.rmtree(op.shipped_dir, ignore_errors=True)
    return op


@pytest.mark.parametrize("kind", [CatchupOperator, ConsistencyCheckOperator])
def test_a_mirror_with_credentials_is_refused_for_a_cluster_without_the_shared_secret(kind, spec, conf_dir, tmp_path,
                                                                                       monkeypatch):
    with pytest.raises(UnprotectedCredentials) as refused:
        prepared(kind, spec, "spark://h", 7077, tmp_path, monkeypatch)
    assert str(refused.value).startswith("refused: the mirror's credentials (source east sasl.password) would "
                                         "reach spark://h:7077 over unauthenticated, unencrypted RPC: no "
                                         "spark.authenticate.secret")
    assert "Op-Pa55word" not in str(refused.value)


def test_with_the_secret_in_spark_defaults_authentication_and_encryption_are_submitted(spec, conf_dir, tmp_path,
                                                                                      monkeypatch):
    (conf_dir / "spark-defaults.conf").write_text("spark.authenticate.secret shared-0123\n")
    op = prepared(CatchupOperator, spec, "spark://h", 7077, tmp_path, monkeypatch)
    assert {k: op.conf.get(k) for k in ("spark.authenticate", "spark.network.crypto.enabled", "spark.acls.enable")} \
        == {"spark.authenticate": "true", "spark.network.crypto.enabled": "true", "spark.acls.enable": "true"}
    assert "kafka.ssl.keystore.key" not in op.conf["spark.redaction.regex"]  # a pattern, not keys
    assert "jaas" in op.conf["spark.redaction.regex"]
    assert "shared-0123" not in json.dumps(op.conf)  # the secret stays in its file, off spark-submit's argv


def test_a_local_master_or_a_mirror_without_credentials_runs_as_before(tmp_path, conf_dir, monkeypatch, spec):
    op = prepared(CatchupOperator, spec, "local[2]", None, tmp_path, monkeypatch)
    assert "spark.authenticate" not in op.conf and op.conf["spark.acls.enable"] == "true"
    plain = write_mirror_spec(tmp_path / "plain.yaml", None, "orders", "orders", source="src:9092",
                              destination="dst:9092")
    op = prepared(CatchupOperator, plain, "spark://h", 7077, tmp_path, monkeypatch)
    assert "spark.authenticate" not in op.conf

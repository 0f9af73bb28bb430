"""The jobs refuse, before any client, lease or Spark session, to ship credentials to an unprotected cluster
(spark_jobs/common/session.py and cluster_security.py; issue 46 item 5)."""

from __future__ import annotations

import pytest

from spark_jobs.catchup.job import main as catchup_main
from spark_jobs.common.cluster_security import UnprotectedCredentials
from spark_jobs.common.session import protection, refuse_unprotected
from tests.worker_util import write_mirror_spec

SASL = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
        "sasl.password": "Job-Pa55word-5678"}


@pytest.fixture
def conf_dir(tmp_path, monkeypatch):
    directory = tmp_path / "spark-conf"
    directory.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(directory))
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_MASTER"):  # not under spark-submit
        monkeypatch.delenv(name, raising=False)
    return directory


def test_the_catchup_refuses_in_one_line_before_it_reaches_a_cluster(tmp_path, conf_dir, capsys):
    # Unreachable clusters: a refusal that came after the first client would be a timeout, not this line.
    spec = write_mirror_spec(tmp_path / "m.yaml", None, "orders", "orders", source="127.0.0.1:9",
                             destination="127.0.0.1:9", source_kafka=SASL)

    code = catchup_main(["--config", str(spec), "--mirror", "orders", "--master", "spark://127.0.0.1:9"])

    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("catchup: refused: the mirror's credentials (source east sasl.password) would reach "
                          "spark://127.0.0.1:9 over unauthenticated, unencrypted RPC: no spark.authenticate.secret")
    assert "Job-Pa55word" not in err


def test_the_secret_in_spark_defaults_turns_protection_on_for_the_session(conf_dir):
    with pytest.raises(UnprotectedCredentials):
        refuse_unprotected("spark://h:7077", ["source sasl.password"])
    (conf_dir / "spark-defaults.conf").write_text("spark.authenticate.secret shared\n")
    refuse_unprotected("spark://h:7077", ["source sasl.password"])
    added = protection("spark://h:7077", {}, ["source sasl.password"])
    assert added["spark.authenticate"] == added["spark.network.crypto.enabled"] == "true"
    # No master given: local[*] unless the conf names one (create_session's rule), whatever spark-defaults say.
    (conf_dir / "spark-defaults.conf").write_text("spark.master spark://h:7077\n")
    assert "spark.authenticate" not in protection(None, {}, ["source sasl.password"])
    with pytest.raises(UnprotectedCredentials):
        protection(None, {"spark.master": "spark://h:7077"}, ["source sasl.password"])

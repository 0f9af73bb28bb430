"""Where the consistency check's Kafka connector comes from (spark_jobs/common/connector.py): one decision for the
jobs and the Airflow operators. Issue 44 item 1: an installed wheel has no checkout, and the check exited 3 with
"connector jar missing in …/site-packages/.cache/spark/jars: run `make setup`"."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from spark_jobs.common import connector
from spark_jobs.common.connector import (
    CHECK_JAR, SHIPPED_BY_SPARK, KafkaConnector, KafkaConnectorMissing, kafka_connector, spark_build,
)

SCALA, SPARK = "2.13", "9.8.7"
COORDINATES = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{SPARK}"


def jars(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")
    return directory


@pytest.fixture
def where(tmp_path):
    """A Spark distribution (SPARK_HOME with its spark-core jar), the check's jar, and a checkout's jars folder
    that does not exist (an installed package's)."""
    home = jars(tmp_path / "spark" / "jars", f"spark-core_{SCALA}-{SPARK}.jar").parent
    reader = jars(tmp_path / "pkg", "mirror-check.jar") / "mirror-check.jar"
    return {"environ": {"SPARK_HOME": str(home), "MIRROR_CHECK_JAR": str(reader)}, "reader": str(reader),
            "checkout": tmp_path / "site-packages" / ".cache" / "spark" / "jars", "tmp": tmp_path}


CONNECTOR_JARS = ("commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-9.8.7.jar")


def test_an_installed_package_without_a_checkout_lets_spark_resolve_the_connector_at_its_version(where):
    found = kafka_connector({}, where["environ"], where["checkout"])

    assert found == KafkaConnector(jars=(where["reader"],), packages=(COORDINATES,), excludes=(
        "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime", "at.yawk.lz4:lz4-java",
        "org.xerial.snappy:snappy-java", "org.slf4j:slf4j-api", "com.google.code.findbugs:jsr305",
        f"org.scala-lang.modules:scala-parallel-collections_{SCALA}"), origin="spark.jars.packages")
    # A site's own packages stay, first; its repositories (spark.jars.repositories, ivySettings) are Spark's own.
    assert found.spark_conf({"spark.jars.packages": "a:b:1", "spark.jars": "/x.jar"}) == {
        "spark.jars": f"/x.jar,{where['reader']}", "spark.jars.packages": f"a:b:1,{COORDINATES}",
        "spark.jars.excludes": ",".join(found.excludes)}


def test_a_checkout_uses_the_jars_make_setup_fetched(where):
    checkout = jars(where["checkout"], *CONNECTOR_JARS)

    found = kafka_connector({}, where["environ"], checkout)

    assert found == KafkaConnector(jars=(*(str(checkout / n) for n in CONNECTOR_JARS), where["reader"]),
                                   origin=str(checkout))
    assert found.spark_conf({}) == {"spark.jars": ",".join(found.jars)}


def test_spark_kafka_jars_wins_over_the_checkout_and_a_folder_without_the_connector_is_one_line(where):
    jars(where["checkout"], *CONNECTOR_JARS)
    named = jars(where["tmp"] / "site-jars", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-9.8.7.jar",
                 "mirror-check.jar")

    found = kafka_connector({}, {**where["environ"], "SPARK_KAFKA_JARS": str(named)}, where["checkout"])

    # The folder's own mirror-check.jar, not the package's.
    assert found.jars == tuple(str(named / n) for n in ("kafka-clients-3.9.2.jar", "mirror-check.jar",
                                                        "spark-sql-kafka-0-10_2.13-9.8.7.jar"))
    assert found.packages == () and found.origin == f"SPARK_KAFKA_JARS={named}"

    empty = jars(where["tmp"] / "empty", "kafka-clients-3.9.2.jar")
    with pytest.raises(KafkaConnectorMissing) as missing:
        kafka_connector({}, {**where["environ"], "SPARK_KAFKA_JARS": str(empty)}, where["checkout"])
    assert str(missing.value) == (f"spark-sql-kafka-0-10 connector jar missing in {empty} (SPARK_KAFKA_JARS): put its "
                                  f"jars there, or unset SPARK_KAFKA_JARS to let Spark resolve it (spark.jars.packages)")


@pytest.mark.parametrize("conf", [
    {"spark.jars": "/opt/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar,/opt/jars/kafka-clients-3.9.2.jar"},
    {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"},
])
def test_a_spark_conf_that_names_the_connector_gets_only_the_check_jar(where, conf):
    jars(where["checkout"], *CONNECTOR_JARS)

    found = kafka_connector(conf, where["environ"], where["checkout"])

    assert (found.jars, found.packages, found.origin) == ((where["reader"],), (), "the Spark conf")
    # A command line's --jars replaces spark-defaults' spark.jars: the conf's jars are kept, the reader added.
    assert found.spark_conf(conf) == {"spark.jars": ",".join([*filter(None, conf.get("spark.jars", "").split(",")),
                                                              where["reader"]])}


def test_an_empty_mirror_check_jar_leaves_the_reader_out(where):
    found = kafka_connector({}, {**where["environ"], "MIRROR_CHECK_JAR": ""}, where["checkout"])
    assert (found.jars, found.packages) == ((), (COORDINATES,))
    assert "spark.jars" not in found.spark_conf({})


def test_no_spark_and_no_jars_is_one_line_naming_the_settings(where):
    with pytest.raises(KafkaConnectorMissing, match=r"^spark-sql-kafka-0-10 connector: no Spark found \(SPARK_HOME "
                                                    r"or pyspark\) to resolve it for, and none given: set "
                                                    r"SPARK_KAFKA_JARS \(a directory of its jars\), spark.jars or "
                                                    r"spark.jars.packages$"):
        kafka_connector({}, {"SPARK_HOME": str(where["tmp"] / "nowhere")}, where["checkout"])


def test_the_running_pyspark_names_its_own_version_and_ships_what_is_excluded():
    """The coordinates follow the Spark that runs (pyspark's jars here), and every excluded artifact is one of
    its jars: leaving it out of Ivy's resolution loses nothing."""
    import pyspark

    scala, spark = spark_build({})
    assert spark == pyspark.__version__ == version("pyspark")
    shipped = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")]
    for artifact in SHIPPED_BY_SPARK:
        name = artifact.format(scala=scala).split(":")[1]
        assert any(j.startswith(f"{name}-") for j in shipped), f"{name} is not in pyspark's jars"


def test_the_package_default_reader_is_the_one_beside_the_code():
    assert CHECK_JAR == Path(connector.__file__).parents[1] / "jars" / "mirror-check.jar"


UNRESOLVABLE = """
import pathlib, sys
from spark_jobs.common import connector
connector.CHECKOUT_JARS = pathlib.Path(sys.argv[1])  # an installed package's: no checkout jars
from spark_jobs.common.session import create_session
try:
    create_session("unresolvable", "local[1]")
except connector.KafkaConnectorMissing as exc:
    print(exc)
"""


@pytest.mark.spark
def test_a_connector_ivy_cannot_resolve_is_one_line_naming_the_settings(tmp_path):
    """Spark's Ivy with a site's settings whose only repository is empty (as a host without Maven Central): the
    driver's spark-submit exits before the session is up; the job says why in one line, not pyspark's
    JAVA_GATEWAY_EXITED."""

    import pyspark

    (tmp_path / "repo").mkdir()
    (tmp_path / "ivysettings.xml").write_text(
        '<ivysettings><settings defaultResolver="site"/><resolvers><filesystem name="site">'
        f'<artifact pattern="{tmp_path}/repo/[organisation]/[module]/[revision]/[artifact].[ext]"/>'
        '</filesystem></resolvers></ivysettings>')
    (tmp_path / "spark-defaults.conf").write_text(f"spark.jars.ivySettings {tmp_path}/ivysettings.xml\n"
                                                  f"spark.jars.ivy {tmp_path}/ivy\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_KAFKA_JARS", "PYSPARK_GATEWAY_PORT")}
    done = subprocess.run([sys.executable, "-c", UNRESOLVABLE, str(tmp_path / "none")], capture_output=True,
                          text=True, timeout=120, env={**env, "SPARK_CONF_DIR": str(tmp_path)})

    # Ivy writes its own lines first (":: loading settings :: …" on stdout, the rest on stderr).
    assert done.stdout.splitlines()[-1:] == [
        f"Spark did not start: Ivy did not resolve the Kafka connector org.apache.spark:spark-sql-kafka-0-10_2.13:"
        f"{pyspark.__version__} (spark.jars.packages) from Maven Central or spark.jars.repositories / "
        f"spark.jars.ivySettings (its lines above say why); offline, give its jars in SPARK_KAFKA_JARS or spark.jars"
    ], done.stderr[-3000:]

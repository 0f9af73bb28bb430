"""Where a Spark application of the mirror gets Spark's Kafka source (spark-sql-kafka-0-10, which the consistency
check reads with; the catch-up's tasks read with librdkafka and need none): one decision, `kafka_connector`, for
the jobs (spark_jobs.common.session) and the Airflow operators (mirror_airflow/operators/spark.py), first match:

1. SPARK_KAFKA_JARS names a directory: its jars (spark.jars, spark-submit's --jars). One without the connector is
   an error, never a fall-through: the operator asked for those jars.
2. The application's Spark conf (spark-defaults.conf, the submission's conf) names the connector already in
   spark.jars or spark.jars.packages: nothing is added.
3. A checkout's .cache/spark/jars (`make setup`, java/spark/pom.xml) holds the connector: those (development).
4. Otherwise its Maven coordinates at the running Spark's version (spark.jars.packages, --packages), which
   spark-submit resolves with Spark's own Ivy from Maven Central, or from spark.jars.repositories /
   spark.jars.ivySettings (a site mirror), into its Ivy cache (spark.jars.ivy, default ~/.ivy2.5.2). The
   connector's dependencies that pyspark's distribution ships already are excluded (spark.jars.excludes), else
   Ivy adds 50 MB of Hadoop client jars that every executor would fetch again.

The check's JVM digest reader (spark_jobs/jars/mirror-check.jar, package data) joins the jars in every case;
MIRROR_CHECK_JAR names another, an empty value leaves it out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.common.cluster_security import spark_home

JARS_VARIABLE = "SPARK_KAFKA_JARS"
CHECK_JAR_VARIABLE = "MIRROR_CHECK_JAR"
# The connector jars fetched by `make setup` into a checkout (parents[2]: the repo; in an installed package,
# site-packages, which has no .cache).
CHECKOUT_JARS = Path(__file__).resolve().parents[2] / ".cache" / "spark" / "jars"
# The consistency check's JVM digest reader ships in the package (`make setup` compiles it there before a wheel
# is built, pyproject.toml's package data).
CHECK_JAR = Path(__file__).resolve().parents[1] / "jars" / "mirror-check.jar"  # spark_jobs/jars/

CONNECTOR = "spark-sql-kafka-0-10"
# The connector's dependencies that pyspark's jars/ holds at the same versions (tests/unit checks they are there).
SHIPPED_BY_SPARK = (
    "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime", "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java", "org.slf4j:slf4j-api", "com.google.code.findbugs:jsr305",
    "org.scala-lang.modules:scala-parallel-collections_{scala}",
)
SETTINGS = f"{JARS_VARIABLE} (a directory of its jars), spark.jars or spark.jars.packages"


class KafkaConnectorMissing(FileNotFoundError):
    """No Kafka connector for a job that reads with Spark's Kafka source, and no way to get one."""


@dataclass(frozen=True)
class KafkaConnector:
    """What a submission adds for the connector: jars (spark.jars, --jars), Maven coordinates to resolve
    (spark.jars.packages, --packages) and what to leave out of their resolution (spark.jars.excludes,
    --exclude-packages); `origin` says where the connector comes from."""

    jars: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    origin: str = ""

    def spark_conf(self, conf: Mapping[str, str]) -> dict[str, str]:
        """The spark.jars, spark.jars.packages and spark.jars.excludes of an application whose conf is `conf`: its
        own entries, then these. A value given on the command line replaces spark-defaults' (a session's builder
        passes its conf as --conf), so the conf's entries are kept here."""
        merged = {}
        for key, added in (("spark.jars", self.jars), ("spark.jars.packages", self.packages),
                           ("spark.jars.excludes", self.excludes)):
            own = entries(conf.get(key))
            if added:
                merged[key] = ",".join([*own, *(a for a in added if a not in own)])
        return merged

    def unresolved(self) -> str:
        """The one line for a driver that did not start while these packages were to be resolved."""
        return (f"Spark did not start: Ivy did not resolve the Kafka connector {','.join(self.packages)} "
                f"(spark.jars.packages) from Maven Central or spark.jars.repositories / spark.jars.ivySettings "
                f"(its lines above say why); offline, give its jars in {JARS_VARIABLE} or spark.jars")


def entries(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


def connector_jars(directory: Path) -> list[str]:
    """The directory's jars when one of them is the connector's, else []."""
    jars = sorted(str(p) for p in Path(directory).glob("*.jar"))
    return jars if any(CONNECTOR in Path(j).name for j in jars) else []


def spark_build(environ: Mapping[str, str] = os.environ) -> tuple[str, str] | None:
    """(Scala binary version, Spark version) of the Spark spark-submit runs, from its spark-core jar (SPARK_HOME's
    jars/, else pyspark's); None without one."""
    for jar in sorted((spark_home(environ) / "jars").glob("spark-core_*.jar")):
        match = re.fullmatch(r"spark-core_(\d+\.\d+)-(.+)\.jar", jar.name)
        if match:
            return match.group(1), match.group(2)
    return None


def coordinates(scala: str, version: str) -> str:
    return f"org.apache.spark:{CONNECTOR}_{scala}:{version}"


def check_jar(environ: Mapping[str, str], beside: Iterable[str] = ()) -> list[str]:
    """The digest reader, unless MIRROR_CHECK_JAR is empty, it is not there, or `beside` has a jar of its name."""
    reader = Path(environ.get(CHECK_JAR_VARIABLE, CHECK_JAR))
    if str(reader) == "." or not reader.is_file() or any(Path(j).name == reader.name for j in beside):
        return []
    return [str(reader)]


def kafka_connector(conf: Mapping[str, str], environ: Mapping[str, str] = os.environ,
                    checkout_jars: Path | None = None) -> KafkaConnector:
    """The connector of an application whose Spark conf (spark-defaults and the submission's) is `conf`, decided
    as the module doc says; KafkaConnectorMissing when there is none to give."""
    named = environ.get(JARS_VARIABLE)
    if named:
        jars = connector_jars(Path(named))
        if not jars:
            raise KafkaConnectorMissing(f"{CONNECTOR} connector jar missing in {named} ({JARS_VARIABLE}): put its "
                                        f"jars there, or unset {JARS_VARIABLE} to let Spark resolve it "
                                        f"(spark.jars.packages)")
        return KafkaConnector(jars=(*jars, *check_jar(environ, jars)), origin=f"{JARS_VARIABLE}={named}")
    if any(CONNECTOR in entry for key in ("spark.jars", "spark.jars.packages") for entry in entries(conf.get(key))):
        return KafkaConnector(jars=tuple(check_jar(environ, entries(conf.get("spark.jars")))), origin="the Spark conf")
    checkout = checkout_jars or CHECKOUT_JARS
    jars = connector_jars(checkout)
    if jars:
        return KafkaConnector(jars=(*jars, *check_jar(environ, jars)), origin=str(checkout))
    build = spark_build(environ)
    if build is None:
        raise KafkaConnectorMissing(f"{CONNECTOR} connector: no Spark found (SPARK_HOME or pyspark) to resolve it "
                                    f"for, and none given: set {SETTINGS}")
    scala, version = build
    return KafkaConnector(jars=tuple(check_jar(environ)), packages=(coordinates(scala, version),),
                          excludes=tuple(e.format(scala=scala) for e in SHIPPED_BY_SPARK),
                          origin="spark.jars.packages")

#!/usr/bin/env bash
# make setup: what `make run` needs (the venv, the project's package, Kafka, the Spark connector, the check's jar,
# the schema registry), from PyPI and Maven Central into git-ignored places of the repo (.venv/, .cache/, and
# Maven's ~/.m2), as the user who runs it: no package manager, no root. The tools only the tests use come from
# scripts/setup-test.sh (`make test`). Idempotent: a second run only verifies.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SETUP_NAME=setup
source "$ROOT/scripts/common.sh"

# --- prerequisites -------------------------------------------------------------------------------
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
       && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || die "Python 3.11 is missing (set PYTHON=/path/to/python3.11 or install python3.11)"
command -v java >/dev/null 2>&1 || die "Java is missing: install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless)"
command -v javac >/dev/null 2>&1 || die "javac is missing: install a JDK 17 or newer, not only a Java runtime"
command -v mvn >/dev/null 2>&1 || die "Maven is missing: install it (Debian: apt-get install maven)"
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${java_major:-0}" -ge 17 ] || die "Java 17 or newer is needed, found: $(java -version 2>&1 | head -1)"

# --- Python venv -----------------------------------------------------------------------------------
# requirements.txt only: the test packages (some need Python 3.11.5+) come from scripts/setup-test.sh.
venv_stamp=$(stamp_of requirements.txt constraints.txt)
if [ -x .venv/bin/python ] && fresh venv "$venv_stamp"; then
  say "venv ok"
else
  say "creating .venv (Airflow, Spark, confluent-kafka: a few minutes the first time)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt -c constraints.txt
  mark venv "$venv_stamp"
fi
# pyspark-client (from the Spark provider) writes over pyspark's files; with equal pins that is
# harmless, but verify that pyspark is whole, and reinstall it last if it is not.
pyspark_pin=$(sed -n 's/^pyspark==//p' requirements.txt)
if ! .venv/bin/python - "$pyspark_pin" <<'EOF'
import sys, pathlib, pyspark
ok = pyspark.__version__ == sys.argv[1] and any((pathlib.Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
sys.exit(0 if ok else 1)
EOF
then
  say "reinstalling pyspark==$pyspark_pin over pyspark-client's files"
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "pyspark==$pyspark_pin"
fi

# The repo's distribution kafka-mirror (mirror_worker, spark_jobs, and mirror_airflow from plugins/, an Airflow
# provider through its apache_airflow_provider entry point), editable: `airflow providers list` shows it.
# --no-deps: its requirements are the pinned ones installed above. The distribution's former name held
# mirror_airflow only and names the same provider: Airflow refuses two, so it goes.
provider_stamp=$(printf '%s\n' "$ROOT" | cat - pyproject.toml | sha256sum | cut -c1-16)
if fresh provider "$provider_stamp" && .venv/bin/python -m pip show -q kafka-mirror >/dev/null 2>&1; then
  say "kafka-mirror package ok"
else
  if .venv/bin/python -m pip show -q airflow-provider-kafka-mirror >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall -q -y airflow-provider-kafka-mirror
  fi
  rm -rf plugins/airflow_provider_kafka_mirror.egg-info  # its build metadata: Airflow would still find it there
  say "installing the project's package kafka-mirror (editable)"
  .venv/bin/python -m pip install -q --no-deps -e .
  mark provider "$provider_stamp"
fi

# --- Java parts from Maven Central ----------------------------------------------------------------
kafka_stamp=$(stamp_of java/kafka/pom.xml java/settings.xml)
if compgen -G "$CACHE/kafka/libs/kafka_2.13-*.jar" >/dev/null && fresh kafka "$kafka_stamp"; then
  say "kafka jars ok"
else
  say "fetching the Apache Kafka broker from Maven Central"
  rm -rf "$CACHE/kafka/libs"
  mvn_logged kafka -f java/kafka/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$CACHE/kafka/libs" -DincludeScope=runtime
  mark kafka "$kafka_stamp"
fi

spark_stamp=$(stamp_of java/spark/pom.xml java/settings.xml requirements.txt)
spark_pom_version=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' java/spark/pom.xml)
[ "$spark_pom_version" = "$pyspark_pin" ] \
  || die "java/spark/pom.xml spark.version ($spark_pom_version) must equal requirements.txt's pyspark ($pyspark_pin)"
if compgen -G "$CACHE/spark/jars/spark-sql-kafka-*.jar" >/dev/null && fresh spark "$spark_stamp"; then
  say "spark kafka jars ok"
else
  say "fetching spark-sql-kafka-0-10 $spark_pom_version from Maven Central"
  rm -rf "$CACHE/spark/jars"
  # Only what pyspark does not ship already.
  mvn_logged spark -f java/spark/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$CACHE/spark/jars" -DincludeScope=runtime \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
  mark spark "$spark_stamp"
fi

# The consistency check's digest reader (java/check/, spark_jobs/check/jvm.py), built into the package
# (spark_jobs/jars/, git-ignored) so that a wheel built afterwards ships it and the installed package finds it.
check_stamp=$(stamp_of java/check/src/mirror/check/*.java scripts/build-check-jar.sh requirements.txt)
rm -f "$CACHE/spark/jars/mirror-check.jar"  # where it was built before: a stale copy there would win
if [ -f spark_jobs/jars/mirror-check.jar ] && fresh check "$check_stamp"; then
  say "check jar ok"
else
  say "compiling the consistency check's JVM digest reader"
  pyspark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  mkdir -p spark_jobs/jars
  bash scripts/build-check-jar.sh "$pyspark_jars" "$CACHE/spark/jars" spark_jobs/jars/mirror-check.jar
  mark check "$check_stamp"
fi

registry_stamp=$(stamp_of java/apicurio/pom.xml java/apicurio/.mvn/maven.config java/settings.xml)
if [ -f "$CACHE/apicurio/quarkus-app/quarkus-run.jar" ] && fresh registry "$registry_stamp"; then
  say "schema registry ok"
else
  say "assembling Apicurio Registry (Confluent API) from Maven Central (about 3 minutes the first time)"
  # The POM unpacks the app, runs Quarkus augmentation and copies the result to .cache/apicurio/.
  mvn_logged registry -f java/apicurio/pom.xml package
  rm -rf java/apicurio/target
  [ -f "$CACHE/apicurio/quarkus-app/quarkus-run.jar" ] || die "schema registry build produced no quarkus-run.jar"
  mark registry "$registry_stamp"
fi

say "ready"

#!/usr/bin/env bash
# build-check-jar.sh PYSPARK_JARS KAFKA_JARS OUT_JAR: compiles the consistency check's JVM digest reader
# (java/check/src/) against pyspark's jars and the Kafka connector's, into OUT_JAR. Needs a JDK (javac,
# jar). Used by scripts/setup.sh and docker/airflow/Dockerfile.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pyspark_jars=$1 kafka_jars=$2 out=$3
command -v javac >/dev/null 2>&1 || { echo "javac is missing: install a JDK 17 or newer (Debian: openjdk-17-jdk-headless)" >&2; exit 1; }
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -Xlint:all,-path,-serial -Werror -d "$classes" -cp "$pyspark_jars/*:$kafka_jars/*" "$ROOT"/java/check/src/mirror/check/*.java
jar cf "$out.tmp" -C "$classes" .
mv "$out.tmp" "$out"

#!/usr/bin/env bash
# make bench: what only the benchmark needs, on top of `make setup` — Apache MirrorMaker 2 (the peer
# the worker is compared with) from Maven Central into .cache/mm2/libs. Stamped like scripts/setup.sh;
# kept out of `make setup` so `make test` and CI do not fetch it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CACHE="$ROOT/.cache"
STAMPS="$CACHE/stamps"
mkdir -p "$STAMPS" "$CACHE/logs"

say() { printf 'setup-bench: %s\n' "$*"; }
die() { printf 'setup-bench: %s\n' "$*" >&2; exit 1; }

broker_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' java/kafka/pom.xml)
mm2_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' java/mm2/pom.xml)
[ "$broker_version" = "$mm2_version" ] \
  || die "java/mm2/pom.xml kafka.version ($mm2_version) must equal java/kafka/pom.xml's ($broker_version)"

stamp=$(cat java/mm2/pom.xml java/settings.xml | sha256sum | cut -c1-16)
if compgen -G "$CACHE/mm2/libs/connect-mirror-*.jar" >/dev/null \
   && [ -f "$STAMPS/mm2" ] && [ "$(cat "$STAMPS/mm2")" = "$stamp" ]; then
  say "mirrormaker 2 jars ok"
  exit 0
fi
say "fetching Apache MirrorMaker 2 $mm2_version (connect-mirror) from Maven Central"
rm -rf "$CACHE/mm2/libs"
if ! mvn -q -B -s java/settings.xml -f java/mm2/pom.xml dependency:copy-dependencies \
     -DoutputDirectory="$CACHE/mm2/libs" -DincludeScope=runtime > "$CACHE/logs/mm2.log" 2>&1; then
  tail -n 30 "$CACHE/logs/mm2.log" >&2
  die "Maven failed for mm2 (full log: $CACHE/logs/mm2.log)"
fi
echo "$stamp" > "$STAMPS/mm2"
say "ready"

#!/usr/bin/env bash
# make bench: what only the benchmark needs, on top of `make setup` — Apache MirrorMaker 2 (the peer
# the worker is compared with) from Maven Central into .cache/mm2/libs. Stamped like scripts/setup.sh;
# kept out of `make setup` so `make test` and CI do not fetch it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SETUP_NAME=setup-bench
source "$ROOT/scripts/common.sh"
source "$ROOT/scripts/apt.sh"

broker_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' java/kafka/pom.xml)
mm2_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' java/mm2/pom.xml)
[ "$broker_version" = "$mm2_version" ] \
  || die "java/mm2/pom.xml kafka.version ($mm2_version) must equal java/kafka/pom.xml's ($broker_version)"

# The loss rows of `make bench-wan` (bench/packet_loss.py): iptables, as root (bench.wan refuses --loss-pct
# without it and says so).
if [ "$(id -u)" -eq 0 ] && ! command -v iptables-legacy >/dev/null 2>&1 && ! command -v iptables >/dev/null 2>&1; then
  apt_install iptables "bench.wan's packet-loss rows" iptables
fi

stamp=$(stamp_of java/mm2/pom.xml java/settings.xml)
if compgen -G "$CACHE/mm2/libs/connect-mirror-*.jar" >/dev/null && fresh mm2 "$stamp"; then
  say "mirrormaker 2 jars ok"
  exit 0
fi
say "fetching Apache MirrorMaker 2 $mm2_version (connect-mirror) from Maven Central"
rm -rf "$CACHE/mm2/libs"
mvn_logged mm2 -f java/mm2/pom.xml dependency:copy-dependencies -DoutputDirectory="$CACHE/mm2/libs" -DincludeScope=runtime
mark mm2 "$stamp"
say "ready"

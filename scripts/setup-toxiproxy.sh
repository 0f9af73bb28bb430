#!/usr/bin/env bash
# setup-toxiproxy.sh: Toxiproxy (Shopify), the proxy in front of each broker for the fault tests (`make test`)
# and the WAN benchmark (`make bench-wan`), built with `go install` from the Go module proxy into
# .cache/toxiproxy/bin/, as the user who runs it. Needs Go 1.17 or newer. Idempotent (stamped).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SETUP_NAME=setup-toxiproxy
source "$ROOT/scripts/common.sh"

TOXIPROXY_VERSION=v2.5.0  # the newest v2 the Go module proxy serves (`go list -m -versions github.com/Shopify/toxiproxy/v2`)
if [ -x "$CACHE/toxiproxy/bin/toxiproxy-server" ] && fresh toxiproxy "$TOXIPROXY_VERSION"; then
  say "toxiproxy ok"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "Go is missing: install Go 1.17 or newer (https://go.dev/dl/) for Toxiproxy"
say "building toxiproxy-server $TOXIPROXY_VERSION (go install)"
mkdir -p "$CACHE/toxiproxy/bin"
# The command's package is cmd/server, so go install names the binary `server`.
GOBIN="$CACHE/toxiproxy/bin" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
  > "$CACHE/logs/toxiproxy.log" 2>&1 \
  || { tail -n 20 "$CACHE/logs/toxiproxy.log" >&2; die "go install of Toxiproxy failed (log: $CACHE/logs/toxiproxy.log)"; }
mv "$CACHE/toxiproxy/bin/server" "$CACHE/toxiproxy/bin/toxiproxy-server"
mark toxiproxy "$TOXIPROXY_VERSION"

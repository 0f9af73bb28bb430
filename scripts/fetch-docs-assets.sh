#!/usr/bin/env bash
# fetch-docs-assets.sh: the scripts the docs site serves itself, so that it works offline. Material for MkDocs
# loads Mermaid from unpkg.com unless the page already defines `mermaid`; mkdocs.yml's extra_javascript loads
# this copy first. Mermaid's browser bundle comes from the npm registry (`npm pack`, else the registry's tarball
# URL with curl), is checked against its pinned sha256, and lands in docs/assets/vendor/ (git-ignored).
# Run by scripts/setup-test.sh and `make docs`; idempotent (a file with the pinned hash is kept).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Material 9.x is written against Mermaid 11 (it would load mermaid@11 itself): the newest 11.x.
MERMAID_VERSION=11.17.2
MERMAID_SHA256=581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8
out="$ROOT/docs/assets/vendor/mermaid.min.js"

has_pinned() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$MERMAID_SHA256" ]; }
if has_pinned "$out"; then
  echo "docs assets: mermaid $MERMAID_VERSION ok"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tarball="$tmp/mermaid-$MERMAID_VERSION.tgz"
if command -v npm >/dev/null 2>&1; then
  (cd "$tmp" && npm pack "mermaid@$MERMAID_VERSION" --silent >/dev/null)
elif command -v curl >/dev/null 2>&1; then
  curl -fsSL -o "$tarball" "https://registry.npmjs.org/mermaid/-/mermaid-$MERMAID_VERSION.tgz"
else
  echo "docs assets: neither npm nor curl is installed: install one to fetch Mermaid for the docs site" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp" package/dist/mermaid.min.js
if ! has_pinned "$tmp/package/dist/mermaid.min.js"; then
  echo "docs assets: mermaid $MERMAID_VERSION from the npm registry does not have the pinned sha256" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$tmp/package/dist/mermaid.min.js" "$out"
echo "docs assets: mermaid $MERMAID_VERSION fetched into ${out#"$ROOT"/}"

# common.sh: sourced by the setup scripts. Needs ROOT and SETUP_NAME (the prefix of every line it prints).
# Each part keeps a stamp of its inputs' hash under .cache/stamps/, so a second run only verifies.
CACHE="$ROOT/.cache"
STAMPS="$CACHE/stamps"
mkdir -p "$STAMPS" "$CACHE/logs"

say() { printf '%s: %s\n' "$SETUP_NAME" "$*"; }
die() { printf '%s: %s\n' "$SETUP_NAME" "$*" >&2; exit 1; }

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
mark() { echo "$2" > "$STAMPS/$1"; }

# mvn_logged NAME ARGS...: Maven (every repository routed to Maven Central) with its output in
# .cache/logs/NAME.log, shown only when it fails.
mvn_logged() {
  local name=$1; shift
  if ! mvn -q -B -s "$ROOT/java/settings.xml" "$@" > "$CACHE/logs/$name.log" 2>&1; then
    tail -n 30 "$CACHE/logs/$name.log" >&2
    die "Maven failed for $name (full log: $CACHE/logs/$name.log)"
  fi
}

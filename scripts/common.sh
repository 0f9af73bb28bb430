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

# apt_install LOG WHY PACKAGE...: install Debian packages (as root, else through sudo), the log under .cache/logs.
apt_install() {
  local log="$CACHE/logs/apt-$1.log" why="$2"; shift 2
  command -v apt-get >/dev/null 2>&1 || die "$* missing: install them for $why (Debian: apt-get install $*)"
  say "installing Debian's $* ($why)"
  local sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -q > "$log" 2>&1 \
    && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "$@" >> "$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "apt-get could not install $* (log: $log)"; }
}

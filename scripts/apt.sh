# Sourced after scripts/common.sh by the setup scripts that install Debian packages (setup-test.sh,
# setup-bench.sh); never by setup.sh: `make run` installs nothing through a package manager
# (tests/unit/scripts/test_setup_scripts.py).
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

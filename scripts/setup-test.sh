#!/usr/bin/env bash
# setup-test.sh: what only `make test` needs, on top of scripts/setup.sh (`make run`'s part): the test packages
# from PyPI (Python 3.11.5+), the docs site's copy of Mermaid (npm or curl), Toxiproxy for the fault tests (Go),
# and, from Debian packages, Chromium with its driver for the browser tests and redis-server with util-linux's
# unshare for the CeleryExecutor test. Those come through apt-get, as root, else through sudo, and only when
# missing: elsewhere, install them first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SETUP_NAME=setup-test
source "$ROOT/scripts/common.sh"
source "$ROOT/scripts/apt.sh"

# The test packages (pytest, Selenium, MkDocs, Celery) on top of requirements.txt, under the same constraints.
test_venv_stamp=$(stamp_of requirements.txt requirements-test.txt docker/airflow/requirements-celery.txt constraints.txt)
if fresh venv-test "$test_venv_stamp"; then
  say "test packages ok"
else
  .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))' \
    || die "the test packages need Python 3.11.5 or newer (pymdown-extensions 13), .venv has $(.venv/bin/python -V 2>&1)"
  say "installing the test packages into .venv"
  .venv/bin/python -m pip install -q -r requirements.txt -r requirements-test.txt \
    -r docker/airflow/requirements-celery.txt -c constraints.txt
  mark venv-test "$test_venv_stamp"
fi

bash scripts/fetch-docs-assets.sh | sed "s/^/$SETUP_NAME: /"
bash scripts/setup-toxiproxy.sh

if command -v chromium >/dev/null 2>&1 && [ -x /usr/bin/chromedriver ]; then
  say "chromium ok"
else
  apt_install chromium "the browser tests" chromium chromium-driver
fi
# The CeleryExecutor test (tests/integration/test_airflow_celery.py): Redis as the broker, unshare for the
# Celery workers' host names.
if command -v redis-server >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; then
  say "redis-server ok"
else
  apt_install redis "the CeleryExecutor test's broker" redis-server util-linux
fi
# bench.wan's packet-loss rows and their test (tests/integration/test_bench_packet_loss.py): iptables rules on
# loopback, which need root; without root the test says so and skips.
if command -v iptables-legacy >/dev/null 2>&1 || command -v iptables >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  say "iptables ok (or not root: the packet-loss test skips)"
else
  apt_install iptables "bench.wan's packet-loss rows" iptables
fi

say "ready"

# The project's commands. A fresh machine needs only `make run` and `make test` (see README.md).
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST_ARGS ?=
# Test processes sharing one stack (tests/conftest.py): most integration tests wait rather than compute.
TEST_WORKERS ?= 4

.PHONY: setup setup-test run test test-unit stack-up stack-down stack-status bench-worker bench bench-wan bench-width clean docs

# What `make run` needs, as the user who runs it (no package manager, no root): scripts/setup.sh.
setup:
	@bash scripts/setup.sh

# On top, what only the tests need (scripts/setup-test.sh): Mermaid for the docs site, Toxiproxy, and Debian's
# Chromium, chromedriver and redis-server through apt-get (as root, else sudo) when they are missing.
setup-test: setup
	@bash scripts/setup-test.sh

run: setup
	@$(PY) -m devstack up
	@$(PY) -m devstack airflow
	@$(PY) -m devstack.demo

test: setup-test
	@$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-unit: setup-test
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

stack-up: setup
	@$(PY) -m devstack up

stack-down:
	@if [ -x $(PY) ]; then $(PY) -m devstack down; else echo "nothing to stop (no .venv)"; fi

stack-status:
	@$(PY) -m devstack status

bench-worker: setup
	@$(PY) -m bench.worker_throughput $(BENCH_ARGS)

# Worker vs MirrorMaker 2 vs a bare copy loop (bench/compare.py; ~10 min, 1M records per run, RSS over 10M). MirrorMaker 2 is fetched
# here, not by `make setup`: tests and CI never need it.
bench: setup
	@bash scripts/setup-bench.sh
	@$(PY) -m bench.compare $(BENCH_ARGS)

# The same systems across a WAN: 0/50/100/200 ms round trips through Toxiproxy on the destination side, then on
# the source side, and 1 % packet loss at 50 ms on each (root: iptables); the worker in both modes everywhere,
# MirrorMaker 2 and the bare loop at 0 and 50 ms (bench/wan.py; 1M records of 100 B and of 1 KiB per run,
# 2 repeats, then the RSS over 10M records; ~40 minutes, 30 with --latency-s 0; results in
# bench/results/wan-100.md and wan-1024.md).
bench-wan: setup
	@bash scripts/setup-bench.sh
	@bash scripts/setup-toxiproxy.sh
	@$(PY) -m bench.wan $(BENCH_ARGS)

# One mirror process at 6, 1,000 and 5,000 partitions (topics of 10): the worker at-least-once and exactly-once,
# MirrorMaker 2 and the bare loop, 1M x 100 B (bench/width.py; ~30 min; results in bench/results/width.md).
bench-width: setup
	@bash scripts/setup-bench.sh
	@$(PY) -m bench.width $(BENCH_ARGS)

# The documentation site on http://127.0.0.1:8000 (mkdocs.yml; `make test` builds it with --strict).
docs: setup
	@bash scripts/fetch-docs-assets.sh
	@NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:8000

clean: stack-down
	rm -rf .stack .pytest_cache

# One DAG stub per mirror of the spec (dags/README.md); SPEC=... for another spec, CHECK=1 to only check.
.PHONY: dags
dags:
	@$(PY) -m mirror_airflow.dag_factory render --spec $(or $(SPEC),config/mirrors.yaml) --out dags/ $(if $(CHECK),--check)

# Fresh machine: `make demo` sets up and runs the demo; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-slow lint typecheck check cli-index bench bench-env bench-peers bench-report bench-constraints constraints clean

# constraints.txt pins every package to the versions the suite last passed on (its header says why).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,train]'
	@# The web view's browser tests use Debian's chromium and chromium-driver: installed here where root can.
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
		{ [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q chromium chromium-driver; } || \
		echo "no chromium and chromium-driver here: the web view's browser tests (make test-slow) skip" >&2
	@# The Slurm tests start a cluster of their own (tests/support/slurm.py) from Debian's packages: installed here too.
	@(PATH=$$PATH:/usr/sbin; for tool in slurmctld slurmd munged slurmdbd mariadbd sacct; do \
		command -v "$$tool" >/dev/null || exit 1; done) || \
		{ [ "$$(id -u)" = 0 ] && apt-get update -q && \
		apt-get install -y -q --no-install-recommends slurm-wlm munge slurmdbd mariadb-server-core; } || \
		echo "no slurm-wlm, munge, slurmdbd and mariadb-server-core here: the Slurm tests skip" >&2
	touch $(STAMP)

setup: $(STAMP)

# The whole loop on a fresh demo home: 3 to 6 minutes on 2 idle cores, longer on a busy machine (README, "The demo");
# DEMO_ARGS="--steps 200" is a quicker look.
demo: $(STAMP)
	$(BIN)/bashgym demo $(DEMO_ARGS)

# Two workers, one test file each at a time (a file's tests share module fixtures and run in order):
# 8 to 11 minutes on 2 cores (8:09 and 10:10 on 2026-12-05; tests/conftest.py gives torch one thread per process).
# TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

# Tests run shuffled (pytest-randomly), in one checked order by default so CI and README run the same command and
# a red run reproduces; TEST_SEED=$$(date +%s) tries a new order (no test may lean on another having run first).
TEST_SEED ?= 20261205

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 -p randomly --randomly-seed=$(TEST_SEED)

# Acceptance checks that train for minutes (CI runs them after the suite), one test file per worker as `test` does:
# each process trains with one torch thread (tests/conftest.py), so two files at once use both cores. The files go
# in tests/conftest.py's SLOW_ORDER (--no-loadscope-reorder keeps it): 14:18 on 2 cores on 2026-12-05, where xdist's
# own order (most tests first) took 18:08 by queueing the demo and the cascade on one worker.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 -p no:randomly

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p bashgym

check: lint typecheck test

# cli/commands.json, the command index that `bashgym --help`, a group's --help and TAB read without importing the
# command modules: rewrite it after adding or changing a command (tests/unit/cli/test_command_index.py says when).
cli-index: $(STAMP)
	$(BIN)/python -c 'from bashgym.cli.command_index import write; from bashgym.cli.main import build_parser; write(build_parser())'

bench: $(STAMP)
	$(BIN)/python bench/daemon_startup.py

# The peer benchmarks (MLflow, schemathesis) live in their own pinned environment: MLflow bounds pyarrow and
# cryptography below constraints.txt's pins, so they cannot share .venv. No torch there (bench/README.md).
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): pyproject.toml bench/constraints.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q -c bench/constraints.txt -e '.[bench]'
	touch $(BENCH_STAMP)

bench-env: $(BENCH_STAMP)

# BashGym's ledger against MLflow 3 in one run, about 4 minutes; BENCH_ARGS="--points 2000 --runs 1000" scales down.
bench-peers: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/ledger_ingest.py $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python bench/ui_bench.py

# Every benchmark figure's history from bench/results.jsonl and its ratio to the previous commit's (bench/report.py).
bench-report:
	python3 bench/report.py $(REPORT_ARGS)

# Re-resolve the benchmarks' pins at today's newest releases (their header kept), as `constraints` does for .venv.
bench-constraints:
	rm -rf $(RESOLVE)
	$(PYTHON) -m venv $(RESOLVE)
	$(RESOLVE)/bin/pip install -q --upgrade pip
	$(RESOLVE)/bin/pip install -q -e '.[bench]'
	grep '^#' bench/constraints.txt > bench/constraints.txt.new
	$(RESOLVE)/bin/pip freeze --exclude-editable >> bench/constraints.txt.new
	mv bench/constraints.txt.new bench/constraints.txt
	rm -rf $(RESOLVE)

# Re-resolve: today's newest releases within pyproject.toml's ranges, frozen into constraints.txt (its header kept).
# Then `make clean check` installs and tests exactly that set; commit the two together.
RESOLVE := .venv-resolve
constraints:
	rm -rf $(RESOLVE)
	$(PYTHON) -m venv $(RESOLVE)
	$(RESOLVE)/bin/pip install -q --upgrade pip
	$(RESOLVE)/bin/pip install -q -e '.[dev,train]'
	grep '^#' constraints.txt > constraints.txt.new
	$(RESOLVE)/bin/pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' >> constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(RESOLVE)

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache

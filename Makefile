# make run   - create .venv, install the runtime only, start `gatewayd serve --demo` (SQLite, built-in
#             simulator); RUN_ARGS='--listen 127.0.0.1:8081' passes flags to it
# make lint  - ruff check and mypy (configured in pyproject.toml); make test runs it first
# make test  - create .venv, install, lint, run the whole suite (slow and browser tests included)
#             on SQLite, then the keys, billing, faults and console tests on PostgreSQL
# make test-unit - only the tests that start no process (no daemon, simulator, CLI subprocess, browser)
# make bench - print the hot-path figures of issue 15 (CPU per request, requests/s, latency, memory)

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: the runtime (gatewayd and what it needs to run: `make run`) and, on top of it, the
# test tools (`make install`, `make test`, `make lint`: the `test` extra). Each is redone when
# pyproject.toml changes; `make test` on a clean checkout makes both.
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP := $(VENV)/.installed-stamp
RUN_ARGS ?=

.PHONY: install run lint test test-unit test-postgres test-fast bench clean

# (a .venv whose full install is newer than pyproject.toml already has the runtime: stamped
# with that install's time, so the test tools are not installed again)
$(RUNTIME_STAMP): pyproject.toml
	@if [ $(STAMP) -nt pyproject.toml ]; then touch -r $(STAMP) $(RUNTIME_STAMP); else \
	  test -n "$(PYTHON)" || { echo "gatewayd needs Python 3.11 or newer on PATH"; exit 1; }; \
	  test -x $(BIN)/python || { echo "make: creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }; \
	  echo "make: installing gatewayd and its runtime dependencies into $(VENV) (about 200 MB and a minute the first time; the test tools come with make test)"; \
	  $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e . && touch $(RUNTIME_STAMP); fi

$(STAMP): $(RUNTIME_STAMP)
	@echo "make: installing the test tools (the test extra: pytest, ruff, mypy, Playwright, the SDKs) into $(VENV)"
	@$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

run: $(RUNTIME_STAMP)
	@echo "make: starting gatewayd serve --demo $(RUN_ARGS) (every model answered by the built-in simulator; Ctrl-C stops it)"
	$(BIN)/gatewayd serve --demo $(RUN_ARGS)

# The keys, billing, faults and console tests again with every daemon on PostgreSQL
# (a fresh database per daemon on 127.0.0.1:5432, dropped after the run; see tests/pg.py).
PG_TESTS := tests/test_keys_live.py tests/test_keys_limits_live.py tests/test_chat_live.py \
	tests/test_faults_crash.py tests/test_faults_streams.py tests/test_faults_upstream.py tests/test_faults_concurrency.py \
	tests/test_faults_bodies.py tests/test_console_http.py tests/test_stripe_live.py
# The partition tests (issue 25: the database black-holed, an instance fenced; about 60 s) make
# their own PostgreSQL databases whatever GATEWAY_TEST_DATABASE says: `make test` runs them once,
# in its first pass; `make test-postgres` alone runs them too.
PG_OWN_TESTS := tests/test_store_partition.py tests/test_partitions_live.py

# Test files run in TEST_JOBS processes (pytest-xdist, a file's tests stay together in one):
# most live tests wait on processes and sockets, so two share two cores well.
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (as on our machines): else every
# daemon a test starts compiles gatewayd from source again, and every pytest process rewrites
# each test module's asserts again (~15 s of CPU each at collection).
TEST_JOBS ?= 2
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile

# ruff on every Python file of ours; mypy on gatewayd and gatewayctl (strict on money, billing,
# store and formats: see [tool.mypy]), both caching under .venv
lint: $(STAMP)
	$(BIN)/ruff check gatewayd gatewayctl tests bench
	$(BIN)/mypy

test: $(STAMP)
	$(MAKE) lint
	$(PYTEST)
	GATEWAY_TEST_DATABASE=postgres $(PYTEST) -m "not browser" $(PG_TESTS)

test-postgres: $(STAMP)
	GATEWAY_TEST_DATABASE=postgres $(PYTEST) -m "not browser" $(PG_TESTS) $(PG_OWN_TESTS)

# Every test that starts no process (no daemon, simulator, CLI subprocess, nginx, browser):
# the layer to run while working. The `live` marker is set in tests/conftest.py.
# Tests, not files, are spread over the processes (--dist load): a few files hold most of its time.
# Bytecode is written as for `make test` (above). The *_live.py files are not even imported:
# every test in them is live (tests/conftest.py), and importing them costs each process ~1 s.
test-unit: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist load -m "not live" \
		--ignore-glob='tests/*_live.py'

test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not browser"

bench: $(STAMP)
	$(BIN)/python bench/hot_path.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache tests/node/node_modules

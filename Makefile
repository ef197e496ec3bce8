# Two commands on a fresh Debian machine (as root): `make demo` and `make test`.
# Each sets up what it needs, idempotently: Debian packages when missing, .venv, pip install.
# `make test` = `make lint`, then `make test-fast`, then the tests marked e2e or slow: together the
# full suite, each test run once (what CI runs). While editing: `make lint` (ruff, mypy) and
# `make test-fast` (tests marked neither e2e nor slow); `make test-full` runs everything in one go.
# The e2e/slow tests mostly wait (sleeps, idle closes, politeness), so they run on E2E_WORKERS
# pytest-xdist workers; each test module stays on one worker (tests/conftest.py), the product cases
# spread one by one. `make test-matrix` runs every case of the product harness (tests/test_product.py).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# chromium: the browser Playwright renders with (it cannot download its own here).
# mariadb-server: tests/test_storage_mysql.py starts its own mariadbd on a free port.
APT_PACKAGES := redis-server chromium mariadb-server
E2E_WORKERS ?= 3

.PHONY: demo test test-fast test-slow test-full test-matrix lint setup clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt -e .
	@touch $@

demo: $(STAMP)
	$(PY) -m demo.run

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e and not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -m "e2e or slow" -n $(E2E_WORKERS) --dist loadgroup --durations=15

test-full: $(STAMP)
	$(PY) -m pytest -n $(E2E_WORKERS) --dist loadgroup

test-matrix: $(STAMP)
	$(PY) -m pytest tests/test_product.py --matrix -n $(E2E_WORKERS) --dist loadgroup --durations=0

test: $(STAMP)  # in this order even under make -j
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-slow

clean:
	rm -rf .run data/demo-items.db* .pytest_cache

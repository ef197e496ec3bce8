# Two commands on a fresh Debian machine (as root): `make demo` and `make test`.
# Each sets up what it needs, idempotently: Debian packages when missing, .venv, pip install.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# chromium: the browser Playwright renders with (it cannot download its own here).
APT_PACKAGES := redis-server chromium

.PHONY: demo test setup clean

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

test: $(STAMP)
	$(PY) -m pytest

clean:
	rm -rf .run data/demo-items.db* .pytest_cache

# The two commands the README starts with: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,test]'
	touch $@

demo: $(STAMP)
	$(PY) examples/demo.py

test: lint pytest

pytest: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

SOURCES := $(wildcard core plugins contrib tests bench examples)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(MAKE) --no-print-directory typecheck

# mypy needs the package as `kiq`, but the sources live in core/, plugins/, contrib/: check a linked view.
typecheck: $(STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/kiq
	ln -s $(CURDIR)/core/* build/typecheck/kiq/
	ln -s $(CURDIR)/plugins build/typecheck/kiq/plugins
	ln -s $(CURDIR)/contrib build/typecheck/kiq/contrib
	cd build/typecheck && $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml -p kiq

# The peers live in their own venv (their redis-py pins conflict with each other and would change what kiq runs
# with); the harness starts its own redis-server, and needs Ruby Sidekiq and PostgreSQL (see the README).
BENCH_VENV := .venv-bench
bench: $(STAMP)
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q -r bench/requirements.txt
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps -r bench/requirements-nodeps.txt
	$(BENCH_VENV)/bin/python -m bench --jobs 100000 --max-drain-seconds 120 $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) build .kiq .pytest_cache .mypy_cache .ruff_cache

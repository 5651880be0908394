# The two commands the README starts with: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# the docs group (the site's tools), for make site, docs and test
DOCS_STAMP := $(VENV)/.docs-stamp

.PHONY: demo test soak lint view typecheck imports pytest bench clean docs site

# kiq is installed editable in setuptools' strict mode: a tree of links in build/ to the files the wheel would
# hold, so a module left out of the package list fails in the tests as it would for users, and nothing else of the
# checkout is importable as kiq. A module added or removed needs its link: MODULES relinks when the list of files
# changes (or the tree is gone). setuptools' notice that an editable install is one is silenced (INSTALL).
STRICT := --config-settings editable_mode=strict
INSTALL := PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install --quiet
MODULES := $(VENV)/.modules
LIST_MODULES := find core plugins contrib -type f ! -path '*/__pycache__/*' | LC_ALL=C sort

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(INSTALL) -e '.[all,test]' $(STRICT) --group dev
	$(LIST_MODULES) > $(MODULES)
	touch $@

$(MODULES): $(STAMP) FORCE
	@$(LIST_MODULES) > $@.new
	@if [ -f $@ ] && cmp -s $@.new $@ && [ -n "$$(ls build/__editable__.kiq-*/kiq/__init__.py 2>/dev/null)" ]; \
	then rm $@.new; else $(INSTALL) --no-deps -e . $(STRICT) && mv $@.new $@; fi

FORCE:

# the dashboard's port: `make demo PORT=9000` (or PORT in the environment; 0: any free port)
PORT ?= 8077
demo: $(MODULES)
	$(PY) examples/demo.py --port $(PORT)

# The suite runs in TEST_PROCESSES processes (pytest-xdist): each has its own embedded Redis, its own databases on
# KIQ_TEST_REDIS_URL's server and its own PostgreSQL schema (tests/support.py, tests/conftest.py). Most tests wait
# (on workers, timeouts, outages): 10 processes keep 2 cores busy (4 left one idle); the timing tests allow for their
# process's wait for a CPU (docs/development.md, "What a run costs"). worksteal: a process that runs out of tests
# takes some from a busy one (a few tests take 10-30 s). `make pytest` runs in this process only (one file, -k).
# The tests marked soak (long Redis outages, long kill -9 loops) are left out (pyproject's addopts): `make soak`
# runs them, after the hour-long soak.
# (10 processes take 30 databases of KIQ_TEST_REDIS_URL's server, 3 each: .ci/services.sh gives it 32)
TEST_PROCESSES ?= 10
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, as on some CI images): each
# test process would otherwise compile and assertion-rewrite every test module again (16 s of CPU each instead of 5),
# and every worker or CLI subprocess would compile kiq.
# The linters run beside pytest (their output is shown after it; either failing fails `make test`); so does the site's
# build, in tests/test_docs.py (it needs the docs group and the view).
# The test modules' bytecode (with pytest's rewritten asserts) is written by one collection first (TESTS_BYTECODE,
# again when a test file changed): otherwise, on a clean clone, every test process compiles every module at once
# (87 s of CPU to the first test instead of 47, on 2 cores, for the 13 s this costs).
LINT_LOG := build/lint.log
TESTS_BYTECODE := build/.tests-bytecode
$(TESTS_BYTECODE): $(shell find tests -name '*.py') | $(MODULES)
	@mkdir -p build
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest --collect-only -q -p no:cacheprovider > /dev/null
	@touch $@

test: $(DOCS_STAMP) view $(MODULES)
	@$(MAKE) --no-print-directory lint > $(LINT_LOG) 2>&1 & linters=$$!; \
	$(MAKE) -s --no-print-directory $(TESTS_BYTECODE); \
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal $(PYTEST_ARGS); tests=$$?; \
	wait $$linters; linted=$$?; cat $(LINT_LOG); \
	if [ $$linted -ne 0 ]; then echo "make lint failed (above)"; exit $$linted; fi; exit $$tests

pytest: $(MODULES)
	$(PY) -m pytest $(PYTEST_ARGS)

# `make soak`: the hour under a mixed load and faults (bench/soak.py; SOAK_MINUTES, default 60; a report and a plot
# in bench/results/soak-*), then the tests marked soak. Its plot needs matplotlib: the soak dependency group.
SOAK_MINUTES ?= 60
SOAK_STAMP := $(VENV)/.soak-stamp
$(SOAK_STAMP): pyproject.toml $(STAMP)
	$(INSTALL) --group soak
	touch $@

soak: $(MODULES) $(SOAK_STAMP)
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) $(SOAK_ARGS)
	$(PY) -m pytest -n $(TEST_PROCESSES) -m soak $(PYTEST_ARGS)

SOURCES := $(wildcard core plugins contrib tests bench examples)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(MAKE) --no-print-directory typecheck imports

# mypy and import-linter need the package as `kiq`, but the sources live in core/, plugins/, contrib/: they
# check a linked view of the three as one package.
VIEW := build/view
# The view is rebuilt only when core's top-level entries change (its links then need to change), and mypy's cache
# lives outside it: a rebuilt view would throw the cache away, and `mypy --strict` takes ~3x as long without it.
VIEW_LIST := build/view.list
view: $(STAMP)
	@mkdir -p build && ls core | LC_ALL=C sort > $(VIEW_LIST).new
	@if [ -d $(VIEW)/kiq ] && cmp -s $(VIEW_LIST).new $(VIEW_LIST); then rm $(VIEW_LIST).new; else \
	  rm -rf $(VIEW) && mkdir -p $(VIEW)/kiq && ln -s $(CURDIR)/core/* $(VIEW)/kiq/ \
	  && ln -s $(CURDIR)/plugins $(VIEW)/kiq/plugins && ln -s $(CURDIR)/contrib $(VIEW)/kiq/contrib \
	  && mv $(VIEW_LIST).new $(VIEW_LIST); fi

typecheck: view
	cd $(VIEW) && $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/.mypy_cache -p kiq

# the layers of core/, no import cycles, plugins and contrib on the public API (contracts in pyproject.toml)
imports: view
	PYTHONPATH=$(VIEW) $(VENV)/bin/lint-imports --no-cache

# The documentation site (mkdocs.yml), from docs/ and the docstrings (of the view above), into build/site to browse:
# any warning fails it. Its tools are the docs dependency group, pinned. tests/test_docs.py builds it afresh (into a
# temporary directory) and checks it; `make docs` runs only that test, `make test` runs it with the others.
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(INSTALL) --group docs
	touch $@

# (not --quiet: MkDocs 1.6 then drops the warnings before --strict counts them, and a broken link passes)
site: $(DOCS_STAMP) view
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs: $(DOCS_STAMP) view
	$(PY) -m pytest -q tests/test_docs.py

# `make bench`: the whole benchmark in one command (bench/all.py): the no-op drain of every system (with latency idle
# and under a steady 5,000 jobs/s), the I/O-bound drain, kiq -p 1/-p 2 beside one and two Sidekiq processes, and
# what each feature costs, against the issue's targets; one report in bench/results/bench-all-*.{json,md}.
# `make bench BENCH_ARGS=--quick`: the same in under 3 minutes (fewer jobs, kiq's systems and Sidekiq only).
# The peers live in their own venv (their redis-py pins conflict with each other and would change what kiq runs
# with); bench/services.sh installs (as root, through .ci/services.sh) or checks redis-server, Ruby Sidekiq and
# PostgreSQL on 5433. Each part starts its own redis-server (--port, default 6391).
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
$(BENCH_STAMP): bench/requirements.txt bench/requirements-nodeps.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q -r bench/requirements.txt
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps -r bench/requirements-nodeps.txt
	touch $@

.PHONY: bench-services
bench-services:
	bash bench/services.sh

bench: $(MODULES) $(BENCH_STAMP) bench-services
	$(BENCH_VENV)/bin/python -m bench.all $(BENCH_ARGS)

# The I/O-bound drain alone: async jobs that each await 50 ms, kiq async vs arq, taskiq and Dramatiq (AsyncIO),
# each one worker process awaiting 1,000 jobs at once; needs only redis-server.
.PHONY: bench-io
bench-io: $(MODULES) $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench --io --jobs 20000 --io-concurrency 1000 --max-drain-seconds 120 $(BENCH_ARGS)

# What a second process buys alone (issue 16): kiq -p 1 / -p 2 beside one and two Ruby Sidekiq processes, no-op and
# CPU-bound (~1 ms spin) drains in one run; needs only redis-server and Ruby Sidekiq (bench/processes.py).
.PHONY: bench-procs
bench-procs: $(MODULES)
	$(VENV)/bin/python -m bench --processes --jobs 20000 --cpu-jobs 5000 --drain-runs 2 $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) build .kiq .pytest_cache .mypy_cache .ruff_cache

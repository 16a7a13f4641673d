# Every target that runs code first creates or refreshes the local virtualenv (.venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint bench dev clean fmt

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: venv
	$(BIN)/radar demo

test: venv
	$(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	$(BIN)/python -m tests.benchmarks.run_all

dev: venv
	DAGSTER_HOME=$(CURDIR)/.dagster_home sh -c 'mkdir -p $$DAGSTER_HOME && $(BIN)/dagster dev -m orchestration.definitions'

clean:
	rm -rf $(VENV) .bench .pytest_cache .ruff_cache

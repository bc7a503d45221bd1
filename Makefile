# vflbench developer and reproduction targets. `make test` installs first if needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export VFLBENCH_DATA_MIRROR ?= $(abspath ../shared/data)

.PHONY: install test lint bench demo reproduce-table1 clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install vflbench with dev extras (idempotent)

test: $(STAMP)  ## run the test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check vflbench tests benchmarks

bench: $(STAMP)  ## seconds per epoch / evaluation for every method
	$(BIN)/python benchmarks/bench_methods.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

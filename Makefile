# Two entry points (see README): `make run` and `make test`. Both build .venv from scratch.
# `make test`: format check, lint, then every test; `make test-fast`: the same without the tests marked slow.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DS_BUILD_OPS := 0
PIP := $(BIN)/pip install --disable-pip-version-check -q -c requirements/constraints.txt
LINTED := memdoc tests benchmarks scripts
PYTEST := HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

.PHONY: run lint test test-fast bench clean docs

$(BIN)/memdoc: pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	@touch $@

$(VENV)/.validators: $(BIN)/memdoc requirements/validators.txt requirements/validators-nodeps.txt
	$(PIP) -r requirements/validators.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r requirements/validators-nodeps.txt
	@touch $@

run: $(BIN)/memdoc
	$(BIN)/memdoc bill meta-llama/Llama-2-7b --gpu 24

lint: $(BIN)/memdoc
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)

test: lint $(VENV)/.validators
	$(PYTEST)

test-fast: lint $(VENV)/.validators
	$(PYTEST) -m "not slow"

bench: $(BIN)/memdoc
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/accuracy.py

docs: $(BIN)/memdoc
	$(BIN)/python scripts/gen_cli_reference.py
	$(BIN)/python scripts/config_keys_table.py

clean:
	rm -rf $(VENV) build *.egg-info

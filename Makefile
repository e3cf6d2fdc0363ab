# Two entry points (see README): `make run` and `make test`. Both build .venv from scratch.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DS_BUILD_OPS := 0
PIP := $(BIN)/pip install --disable-pip-version-check -q -c requirements/constraints.txt

.PHONY: run test bench clean docs

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

test: $(BIN)/memdoc $(VENV)/.validators
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

bench: $(BIN)/memdoc
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/accuracy.py

docs: $(BIN)/memdoc
	$(BIN)/python scripts/gen_cli_reference.py

clean:
	rm -rf $(VENV) build *.egg-info

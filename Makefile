# Two entry points (see README): `make run` and `make test`. Both build .venv from scratch.
# `make test`: format check, lint, then every test; `make test-fast`: the same without the tests marked slow.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DS_BUILD_OPS := 0
LOCK := requirements/lock.txt
# The whole stack comes from the lock (every package ==, with hashes), so nothing resolves at install time.
PIP := $(BIN)/pip install --disable-pip-version-check -q --no-deps
LINTED := memdoc tests benchmarks scripts
# One worker per core (pytest-xdist), each module on one worker (its module-scoped fixtures run once), one
# thread per worker: the suite takes ~5 min on 2 cores, serial it would take ~16.
PYTEST := HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --dist loadfile

.PHONY: run lint test test-fast bench clean docs lock drift

# A new lock builds a new .venv, so the venv holds the lock exactly (tests/unit/model/test_stack.py checks).
$(BIN)/memdoc: pyproject.toml $(LOCK)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) --require-hashes -r $(LOCK)
	$(PIP) --no-build-isolation -e .
	@touch $@

run: $(BIN)/memdoc
	$(BIN)/memdoc bill meta-llama/Llama-2-7b --gpu 24

lint: $(BIN)/memdoc
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)

test: lint
	$(PYTEST)

test-fast: lint
	$(PYTEST) -m "not slow"

bench: $(BIN)/memdoc
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/accuracy.py

docs: $(BIN)/memdoc
	$(BIN)/python scripts/gen_cli_reference.py
	$(BIN)/python scripts/config_keys_table.py

# Regenerate the lock at the newest releases the registry serves (then `make test` rebuilds .venv from it).
lock:
	scripts/lock.sh

# Not part of `make test`: the newest releases in a scratch venv, and the tests that read installed sources or
# census real modules; prints which facts moved (docs/extending.md).
drift: $(BIN)/memdoc
	$(BIN)/python scripts/drift.py

clean:
	rm -rf $(VENV) build *.egg-info

# Two set-up commands: `make demo` and `make test`. Both create/refresh .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-cluster lint venv bench clean

# The optional test libraries (pyproject's tokamax, models and torch extras) go in after the pinned stack,
# under a constraint file of what that install chose, so no test library can move jax, libtpu or flax.
PIN := $(VENV)/jax-pin.txt
TEST_EXTRAS := tokamax,models,torch

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e ".[dev]"
	$(BIN)/pip freeze | grep -iE '^(jax|jaxlib|libtpu|flax)==' > $(PIN)
	$(BIN)/pip install -q --disable-pip-version-check -c $(PIN) -e ".[dev,$(TEST_EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Tests run in 4 xdist workers: on the 2-core box much of a test's wall time is a child process starting
# or a server waiting, so more workers than cores still pays (pyproject prints the 15 slowest).
# Three tiers, every test kept: `make test` is the fast tier (unit, contract and one-server tests, under
# 7 minutes on 2 cores); `-m slow` are the end-to-end scenarios (a suite over two servers, a whole model
# run killed and resumed, autotune sweeps at production shapes, fresh clones), `make test-slow`; `-m
# cluster` are the Ray cluster scenarios, `make test-cluster`. CI runs all three.
test: $(STAMP) lint
	$(BIN)/python -m pytest -q -n 4 --dist worksteal -m "not slow and not cluster"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 4 --dist worksteal -m "slow and not cluster"

test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m cluster

bench: $(STAMP)
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache jaxbench-results maxkernel-work

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

# `make demo` needs only the package and its dev tools; the tests also need the test libraries (the torch
# extra alone is 1.8 GB), so the demo never installs them.
TEST_STAMP := $(VENV)/.test-installed

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip freeze | grep -iE '^(jax|jaxlib|libtpu|flax)==' > $(PIN)
	$(BIN)/pip install -q --disable-pip-version-check -c $(PIN) -e ".[dev,$(TEST_EXTRAS)]"
	touch $(TEST_STAMP)

venv: $(TEST_STAMP)

# The library models of the slow tests (tests/refs/gemma2_model.py, griffin_model.py), installed without their
# dependencies and with the venv's jax/numpy pins kept: gemma 2.0.8 pulls kauldron and tfds-nightly (pip's
# resolver ran 16 min without an answer) and recurrentgemma caps numpy < 2.4; what they import is below.
MODELS_STAMP := $(VENV)/.models-installed
$(MODELS_STAMP): $(TEST_STAMP)
	$(BIN)/pip freeze | grep -iE '^(jax|jaxlib|libtpu|flax|numpy)==' > $(VENV)/models-pins.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps gemma==2.0.8 recurrentgemma==1.0.1
	$(BIN)/pip install -q --disable-pip-version-check -c $(VENV)/models-pins.txt einops sentencepiece
	touch $(MODELS_STAMP)

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
test: $(TEST_STAMP) lint
	$(BIN)/python -m pytest -q -n 4 --dist worksteal -m "not slow and not cluster"

test-slow: $(TEST_STAMP) $(MODELS_STAMP)
	$(BIN)/python -m pytest -q -n 4 --dist worksteal -m "slow and not cluster"

test-cluster: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m cluster

bench: $(TEST_STAMP)
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache jaxbench-results maxkernel-work

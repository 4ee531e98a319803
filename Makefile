# remote-batch: the two commands a new user runs are `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: dev venv test lint unit integration infra e2e synth format clean bench instance-offerings

# Create the venv and install what is missing (re-runs when pyproject.toml changes).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[local,worker,infra,dev]'
	touch $(STAMP)

node_modules/.installed: package.json
	npm install --no-audit --no-fund --silent
	touch node_modules/.installed

## What `cdk deploy` needs, and nothing else runs: .venv (the CDK app, cdk-nag) and node_modules (the CDK CLI).
venv: $(STAMP) node_modules/.installed

## Start the whole service on this machine (moto + local Batch executor) at 127.0.0.1:8787.
dev: $(STAMP)
	$(BIN)/python -m remote_batch.local

## Lint, type-check, then every test tier: unit, integration (moto), infra (CDK), e2e (local stack).
test: $(STAMP) node_modules/.installed
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest tests

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy functions worker remote_batch infra

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit
integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration
infra: $(STAMP) node_modules/.installed
	$(BIN)/python -m pytest tests/infra
e2e: $(STAMP)
	$(BIN)/python -m pytest tests/e2e

## Synthesize the CDK app offline into cdk.out/.
synth: $(STAMP) node_modules/.installed
	PATH=$(abspath $(BIN)):$$PATH npx cdk synth --quiet

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache

## Regenerate infra/instance_offerings.json (which region offers the compute pools' instance types)
## from moto's EC2 instance-type offerings, after changing a pool in infra/constants.py.
instance-offerings: $(STAMP)
	$(BIN)/python -m infra.instance_offerings

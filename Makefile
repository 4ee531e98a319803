# remote-batch: the two commands a new user runs are `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# The Lambdas' third-party packages: pinned once in functions/requirements.lock (`make lock`),
# installed from it into the layer folder (`make lambda-bundle`) and, as constraints, into the venv.
LAMBDA_LOCKS := functions/requirements.lock functions/runtime.lock
LAMBDA_CONSTRAINTS := build/lambda/constraints.txt
LAMBDA_BUNDLE := build/lambda/.built

.PHONY: dev venv test test-tiers check check-tiers lint unit integration sdk infra bundle e2e synth format clean bench lock lambda-bundle instance-offerings sandbox-tools mutation openapi checkov deploy-console console console-test browser-tools

# The lock's pins without hashes, for `pip install -c` (stdlib-only script: runs before the venv exists).
$(LAMBDA_CONSTRAINTS): functions/requirements.lock infra/lambda_bundle.py
	$(PYTHON) -m infra.lambda_bundle constraints

# Create the venv and install what is missing (re-runs when a pyproject.toml or the lock changes): the client
# (editable), the local stack's distribution, the dependency groups, and a .pth that puts this checkout on the
# venv's path (functions/, worker/, infra/ are deployment assets, imported from here, never installed).
# pip bootstraps uv, which installs the rest: the same resolution as pip's (highest versions under the same
# constraints), downloaded in parallel, in about a third of pip's time. No .pyc are compiled here: the stack
# and the tests write those of what they import when they first import it (aws-cdk-lib alone is 180 MB of
# sources, of which the app imports 77); $(COMPILED) writes those jobs need.
$(STAMP): pyproject.toml remote_batch_local/pyproject.toml $(LAMBDA_CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[client]' -e ./remote_batch_local \
	  --group service --group worker --group infra --group dev -c $(LAMBDA_CONSTRAINTS)
	$(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
	  | xargs -I{} sh -c 'echo "$(CURDIR)" > {}/remote-batch-repository.pth'
	touch $(STAMP)

# The .pyc of the worker image's packages (worker/requirements.txt and what they need: the job side's
# site, remote_batch_local.job_pythons), on every core: a job's sandbox mounts them read-only, where a
# job could write none, so each job would compile again every module it imports. `make test` runs it
# beside lint and the other installs.
COMPILED := $(VENV)/.compiled
$(COMPILED): $(STAMP) worker/requirements.txt remote_batch_local/job_pythons.py
	$(BIN)/python -m remote_batch_local.job_pythons
	touch $(COMPILED)

## Build the Lambda layer (build/lambda/layer.zip) from the lock: wheels for the deployed runtime, from PyPI.
lambda-bundle: $(LAMBDA_BUNDLE)
$(LAMBDA_BUNDLE): $(LAMBDA_LOCKS) infra/lambda_bundle.py infra/constants.py | $(STAMP)
	$(BIN)/python -m infra.lambda_bundle build
	touch $(LAMBDA_BUNDLE)

## Re-resolve functions/requirements.in into the lock (keeps pins; `make lock UPGRADE=1` moves them).
lock: $(STAMP)
	$(BIN)/python -m infra.lambda_bundle lock $(if $(UPGRADE),--upgrade)

## checkov (tests/infra/test_checkov.py) in a venv of its own, built with uv: every checkov 3.3 pins a boto3
## that conflicts with the Lambdas' lock (infra/checkov-requirements.txt).
CHECKOV := build/checkov/.installed
checkov: $(CHECKOV)
$(CHECKOV): infra/checkov-requirements.txt | $(STAMP)
	rm -rf build/checkov
	$(BIN)/uv venv --quiet --python $(BIN)/python build/checkov
	VIRTUAL_ENV=$(CURDIR)/build/checkov $(BIN)/uv pip install --quiet -r infra/checkov-requirements.txt
	touch $(CHECKOV)

node_modules/.installed: package.json
	npm install --no-audit --no-fund --silent
	touch node_modules/.installed

## The web console (console/: TypeScript, bundled by Vite, pinned by console/package-lock.json) built into
## build/console (what deploy-console uploads), which the local stack serves at /console/ (docs/console.md); `make console-test` runs its
## unit tests (Vitest, in jsdom), part of `make test`.
CONSOLE := build/.console-built
CONSOLE_NPM := console/node_modules/.installed
CONSOLE_SOURCES := $(wildcard console/src/*) console/index.html console/vite.config.ts console/tsconfig.json
console: $(CONSOLE)
$(CONSOLE_NPM): console/package.json console/package-lock.json
	cd console && npm ci --no-audit --no-fund --silent
	touch $(CONSOLE_NPM)
$(CONSOLE): $(CONSOLE_NPM) $(CONSOLE_SOURCES)
	cd console && npm run --silent build
	touch $(CONSOLE)
console-test: $(CONSOLE_NPM)
	cd console && npx vitest run

## What `cdk deploy` needs, and nothing else runs: .venv (the CDK app, cdk-nag), node_modules (the CDK CLI)
## and the Lambda layer built from the lock.
venv: $(STAMP) node_modules/.installed $(LAMBDA_BUNDLE)

## The local stack runs each job in a bubblewrap box (docs/local-stack.md, "How jobs run"): install
## bubblewrap where it is missing (as root with apt-get, as CI on Debian runs); elsewhere say how, loudly.
sandbox-tools:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "WARNING: bubblewrap (bwrap) is missing: local jobs will NOT be sandboxed." \
	      "Install it (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap)." >&2; \
	  fi; }

## The console's browser tests (tests/e2e/test_console.py) drive Debian's Chromium with Playwright (no
## browser download of Playwright's own): install chromium where it is missing, as sandbox-tools does
## bubblewrap; elsewhere the test is skipped, and this says so.
browser-tools:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "WARNING: chromium is missing: the console's browser tests will be skipped." \
	      "Install it (Debian/Ubuntu: sudo apt-get install chromium)." >&2; \
	  fi; }

## Start the whole service on this machine (moto + local Batch executor) at 127.0.0.1:8787.
dev: $(STAMP) $(COMPILED) $(CONSOLE) sandbox-tools
	$(BIN)/python -m remote_batch_local

# `make test` and `make check` run pytest on every core (pytest-xdist; `make test PYTEST_WORKERS=1` runs
# serially; a worker more than the cores was slower: docs/testing.md). --dist loadgroup keeps the tests
# that must share a worker together (tests/conftest.py).
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup

# Lint runs beside the tests (make -j): mypy's minute of one core fits in the time the e2e tests spend
# waiting on their jobs. Either one failing fails the target (make waits for the other, then exits 2).
# No --output-sync: it would hold pytest's progress until pytest ends; lint prints a few lines at its end.
SIDE_BY_SIDE := $(MAKE) --no-print-directory -j4

## Lint and type-check beside every test tier: unit, sdk, integration (moto), infra (CDK), e2e (local stack).
test: $(STAMP) sandbox-tools
	$(SIDE_BY_SIDE) lint test-tiers
test-tiers: node_modules/.installed $(LAMBDA_BUNDLE) $(CHECKOV) $(COMPILED) $(CONSOLE) console-test browser-tools | $(STAMP)
	$(BIN)/python -m pytest tests $(PARALLEL)

## The inner loop, in under 5 minutes: lint beside the unit, sdk and integration tests but the slow ones.
check: $(STAMP) sandbox-tools
	$(SIDE_BY_SIDE) lint check-tiers
check-tiers: $(COMPILED) | $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/sdk tests/integration -m "not slow" $(PARALLEL)

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy functions worker remote_batch remote_batch_local infra tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit
integration: $(STAMP) $(COMPILED) sandbox-tools
	$(BIN)/python -m pytest tests/integration
## The SDK and CLI against a fake HTTP server (no stack needed).
sdk: $(STAMP)
	$(BIN)/python -m pytest tests/sdk
infra: $(STAMP) node_modules/.installed $(LAMBDA_BUNDLE) $(CHECKOV)
	$(BIN)/python -m pytest tests/infra
## The deployed-bundle tests alone (each handler run on the synthesized assets in a fresh interpreter).
bundle: $(STAMP) node_modules/.installed $(LAMBDA_BUNDLE)
	$(BIN)/python -m pytest tests/infra -m bundle -v
e2e: $(STAMP) $(COMPILED) $(CONSOLE) sandbox-tools browser-tools
	$(BIN)/python -m pytest tests/e2e

## Mutation run over the money code (mutmut, [tool.mutmut] in pyproject.toml; not part of `make test`):
## the credit and metering rules, the settlement and the meter's balance/cap checks, each mutant tested by
## the tests that reach it. Results are cached in mutants/ (a re-run tests only what changed);
## `make mutation MUTATION_SCOPE='functions.domain.credits*'` narrows it (one function a run keeps it under
## ~25 minutes on 2 loaded cores; the whole scope takes hours there). Survivors: docs/testing.md.
MUTATION_SCOPE ?= functions.domain.credits* functions.domain.metering* functions.domain.charged_time* \
	functions.logic.job_events.x__settle* functions.logic.job_events.x_apply_job_state_change* \
	functions.logic.job_outcomes.x_final_charge* functions.logic.metering.x_meter_tick*
mutation: $(STAMP)
	env -u PYTHONPATH $(BIN)/mutmut run --max-children 2 $(MUTATION_SCOPE)
	env -u PYTHONPATH $(BIN)/mutmut results

## Write the HTTP contract as served (GET /openapi.json) to docs/openapi.json: commit it with the change
## that made it differ (tests/integration/test_openapi_snapshot.py fails until then) and say so in CHANGELOG.md.
openapi: $(STAMP)
	$(BIN)/python -c 'import json, sys; from functions.handlers.api import openapi_json; \
	  sys.stdout.write(json.dumps(json.loads(openapi_json()), indent=2, sort_keys=True, ensure_ascii=False) + "\n")' \
	  > docs/openapi.json.tmp && mv docs/openapi.json.tmp docs/openapi.json

## After `cdk deploy`: upload the built web console (build/console) to the console bucket with its sign-in
## config, and invalidate the distribution's /console/* (infra/console_upload.py; `STACK=` another stack).
deploy-console: $(STAMP) $(CONSOLE)
	$(BIN)/python -m infra.console_upload $(if $(STACK),--stack $(STACK))

## Synthesize the CDK app offline into cdk.out/.
synth: $(STAMP) node_modules/.installed $(LAMBDA_BUNDLE)
	PATH=$(abspath $(BIN)):$$PATH npx cdk synth --quiet

## Issue 14's performance table (docs/benchmarks.md), about 5 min; `make bench BASELINE=<rev>` also
## measures that revision in the same run (before/after); `make bench ALL=1` then runs the other benchmarks
## (meter scaling, email topics, journal latency, the array meter tick and the 2,000-item array map). Not
## part of `make test`.
# The cold imports run the venv's packages with PYTHONDONTWRITEBYTECODE: every one's .pyc is written first.
bench: $(STAMP)
	$(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))' | xargs $(BIN)/python -m compileall -q -j0
	$(BIN)/python -m benchmarks $(if $(BASELINE),--baseline $(BASELINE)) $(if $(ALL),--all)

clean:
	rm -rf $(VENV) node_modules console/node_modules cdk.out build .pytest_cache .mypy_cache .ruff_cache

## Regenerate infra/instance_offerings.json (which region offers the compute pools' instance types)
## from moto's EC2 instance-type offerings, after changing a pool in infra/constants.py.
instance-offerings: $(STAMP)
	$(BIN)/python -m infra.instance_offerings

# The two commands a newcomer needs: `make preview` (the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
.DEFAULT_GOAL := help  # `make` alone lists the targets

.PHONY: help preview lint test test-deep install dev-install data bench-config bench-policy bench-scale-tick bench-sim bench-speed bench-environment bench-scale bench-advise bench-org bench-capacity-block benchmark bench-what-if bench-spot bench-gangs bench-sizes schema clean

# Public data beside the project (`make data`; never copied into it): the price table is the offline price file when
# present, unless the caller set one; otherwise prices come from the cache `gpuloan prices refresh` fills, else the
# snapshot shipped in the package (generated from that table; docs/prices.md).
SHARED_DATA ?= ../shared/data
# The tests read the same folder (tests/conftest.py): `make test SHARED_DATA=/some/empty/dir` runs the suite as a
# clone without the data would (.ci/run does).
export GPULOAN_SHARED_DATA := $(abspath $(SHARED_DATA))
ifneq ($(wildcard $(SHARED_DATA)/prices/aws_gpu_prices.csv),)
# Absolute, so commands and tests that run from another folder (cost-diff's base checkout) find it too.
export GPULOAN_PRICE_FILE ?= $(abspath $(SHARED_DATA)/prices)
endif
TRACES ?= $(SHARED_DATA)/traces/itp

# The venv is rebuilt when a requirements file changes; the stamp files record what was installed.
$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "gpuloan needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.runtime: $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

## help: list the targets with what they do (this list)
help:
	@awk '/^## [a-z-]+: / { sub(/^## /, ""); n = index($$0, ": "); printf "  %-21s %s\n", substr($$0, 1, n - 1), substr($$0, n + 2); next } \
	     /^## / { sub(/^## /, ""); printf "  %-21s %s\n", "", $$0 }' $(MAKEFILE_LIST)

## install: .venv with gpuloan and its runtime dependencies
install: $(VENV)/.runtime
## dev-install: install plus the test and lint tools
dev-install: $(VENV)/.dev

## preview: validate the dev stack, show its offline plan
## and monthly cost (STACK=prod for prod)
preview: $(VENV)/.runtime
	$(BIN)/gpuloan validate $(STACK)
	$(BIN)/gpuloan preview $(STACK)

## lint: ruff check and format, mypy and complexity ratchets
lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/lint_ratchet.py

## test: make lint, the import layers, then the whole
## suite (unit, mocked infrastructure, emulator, linters)
test: $(VENV)/.dev lint
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

## test-deep: the policy's property tests at 10,000 examples
## each, then every command of README.md and docs/, the
## slow ones too; about 45 minutes on 2 shared cores
test-deep: $(VENV)/.dev
	GPULOAN_HYPOTHESIS_PROFILE=deep $(BIN)/python -m pytest -q -n 0 tests/policy/test_policy_properties.py tests/test_docs_commands.py

## bench-spot: back to spot after a fallback, early spot warnings
bench-spot: $(VENV)/.runtime
	$(BIN)/python scripts/bench_spot.py --traces $(TRACES)

## data: download the public job traces (checksums checked)
## into ../shared/data/traces/itp, or SHARED_DATA=DIR
data: $(VENV)/.runtime
	$(BIN)/python scripts/fetch_data.py --shared-data $(SHARED_DATA)

## schema: regenerate docs/config.schema.json and docs/config.md
schema: $(VENV)/.runtime
	$(BIN)/python -m gpuloan schema > docs/config.schema.json
	$(BIN)/python -m gpuloan schema --markdown > docs/config.md

## bench-config: time config validation
bench-config: $(VENV)/.runtime
	$(BIN)/python scripts/bench_config.py

## bench-scale-tick: a tick of 50-200 pools (moto, 100 ms a call)
bench-scale-tick: $(VENV)/.dev
	$(BIN)/python scripts/bench_scale_tick.py

## bench-policy: time the policy decision function
bench-policy: $(VENV)/.dev
	$(BIN)/python scripts/bench_policy.py

## bench-sim: time the simulator on the ITP traces
bench-sim: $(VENV)/.runtime
	$(BIN)/python scripts/bench_sim.py --traces $(TRACES)

## bench-gangs: GPU-hours multi-node jobs hold waiting for
## their nodes, before/after the gang rules, karpenter
bench-gangs: $(VENV)/.runtime
	$(BIN)/python scripts/bench_gangs.py --traces $(TRACES)
## bench-sizes: a g6e pool of 1/4/8-GPU sizes vs 8-GPU only
bench-sizes: $(VENV)/.runtime
	$(BIN)/python scripts/bench_sizes.py --traces $(TRACES)
## bench-speed: deciding every minute vs skipping to the
## next decision (one pool, a reduced organization)
bench-speed: $(VENV)/.runtime
	$(BIN)/python scripts/bench_speed.py --traces $(TRACES)
## bench-environment: time the environment simulator
bench-environment: $(VENV)/.runtime
	$(BIN)/python scripts/bench_environment.py --traces $(TRACES)

## bench-scale: one simulation at 16-64 pools x 31/90 days:
## CPU, wall, peak memory, growth ratios (FULL=1: every
## size over 90 days); then one policy tick at 50-200 pools
bench-scale: $(VENV)/.dev
	$(BIN)/python scripts/bench_scale.py --traces $(TRACES) $(if $(FULL),--full)
	@# the tick part (issue 41 item 2) prints the last line, `tick 200 pools: S s, C calls`
	@if [ -f scripts/bench_scale_tick.py ]; then $(BIN)/python scripts/bench_scale_tick.py; \
	else echo "tick 200 pools: not measured (scripts/bench_scale_tick.py is not there yet)"; fi

## bench-advise: time advise's floor sweep, one pool over a month
bench-advise: $(VENV)/.runtime
	$(BIN)/python scripts/bench_advise.py --traces $(TRACES)

## bench-org: the organization's loan on the ten ITP
## clusters, fluid and simulated tables; about 15 minutes
## a rotation and seed (nine) on a loaded 2-core machine
bench-org: $(VENV)/.runtime
	$(BIN)/python scripts/bench_org.py --traces $(TRACES)
	$(BIN)/python scripts/bench_fair_share.py --traces $(TRACES)

## bench-capacity-block: Capacity Block floors: idle paid hours
## and work lost at the end, before/after
bench-capacity-block: $(VENV)/.runtime
	$(BIN)/python scripts/bench_capacity_block.py

## benchmark: our policy vs the baselines on the ITP traces
benchmark: $(VENV)/.runtime
	$(BIN)/python scripts/benchmark.py --traces $(TRACES)

## bench-what-if: what a faster release signal could buy
bench-what-if: $(VENV)/.runtime
	$(BIN)/python scripts/benchmark.py --traces $(TRACES) --what-if

## clean: remove the virtual environment and test caches
clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

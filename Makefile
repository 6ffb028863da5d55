# GPU platform: setup, synth, test, bench, diagram.
# `make synth` and `make test` install what they need (venv, pip, npm ci) when it is missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ENV ?= dev
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?=
MYPY_PATHS := app.py $(wildcard constructs/gpu_constructs stacks platform_tools gpuctl benchmarks containers/training/gpu_train containers/inference/gpu_serve)

export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup synth test lint snapshot-update bench bench-gpu wheel clean diagram config-reference

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The venv is (re)built when a requirements file changes.
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml constructs/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	$(PIP) install --quiet --no-deps --no-build-isolation -e . -e ./constructs
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed ## install Python and Node dependencies

synth: setup ## synthesize every stack of ENV (default dev) into cdk.out with the cdk-nag packs on
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npx --no-install cdk synth --quiet -c env=$(ENV) --output cdk.out
	$(PY) -m platform_tools.summary cdk.out

lint: setup ## ruff lint + format check, mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)

test: lint ## lint, type-check and run the whole test suite
	$(PY) -m pytest -n auto --dist loadfile $(PYTEST_ARGS)

snapshot-update: setup ## regenerate template snapshots (review the diff before committing)
	$(PY) -m pytest tests/snapshots --snapshot-update -q

# `make diagram` re-synthesizes when cdk.out is missing, of another ENV, or older than the app's code and config.
SYNTH_INPUTS = app.py cdk.json $(shell find config stacks constructs/gpu_constructs -type f \( -name '*.py' -o -name '*.yaml' -o -name '*.sh' \) 2>/dev/null)
DIAGRAM ?= docs/architecture$(if $(filter dev,$(ENV)),,-$(ENV)).png

diagram: setup ## draw the architecture diagram (docs/architecture.png) from cdk.out; synthesizes first when needed
	@if [ ! -f cdk.out/manifest.json ] || [ "$$(cat cdk.out/.diagram-env 2>/dev/null)" != "$(ENV)" ] \
		|| [ cdk.out/manifest.json -nt cdk.out/.diagram-env ] \
		|| [ -n "$$(find $(SYNTH_INPUTS) -newer cdk.out/manifest.json 2>/dev/null | head -1)" ]; then \
		$(MAKE) --no-print-directory synth ENV=$(ENV) && echo "$(ENV)" > cdk.out/.diagram-env; fi
	$(PY) -m platform_tools.diagram cdk.out $(DIAGRAM)

config-reference: setup ## regenerate docs/config-reference.md from the config model (stacks/config/)
	$(PY) -m platform_tools.config_reference docs/config-reference.md

bench: setup ## run every CPU benchmark and rewrite its section of docs/benchmarks.md
	$(PY) -m benchmarks.training_data
	$(PY) -m benchmarks.inference_batching
	$(PY) -m benchmarks.synth_and_test

bench-gpu: setup ## GPU benchmark (real vs synthetic data training throughput); needs an NVIDIA GPU
	$(PY) -m benchmarks.training_gpu

wheel: setup ## build the gpuctl + runtime wheel (dist/): the same bytes the fleets stack ships to notebooks
	$(PY) -m gpu_constructs.wheel . dist

clean: ## remove build outputs
	rm -rf cdk.out dist .pytest_cache .mypy_cache .ruff_cache

# The runtime's two compiled dependencies as wheels for the launcher zipapp (containers/training/vendor/README.md):
# versions from containers/training/requirements.txt, one xxhash wheel per CPython of the AWS PyTorch DLCs.
.PHONY: vendor-runtime
VENDOR_DIR := containers/training/vendor
VENDOR_PYTHONS := 3.10 3.11 3.12
VENDOR_PIN = $(shell grep -E '^$(1)==' containers/training/requirements.txt)
VENDOR_PIP := $(PY) -m pip download --quiet --no-deps --only-binary=:all: --implementation cp -d $(VENDOR_DIR)

vendor-runtime: setup ## re-download the runtime's vendored wheels and check them against their SHA256SUMS
	rm -f $(VENDOR_DIR)/*.whl
	for version in $(VENDOR_PYTHONS); do \
		$(VENDOR_PIP) --platform manylinux_2_17_x86_64 --python-version $$version "$(call VENDOR_PIN,xxhash)" || exit 1; done
	$(VENDOR_PIP) --platform manylinux_2_17_x86_64 --python-version 3.12 "$(call VENDOR_PIN,nvidia-ml-py)"
	cd $(VENDOR_DIR) && sha256sum -c SHA256SUMS

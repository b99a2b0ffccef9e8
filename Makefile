# AIPerf: `make demo` runs a short benchmark and submits it to a local list; `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

WHEELHOUSE ?= build/wheelhouse

.PHONY: venv install demo test bench lint clean wheelhouse runner-image gpu-wheels

$(STAMP): requirements.txt requirements-dev.txt runner/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e 'runner[train]' -r requirements.txt -r requirements-dev.txt
	touch $@

venv install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# Two phases (tests/conftest.py): the tests that start no service and run nothing long on TEST_WORKERS
# pytest-xdist workers, then the rest one at a time in each of two streams run at once (scripts/test-streams.sh:
# the SLURM clusters, the browser, the container build, the compose deployment and tests/train beside the service
# stacks; SERIAL_STREAMS=1 runs them one after the other). Exit status 5 (no test selected) is a phase with nothing to do.
TEST_WORKERS ?= 2
SERIAL_STREAMS ?= 2
test: $(STAMP)
	AIPERF_TEST_PHASE=parallel $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS) || [ $$? -eq 5 ]
	PYTHON=$(BIN)/python SERIAL_STREAMS=$(SERIAL_STREAMS) bash scripts/test-streams.sh $(PYTEST_ARGS)

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Wheels to install the runner with no index (TRAIN=1: with torch; PLATFORM/PYTHON_VERSION: for
# another machine; TORCH_INDEX: torch for the site's CUDA). See docs/running.md.
wheelhouse:
	PYTHON=$(PY) scripts/wheelhouse.sh $(WHEELHOUSE)

# The runner's container (runner/container/Dockerfile) from a [train] wheelhouse, with no index.
# BASE_IMAGE: the image it is built FROM (default: scripts/docker-base.sh's local Debian base).
RUNNER_IMAGE ?= aiperf-runner:latest
BASE_IMAGE ?= aiperf-base:bookworm
runner-image:
	PYTHON=$(PY) TRAIN=1 scripts/wheelhouse.sh $(WHEELHOUSE)
	docker build -f runner/container/Dockerfile --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(RUNNER_IMAGE) $(WHEELHOUSE)

# What scripts/gpu-checks.sh installs on a lent GPU machine that reaches no index: the runner's dependencies and
# optuna as wheels for its Python (the image's torch and torchvision are used as they are). Carry .gpu-wheels.
GPU_PYTHON_VERSION ?= 3.12
gpu-wheels: $(STAMP)
	rm -rf .gpu-wheels
	PYTHON=$(BIN)/python PLATFORM=manylinux_2_28_x86_64 PYTHON_VERSION=$(GPU_PYTHON_VERSION) scripts/wheelhouse.sh .gpu-wheels
	$(BIN)/python -m pip download -q --dest .gpu-wheels --only-binary=:all: --platform manylinux_2_28_x86_64 \
		--python-version $(GPU_PYTHON_VERSION) --implementation cp optuna

clean:
	rm -rf $(VENV) runs var .pytest_cache

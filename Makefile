# kdraexp: `make demo` serves the example cluster, `make test` runs everything CI runs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LISTEN ?= :8080
TELEMETRY ?= :8081
# An editable install in compat mode puts the checkout on sys.path, where twistd finds the plugin.
COMPAT := --config-settings editable_mode=compat

.PHONY: demo test lint pytest e2e bench install runtime

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# What the exporter needs to run, nothing more (make demo).
runtime: $(BIN)/python
	$(BIN)/python -m pip install -q $(COMPAT) -e .

# The exporter and everything the tests need.
install: $(BIN)/python
	$(BIN)/python -m pip install -q $(COMPAT) -e '.[test]'

demo: runtime
	@echo "Serving examples/cluster.yaml: the DRA metrics on $(LISTEN), the exporter's own on $(TELEMETRY)"
	$(BIN)/kdraexp --listen $(LISTEN) --telemetry-listen $(TELEMETRY) --source file:examples/cluster.yaml \
	  --resources resourceclaims,resourceslices,deviceclasses,devicetaintrules \
	  --device-attributes profile --claim-device-data uuid

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

pytest: install
	$(BIN)/python -m pytest

# The end-to-end tier alone: a real kube-apiserver, etcd, helm and Prometheus (see README).
e2e: install
	$(BIN)/python -m pytest tests/e2e

# The scale benchmark (about nine minutes, watch mode and shards at 64,000 devices included):
# tables on stdout, benchmarks/results.{json,png}.
bench: install
	$(BIN)/python -m benchmarks.run --check

test: lint pytest

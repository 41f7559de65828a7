# kdraexp: `make demo` serves the example cluster, `make test` runs everything CI runs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LISTEN ?= tcp:8080

.PHONY: demo test lint pytest e2e bench install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# A regular (not editable) install: twistd discovers plugins only in installed packages.
install: $(BIN)/python
	$(BIN)/python -m pip install -q '.[test]'

demo: install
	@echo "Serving examples/cluster.yaml on $(LISTEN): curl http://localhost:8080/metrics"
	$(BIN)/twistd --nodaemon --pidfile= kdraexp --listen $(LISTEN) --source file:examples/cluster.yaml

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

pytest: install
	$(BIN)/python -m pytest

# The end-to-end tier alone: a real kube-apiserver, etcd, helm and Prometheus (see README).
e2e: install
	$(BIN)/python -m pytest tests/e2e

# The scale benchmark (about half a minute): table on stdout, benchmarks/results.{json,png}.
bench: install
	$(BIN)/python -m benchmarks.run --check

test: lint pytest

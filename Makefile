# The README's two commands are `make demo` and `make test`; everything else here is what they build on.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint unit cluster-test binaries sandbox-up sandbox-down clean bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

binaries: $(STAMP)
	$(PY) -m sandbox.binaries

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest tests/unit

# Cluster tests mostly wait on the control plane, so two workers (each with its own sandbox, one test file each at a
# time) halve the wall time on two cores; PYTEST_JOBS=0 runs them in this process.
PYTEST_JOBS ?= 2

test: $(STAMP) binaries lint
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -n $(PYTEST_JOBS) --dist loadfile

demo: $(STAMP) binaries
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m sandbox demo

sandbox-up: $(STAMP) binaries
	$(PY) -m sandbox up

# The planner's figures against an exact MILP, a descheduler and HAMi alone (scipy, the bench extra); not in make test.
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	for script in bench/[!_]*.py; do $(PY) "$$script" || exit 1; done

sandbox-down: $(STAMP)
	$(PY) -m sandbox down

clean:
	rm -rf $(VENV) .sandbox .pytest_cache .mypy_cache .ruff_cache

# Packaging: the plugin's single-file executable and krew manifest, the server image, the chart.
.PHONY: dist krew-manifest image chart-lint
DIST_STAMP := $(VENV)/.dist-stamp

$(DIST_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,dist]'
	touch $(DIST_STAMP)

# dist/kubectl-hami_place and its krew archive for this machine's os/arch (PyInstaller output is cached).
dist: $(DIST_STAMP)
	$(PY) packaging/build.py

# krew-manifest.yaml from every archive in dist/ (uri and sha256 per platform).
krew-manifest: dist
	$(PY) packaging/krew_manifest.py

# The server image (needs docker buildx): make image TAG=0.1.0 PLATFORM=linux/amd64,linux/arm64 PUSH=1
image:
	./build-image.sh $(if $(TAG),--tag $(TAG)) $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(PUSH),--push)

chart-lint: $(STAMP)
	$$($(PY) -m sandbox.binaries helm --print | cut -f2) lint chart --strict

# The README's two commands are `make demo` and `make test`; everything else here is what they build on.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint unit cluster-test binaries sandbox-up sandbox-down clean bench constraints mutants coverage

# Every install takes its versions from constraints.txt (one universal lock: the image and the release jobs use it too).
CONSTRAINTS := -c constraints.txt

# uv installs into the venv, compiled as pip does (PYTHONDONTWRITEBYTECODE may be set: every process would compile
# its imports again): 19 s where pip took 25 s on 2 cores, which a clean clone's `make test` pays each time.
UV_VERSION := 0.13.8
UV := $(VENV)/bin/uv
$(UV):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet 'uv==$(UV_VERSION)'

# PyInstaller (the dist extra) too: `make test` builds the plugin beside the cluster tests, and installing it then
# would reinstall the editable package, leaving hami-place-webhook missing for a moment while tests start servers.
$(STAMP): $(UV) Makefile pyproject.toml constraints.txt kubectl_hami_place/__init__.py
	$(UV) pip install --python $(PY) --compile-bytecode --quiet $(CONSTRAINTS) -e '.[test,server,dist]'
	touch $(STAMP)

venv: $(STAMP)

binaries: $(STAMP)
	$(PY) -m sandbox.binaries

# mypy keeps its cache beside the sandbox's binaries (sandbox.binaries.cache_root), outside the repo, so a fresh clone
# checks in about a second where a cold check takes 17 s of CPU (mypy re-checks any module whose source changed).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --cache-dir "$$($(PY) -c 'from sandbox.binaries import cache_root; print(cache_root() / "mypy")')"
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest tests/unit

# Cluster tests mostly wait on the control plane, so two workers (each with its own sandbox, one test file each at a
# time) halve their wall time on two cores; PYTEST_JOBS=0 runs them in one process. Lint and the tests outside
# tests/cluster run beside them (tests/run.py); PYTEST_ARGS go to the cluster tests' pytest.
PYTEST_JOBS ?= 2

test: $(STAMP) binaries
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) tests/run.py --jobs $(PYTEST_JOBS) -- $(PYTEST_ARGS)

demo: $(STAMP) binaries
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m sandbox demo

sandbox-up: $(STAMP) binaries
	$(PY) -m sandbox up

# The planner's figures against an exact MILP, a descheduler and HAMi alone (scipy, the bench extra); not in make test.
bench: $(STAMP)
	$(UV) pip install --python $(PY) --compile-bytecode --quiet $(CONSTRAINTS) -e '.[test,server,bench]'
	for script in bench/[!_]*.py; do $(PY) "$$script" || exit 1; done

# Mutation testing of the controller's pure core (mutmut, the mutation extra; [tool.mutmut] in pyproject.toml says
# what): a surviving mutant is a line of it the unit tests do not notice when it changes. Not in make test: 10 to
# 20 minutes on two cores. MUTANTS narrows it by mutant name, e.g. MUTANTS='kubectl_hami_place.core.defrag.seal*'.
mutants: $(STAMP)
	$(UV) pip install --python $(PY) --compile-bytecode --quiet $(CONSTRAINTS) -e '.[test,server,mutation]'
	$(VENV)/bin/mutmut run --max-children 2 $(MUTANTS)
	$(VENV)/bin/mutmut results | grep -v ': not checked$$' || true

# Line and branch coverage of the plugin and the server over the tests ([tool.coverage] in pyproject.toml, the coverage
# extra): the unit and fuzz tests, then the cluster tests with the plugin and server processes they start or fork;
# the lines no test ran are printed by file, the data kept in .coverage (`coverage html` for pages). Not in make test:
# about 15 minutes on two cores. The plugin's build comes first, so the krew tests' build is not measured.
coverage: $(STAMP) binaries dist
	$(UV) pip install --python $(PY) --compile-bytecode --quiet $(CONSTRAINTS) -e '.[test,server,dist,coverage]'
	rm -f .coverage .coverage.*
	COVERAGE_FILE="$(CURDIR)/.coverage" $(VENV)/bin/coverage run -m pytest -q -n 2 tests/unit tests/fuzz
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" COVERAGE_FILE="$(CURDIR)/.coverage" $(VENV)/bin/coverage run -m pytest -q \
	  -n $(PYTEST_JOBS) --dist loadfile --no-loadscope-reorder tests/cluster $(PYTEST_ARGS)
	$(VENV)/bin/coverage combine --quiet
	$(VENV)/bin/coverage report

sandbox-down: $(STAMP)
	$(PY) -m sandbox down

# Regenerate constraints.txt after changing a dependency in pyproject.toml: one resolution for every platform
# (--universal keeps the markers, so the Windows and macOS release jobs install from the same file).
constraints: $(STAMP)
	$(UV) pip compile pyproject.toml --universal --python-version 3.11 --quiet \
	  --extra server --extra test --extra dist --extra bench --extra mutation --extra coverage --custom-compile-command 'make constraints' -o constraints.txt

clean:
	rm -rf $(VENV) .sandbox .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*

# Packaging: the plugin's PyInstaller directory and krew manifest, the server image, the chart.
.PHONY: dist krew-manifest image chart-lint chart-readme

# dist/kubectl-hami_place/ (the executable and _internal/) and its krew archive for this machine's os/arch (PyInstaller output is cached).
dist: $(STAMP)
	$(PY) packaging/build.py

# krew-manifest.yaml from every archive in dist/ (uri and sha256 per platform).
krew-manifest: dist
	$(PY) packaging/krew_manifest.py

# The server image (needs docker buildx): make image TAG=0.1.0 PLATFORM=linux/amd64,linux/arm64 PUSH=1
image:
	./build-image.sh $(if $(TAG),--tag $(TAG)) $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(PUSH),--push)

# chart/README.md from values.yaml's `# --` comments (a unit test fails when it is stale).
chart-readme: $(STAMP)
	$(PY) packaging/chart_readme.py

chart-lint: $(STAMP)
	$$($(PY) -m sandbox.binaries helm --print | cut -f2) lint chart --strict

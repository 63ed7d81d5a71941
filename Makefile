# The README's two commands are `make demo` and `make test`; everything else here is what they build on.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint unit cluster-test binaries sandbox-up sandbox-down clean

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
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest tests/unit

test: $(STAMP) binaries lint
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest

demo: $(STAMP) binaries
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m sandbox demo

sandbox-up: $(STAMP) binaries
	$(PY) -m sandbox up

sandbox-down: $(STAMP)
	$(PY) -m sandbox down

clean:
	rm -rf $(VENV) .sandbox .pytest_cache .mypy_cache .ruff_cache

# ge-python-backend: `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTHON ?= python3

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed ## Create .venv and install the project with every extra

lint: setup ## ruff and mypy
	$(VENV)/bin/ruff check ge_python_backend model_templates tests examples benchmarks tools
	$(VENV)/bin/ruff format --check ge_python_backend model_templates tests examples benchmarks tools
	$(VENV)/bin/mypy

format: setup ## Apply ruff's formatting and import order
	$(VENV)/bin/ruff check --fix ge_python_backend model_templates tests examples benchmarks tools
	$(VENV)/bin/ruff format ge_python_backend model_templates tests examples benchmarks tools

# pytest-xdist workers, measured on 2 cores: the end-to-end tests mostly wait on tritonserver and
# its stubs, and even the tests without a server wait on subprocesses, so 4 workers beat 2 for
# both; --dist loadfile keeps each file's module fixtures (servers, stub environments) in one
# worker. PYTHONDONTWRITEBYTECODE is cleared for pytest alone: each worker would otherwise
# rewrite the assertions of every test module again (seconds per worker), not cache them.
TEST_WORKERS ?= 4
CHECK_WORKERS ?= 4
PYTEST := PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest

test: setup lint ## Lint, type-check and run every test, end-to-end tests on the real tritonserver included
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile -m "not soak"

check: setup lint ## Lint, type-check and run the tests that start no server (-m "not e2e"): the inner loop
	$(PYTEST) -q -n $(CHECK_WORKERS) -m "not e2e and not soak"

.PHONY: help setup lint format test check

soak: setup ## Longer soak (200,000 requests at concurrency 16), 100 reload cycles, 40 models x 2 under the device host, the latency measurements under load; prints figures
	GE_SOAK_REQUESTS=200000 GE_RELOAD_CYCLES=100 GE_HOST_CHOICE_SERVED_MODELS=40 $(VENV)/bin/pytest -q -s tests/test_soak.py tests/test_reliability_reload.py tests/test_device_host_choice.py
	$(VENV)/bin/pytest -q -s -m soak

.PHONY: soak

bench: setup ## Run every benchmark (about 27 minutes): results as data, BENCHMARKS.md rendered from it
	$(PY) benchmarks/run.py --output BENCHMARKS.md

.PHONY: bench

demo: setup ## Build an example classifier, compile it for the emulator, serve it on Triton and query it
	$(PY) examples/image_classifier/demo.py demo-work

.PHONY: demo

docs: setup ## Build the documentation site into site/ (strict: a broken link fails)
	$(VENV)/bin/mkdocs build --strict --site-dir site
	@echo "Open site/index.html in a browser, or run: $(VENV)/bin/mkdocs serve"

.PHONY: docs

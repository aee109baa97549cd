# Quick start: `make demo` runs the main job end to end; `make test` runs the tests.
# Both set everything up first (scripts/bootstrap.sh).
VENV ?= .venv
export VENV

.PHONY: setup demo test unit lint bench

setup:
	bash scripts/bootstrap.sh

demo: setup
	$(VENV)/bin/autooptimize demo

test: setup
	bash scripts/browser.sh || echo "make: no headless Chromium; the console's browser test will be skipped"
	$(VENV)/bin/python -m pytest -q

unit: setup
	$(VENV)/bin/python -m pytest -q tests/unit

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python -m benchmarks.merge
	$(VENV)/bin/python -m benchmarks.planners
	$(VENV)/bin/python -m benchmarks.binpack_compare
	$(VENV)/bin/python -m benchmarks.fairness

# Quick start: `make demo` runs the main job end to end; `make test` runs the tests. Both run
# scripts/quickstart.sh, which needs no make and sets everything up first (scripts/bootstrap.sh).
VENV ?= .venv
export VENV

.PHONY: setup demo test unit lint bench

setup:
	bash scripts/bootstrap.sh

demo:
	bash scripts/quickstart.sh demo

test:
	bash scripts/quickstart.sh test

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

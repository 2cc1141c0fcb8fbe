# The two commands of the README. Both set up what they need from nothing.
.PHONY: demo test lint

demo:
	bash scripts/setup.sh --no-ncu --no-browser --no-prometheus
	.venv/bin/roseprof nsys --name demo

# One pytest-xdist worker a core, at most 8 (docs/TESTING.md: the suite's time).
test:
	bash scripts/setup.sh
	.venv/bin/python -m pytest -n auto --maxprocesses 8

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

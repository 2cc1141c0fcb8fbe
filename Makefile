# The two commands of the README. Both set up what they need from nothing.
.PHONY: demo test lint

demo:
	bash scripts/setup.sh --no-ncu --no-browser --no-prometheus
	.venv/bin/roseprof nsys --name demo

# One pytest-xdist worker a core (docs/TESTING.md: the suite's time).
test:
	bash scripts/setup.sh
	.venv/bin/python -m pytest -n auto

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

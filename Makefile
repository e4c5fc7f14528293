# The two commands of the README, plus the benchmarks.
.PHONY: setup demo test bench clean

setup:
	@scripts/bootstrap.sh

demo: setup
	.venv/bin/python scripts/demo.py

test: setup
	.venv/bin/python -m pytest

bench: setup
	.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,bench]"
	.venv/bin/python benchmarks/run.py

clean:
	rm -rf .venv .demo .pytest_cache

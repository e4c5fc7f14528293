# The two commands of the README (demo, test), the documentation site, and the benchmarks.
.PHONY: setup demo test lint docs docs-build bench clean

MKDOCS = NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs

setup:
	@scripts/bootstrap.sh

demo: setup
	.venv/bin/python scripts/demo.py

# The type and lint gate: ruff (lint, import order, format), mypy --strict on the package, and
# the import-linter contracts of pyproject.toml (the layers, no cycles, private modules).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

# Two pytest workers (pytest-xdist) that take tests from each other's share when idle: the
# suite waits on browsers, processes and leases more than it computes.
test: setup
	@scripts/postgres.sh
	.venv/bin/python -m pytest -n 2 --dist worksteal

# The site in docs/ (mkdocs.yml): `docs` builds it strictly and serves it; `docs-build` only builds.
docs: docs-build
	$(MKDOCS) serve --strict -a 127.0.0.1:8000

docs-build: .venv/bin/mkdocs
	$(MKDOCS) build --strict

.venv/bin/mkdocs:
	@scripts/bootstrap.sh

bench: setup
	.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,bench,mcp]"
	@scripts/postgres.sh
	.venv/bin/python benchmarks/run.py --postgres

clean:
	rm -rf .venv .demo .pytest_cache site

# Two commands from a fresh clone: `make demo` and `make test`. Each creates the
# virtualenv .venv with what it needs on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test quick lint docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/alarmtop --demo

# The suite runs in TEST_JOBS parallel processes (pytest-xdist; more than the cores: many
# tests wait on other processes); TEST_JOBS=0 runs it in this one.
TEST_JOBS ?= 3

test: $(STAMP)
	$(BIN)/pytest -n $(TEST_JOBS)

# All but the slow end-to-end tests (a terminal, a browser, fleets of processes, a fresh
# install, kills and chaos runs), for a quick look while working; make test runs them too.
quick: $(STAMP)
	$(BIN)/pytest -n $(TEST_JOBS) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check top core server tui examples testing tests bench
	@# mypy cannot follow the editable install's folder mapping: give it the same
	@# layout as the installed package through links.
	mkdir -p .typecheck/alarmtop
	for d in core server tui examples testing; do ln -sfn ../../$$d .typecheck/alarmtop/$$d; done
	for f in __init__.py __main__.py; do ln -sfn ../../top/$$f .typecheck/alarmtop/$$f; done
	MYPYPATH=.typecheck $(BIN)/mypy -p alarmtop
	@# The import contracts (pyproject.toml, [tool.importlinter]) on the same layout.
	PYTHONPATH=.typecheck $(BIN)/lint-imports --no-cache

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken
# link, a missing anchor or a page left out of the nav.
docs: $(STAMP)
	$(BIN)/pip install --quiet -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python bench/physical_limits.py --quick
	$(BIN)/python bench/alarm_fire.py --quick
	$(BIN)/python bench/pending_scale.py --quick
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/peers_alarms.py --quick
	$(BIN)/python bench/durable_steps.py --quick
	$(BIN)/python bench/durable_waits.py --quick
	$(BIN)/python bench/retry_ladder.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site

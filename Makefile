# spark-adaptive: every command sets up what it needs first (venv, pyspark,
# Java 17, the JVM shim built from source). See README.md and docs/installing.md.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The oldest pyspark the package supports (the lower bound of its pyspark range; a unit
# test keeps the two equal): `make test-oldest` runs the unit tests that touch pyspark and
# the integration tests marked `internals` on it, in a venv of its own, with the same shim jar.
OLDEST_PYSPARK := 4.2.0
VENV_OLDEST    := .venv-oldest
BIN_OLDEST     := $(VENV_OLDEST)/bin
STAMP_OLDEST   := $(VENV_OLDEST)/.installed
JAR    := spark_adaptive/jars/spark-adaptive-shim.jar
SHIM_SOURCES := $(shell find jvm-shim/src -name '*.java' 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: setup setup-oldest demo demo-autoscale test test-unit test-integration test-oldest lint docs bench soak \
	dist clean java chromium

setup: java $(STAMP) $(JAR)

java:
	@jvm-shim/ensure-java.sh

# The browser test of the operators' page drives the system's Chromium.
chromium:
	@tests/ensure-chromium.sh

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/spark-adaptive install-hook
	@touch $(STAMP)

# The editable installs' jar, in the source tree (a wheel compiles its own: setup.py).
$(JAR): $(STAMP) $(SHIM_SOURCES) jvm-shim/build.sh jvm-shim/build_shim.py
	PYTHON=$(BIN)/python jvm-shim/build.sh

setup-oldest: setup $(STAMP_OLDEST)

$(STAMP_OLDEST): pyproject.toml setup.py
	@test -x $(BIN_OLDEST)/python || $(PYTHON) -m venv $(VENV_OLDEST)
	$(BIN_OLDEST)/python -m pip install -q --upgrade pip
	$(BIN_OLDEST)/python -m pip install -q -e ".[test]" "pyspark==$(OLDEST_PYSPARK)"
	$(BIN_OLDEST)/spark-adaptive install-hook
	@touch $(STAMP_OLDEST)

demo: setup
	$(BIN)/python examples/demo.py

# A chaos soak on the local cluster (about 10 minutes): MINUTES=60 SEED=3 make soak
MINUTES ?= 10
SEED    ?= 7
soak: setup
	$(BIN)/python -m spark_adaptive.testing.soak --minutes $(MINUTES) --seed $(SEED) --out soak-output

demo-autoscale: setup
	$(BIN)/python benchmarks/autoscale.py --profiles steps --modes autoscaler --results demo-output

test: setup lint test-unit test-integration test-oldest

lint: setup
	$(BIN)/ruff check spark_adaptive tests examples benchmarks _spark_adaptive_startup.py jvm-shim
	$(BIN)/mypy
	$(BIN)/lint-imports

test-unit: setup chromium
	$(BIN)/pytest tests/unit -q $(PYTEST_ARGS)

test-integration: setup chromium
	$(BIN)/pytest tests/integration -q --durations=15 $(PYTEST_ARGS)

# The tests load the jar compiled against the newest pyspark (one jar for all); compiling
# the sources against the oldest too catches a Spark API that release lacks. Of the unit
# tests, those whose module names pyspark, py4j, a SparkSession or the package's layers
# over them (spark_adaptive.spark, .testing): the others test pure Python (the core
# imports neither pyspark nor py4j, a unit test checks it), which no pyspark changes.
OLDEST_UNIT = $(shell grep -lE 'pyspark|py4j|SparkSession|spark_adaptive\.(spark|testing)' \
	tests/unit/test_*.py tests/unit/*/test_*.py)
test-oldest: setup-oldest
	$(BIN_OLDEST)/python jvm-shim/build_shim.py --out jvm-shim/target/against-oldest.jar
	$(BIN_OLDEST)/pytest $(OLDEST_UNIT) -q $(PYTEST_ARGS)
	$(BIN_OLDEST)/pytest tests/integration -m internals -q --durations=15 $(PYTEST_ARGS)

# The sdist and the wheel (built from that sdist, with the shim compiled in) into dist/.
dist: java $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

docs: setup
	$(BIN)/python -m spark_adaptive.configdocs template > conf/spark-defaults.conf.template
	$(BIN)/python -m spark_adaptive.configdocs reference > docs/configuration.md

bench: setup
	$(BIN)/python benchmarks/listener_overhead.py

clean:
	rm -rf $(VENV) $(VENV_OLDEST) jvm-shim/target $(JAR) build dist .pytest_cache .mypy_cache \
		.ruff_cache

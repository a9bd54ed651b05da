# Two commands do all set-up on a fresh Debian machine: `make demo` and `make test`.
# Both build .venv on their own (and install python3-venv if the interpreter lacks venv);
# `make test` also installs Debian's mosquitto-clients (mosquitto_pub/_sub) and a Java runtime
# (openjdk-17-jre-headless, for the Spark data source's tests) when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp

.PHONY: demo test lint bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,bench,spark]'
	touch $@

demo: $(STAMP)
	$(BIN)/exactmesh demo

test: $(STAMP)
	@command -v mosquitto_pub >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto-clients; } || \
	  echo "make test: could not install mosquitto-clients; the tests that need mosquitto_pub/mosquitto_sub will skip"
	@command -v java >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; } || \
	  echo "make test: could not install a Java runtime; the Spark tests (tests/test_spark_*.py) will skip"
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) *.egg-info

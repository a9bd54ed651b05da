# Two commands do all set-up on a fresh Debian machine: `make demo` and `make test`.
# Both build .venv on their own (and install python3-venv if the interpreter lacks venv);
# `make test` also installs Debian's mosquitto-clients (mosquitto_pub/_sub) and a Java runtime
# (openjdk-17-jre-headless, for the Spark data source's tests) and nftables (the test bed's
# partitions, tests/test_hosts.py) and chromium (the web console, tests/test_console.py)
# when missing, and the JavaScript
# clients of tests/test_js_clients.py (npm ci in tests/js; nodejs and npm first if missing).
# Both compile the per-message modules with mypyc (router/accel.py; gcc and python3-dev are
# installed when missing); if that fails the router runs them as plain Python, only slower.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
ACCEL   := $(VENV)/.accel-stamp
JS_STAMP := tests/js/node_modules/.installed-stamp
# The modules router/accel.py compiles (its MODULES; tests/test_accel.py checks they match).
ACCEL_SRC := mqtt_edge/codec.py mqtt_edge/mapping.py mqtt_edge/session.py mqtt_edge/reactor.py \
  router/core/engine.py router/core/failover.py router/core/groups.py router/core/records.py \
  router/core/actions.py router/core/topics.py router/core/transitions.py router/core/events.py router/core/message.py

.PHONY: demo test lint bench venv accel clean java

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,bench,spark,accel]'
	touch $@

# Tried again only when a compiled source changes; a failed build leaves plain Python.
accel: $(ACCEL)

$(ACCEL): $(STAMP) $(ACCEL_SRC) router/accel.py
	@{ command -v cc >/dev/null 2>&1 && $(BIN)/python -c 'import os, sysconfig; \
	    raise SystemExit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'; } || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev; } || \
	  echo "make: could not install gcc and python3-dev for the compiled build"
	@$(BIN)/exactmesh accel build >$(VENV)/accel-build.log 2>&1 || \
	  echo "make: the compiled build failed (see $(VENV)/accel-build.log); the router runs as plain Python"
	@$(BIN)/exactmesh accel status
	@touch $@

demo: $(STAMP) $(ACCEL)
	$(BIN)/exactmesh demo

test: $(STAMP) $(ACCEL) $(JS_STAMP) java
	@command -v mosquitto_pub >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto-clients; } || \
	  echo "make test: could not install mosquitto-clients; the tests that need mosquitto_pub/mosquitto_sub will skip"
	@command -v nft >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables; } || \
	  echo "make test: could not install nftables; the test bed's partitions (tests/test_hosts.py) will skip"
	@command -v chromium >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  echo "make test: could not install chromium; the web console's tests (tests/test_console.py) will skip"
	$(BIN)/ruff check .
	@# The layers (pyproject.toml [tool.importlinter]; docs: shared DESIGN-NOTES "Layers").
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=30
	@# The unit tests of the compiled modules once more as plain Python: the fallback must hold.
	EXACTMESH_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
	  tests/test_engine_units.py tests/test_engine_stateful.py tests/test_failover_engine.py \
	  tests/test_shared_engine.py tests/test_topics.py tests/test_mqtt_codec.py tests/test_mqtt_edge.py \
	  tests/test_mqtt_will_retain.py tests/test_mqtt_backpressure.py tests/test_mqtt_keepalive.py \
	  tests/test_accel.py

# MQTT.js and rhea for tests/test_js_clients.py, at the versions tests/js/package-lock.json
# pins: installed again only when the lock file changes. Without node and npm, or if the
# install fails, those tests skip (a half-done node_modules is removed so that they do).
$(JS_STAMP): tests/js/package-lock.json
	@command -v npm >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } || \
	  echo "make test: could not install nodejs and npm"
	@if (cd tests/js && npm ci --no-audit --no-fund --loglevel=error); then touch $@; else \
	  rm -rf tests/js/node_modules; \
	  echo "make test: npm ci in tests/js failed; the JavaScript client tests (tests/test_js_clients.py) will skip"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/ruff format --check .

# Every performance target next to the commit before the work on them (benchmarks/targets.py);
# `python -m benchmarks.run` alone is the router's own throughput table.
# (benchmarks/mqtt.py installs mosquitto itself when it is missing.)
bench: $(STAMP) $(ACCEL) java
	$(BIN)/python -m benchmarks.targets

# A Java runtime for Spark: the Spark tests (tests/test_spark_*.py) skip without one, and the
# Spark row of make bench fails.
java:
	@command -v java >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; } || \
	  echo "make: could not install a Java runtime; the Spark tests skip and make bench's Spark row fails"

clean:
	rm -rf $(VENV) *.egg-info router/accel_manifest.json tests/js/node_modules
	find router mqtt_edge -name '*.so' -delete

# make deps | build | test | smoke | smoke-tf TF=2.16 | bazel-test | fuzz | demo | bench | clean
#
# Everything Python runs in a virtualenv, $(VENV) (default .venv), made on first use, so a
# fresh machine needs nothing but Debian's python3; `make PYTHON=python3 ...` uses another
# interpreter instead. The Debian packages (libzmq, ccache, Bazel) are installed with
# apt-get, which needs root on a fresh machine (as CI has); on a prepared one it only checks.

BASE_PYTHON ?= python3
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
PYTEST_TIMEOUT ?= 600
ZMQ_PACKAGES := libzmq3-dev cppzmq-dev
BAZEL_PACKAGES := bazel-bootstrap bazel-platforms
# Requirement groups of tools/requirements.py; test adds its own (target-specific, so the
# prerequisites see them too).
GROUPS := build run

# Workers are started as `python some/script.py`, which puts the script's folder, not
# the checkout, on sys.path: this lets them import the in-place build.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

# apt-get install, with one `apt-get update` retry for a machine whose lists are stale.
APT_INSTALL = DEBIAN_FRONTEND=noninteractive apt-get install -y -q
define apt
$(APT_INSTALL) $(1) || { apt-get update -q && $(APT_INSTALL) $(1); }
endef

.PHONY: deps system-deps bazel-deps build test smoke smoke-tf bazel-test fuzz demo bench clean

# Debian's python3 makes virtualenvs only with its python3-venv package installed.
$(VENV)/bin/python:
	@$(BASE_PYTHON) -m venv $(VENV) 2>/dev/null \
	  || { rm -rf $(VENV) && $(call apt,python3-venv) && $(BASE_PYTHON) -m venv $(VENV); } \
	  || { echo "cannot make a virtualenv with $(BASE_PYTHON): install Debian's python3-venv" >&2; \
	       exit 1; }

# libzmq is required; ccache only makes rebuilds faster, so its absence is not an error.
system-deps:
	@if [ ! -f /usr/include/zmq.h ] || [ ! -f /usr/include/zmq.hpp ]; then \
	  $(call apt,$(ZMQ_PACKAGES)) \
	  || { echo "libzmq is missing: install the Debian packages libzmq3-dev and cppzmq-dev" >&2; \
	       exit 1; }; \
	fi
	@command -v g++ >/dev/null || $(call apt,g++) \
	  || { echo "g++ is missing: install Debian's g++" >&2; exit 1; }
	@command -v ccache >/dev/null || $(call apt,ccache) \
	  || echo "ccache not installed: builds will be slower" >&2

deps: system-deps $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV)/bin/python)
	@$(PYTHON) tools/requirements.py $(GROUPS)

# Compiles in place, in parallel, skipping unchanged files (see setup.py).
build: deps
	$(PYTHON) setup.py -q build_tfps

# Every test, the Bazel build's included; the slowest 60 are listed at the end, to keep
# CI inside its budget (the packaging test, two pip builds in fresh virtualenvs, and the
# Bazel build are the largest).
test: GROUPS += test examples bench ray
test: build bazel-deps
	TFPS_TEST_BAZEL=1 $(PYTHON) -m pytest -x -q --durations=60 --timeout=$(PYTEST_TIMEOUT) tests/

# A few minutes' worth of tests that touch every layer on the TensorFlow installed: the unit
# tests (the Bazel build's aside), a 2-worker allreduce against NumPy, PS mode under the v1
# graph rewrite (tf.compat.v1 and tf_keras legacy optimizers), SFB, and Keras fit.
SMOKE_TESTS := tests/unit --ignore=tests/unit/test_bazel_build.py \
  'tests/multiprocess/test_ops.py::test_collectives_match_numpy[2-1]' \
  'tests/multiprocess/test_ps_mode.py::test_ps_mode_matches_stock_optimizers[1-1-1]' \
  tests/multiprocess/test_sfb.py::test_sfb_fit_matches_single_process_and_push_pull \
  'tests/multiprocess/test_training.py::test_keras_fit_matches_single_process[defaults]'
smoke: GROUPS += test
smoke: build
	$(PYTHON) -c "import tensorflow as tf, keras; print('smoke: TensorFlow', tf.__version__, 'Keras', keras.__version__)"
	$(PYTHON) -m pytest -x -q --durations=10 --timeout=$(PYTEST_TIMEOUT) $(SMOKE_TESTS)

# The smoke tests against another TensorFlow minor (2.16 to 2.21, docs/install.md), in a
# copy of the tree with its own virtualenv under build/smoke-tf$(TF)/ (tools/smoke_tf.py):
# the checkout's build and virtualenv stay as they are. Run for the oldest minor before a
# release (CI runs `make test` only).
TF ?= 2.16
smoke-tf:
	$(BASE_PYTHON) tools/smoke_tf.py $(TF)

# Only the Bazel build's tests (docs/bazel.md).
bazel-test: GROUPS += test
bazel-test: build bazel-deps
	TFPS_TEST_BAZEL=1 $(PYTHON) -m pytest -x -q --timeout=$(PYTEST_TIMEOUT) tests/unit/test_bazel_build.py

bazel-deps:
	@command -v bazel >/dev/null || $(call apt,$(BAZEL_PACKAGES)) \
	  || { echo "bazel is missing: install Debian's $(BAZEL_PACKAGES)" >&2; exit 1; }

# Mutation fuzzing of the frame decoder, batch check, codecs' payload checks and the
# rendezvous parsers (tools/fuzz_wire.py) for FUZZ_SECONDS; a crashing input is saved under
# build/fuzz/. `make test` runs a short budget (tests/unit/test_fuzz_wire.py).
FUZZ_SECONDS ?= 300
fuzz: build
	$(PYTHON) tools/fuzz_wire.py --seconds $(FUZZ_SECONDS)

# Regenerates benchmarks/results/ (root: network namespaces; about 50 min on an idle machine).
bench: GROUPS += bench
bench: build
	$(PYTHON) benchmarks/run_all.py

demo: GROUPS += examples
demo: build
	$(PYTHON) -m tf_ps_ops.run -np 2 -ns 2 --timeout 600 $(PYTHON) examples/train_digits.py

clean:
	rm -rf build/ dist/ *.egg-info .pytest_cache
	rm -f tf_ps_ops/_tf_ps_ops.so tf_ps_ops/_core.*.so tf_ps_ops/bin/ps_server tf_ps_ops/_build_info.json \
	      ps_server/testing/_ps_server_testing.*.so
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

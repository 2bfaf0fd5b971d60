# make deps | build | test | demo | clean. `deps` installs Debian packages, so on a
# fresh machine it needs root (as CI has); on a prepared one it only checks.

PYTHON ?= python3
PYTEST_TIMEOUT ?= 600
ZMQ_PACKAGES := libzmq3-dev cppzmq-dev
REQUIREMENTS := requirements.txt requirements-test.txt

# Workers are started as `python3 some/script.py`, which puts the script's folder, not
# the checkout, on sys.path: this lets them import the in-place build.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

# Exits 1 naming the requirements that are not installed (or, when pinned with ==,
# not at that version). Asking pip instead costs seconds on every `make test`.
define MISSING_REQUIREMENTS
import importlib.metadata as metadata, sys
missing = []
for path in sys.argv[1:]:
    for line in open(path):
        req = line.split("#")[0].strip()
        if not req:
            continue
        name, _, pin = (part.strip() for part in req.partition("=="))
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(req)
            continue
        if pin and version != pin and not (
                pin.endswith("*") and version.startswith(pin.rstrip("*"))):
            missing.append(req)
if missing:
    print("installing missing requirements:", *missing)
    sys.exit(1)
endef
export MISSING_REQUIREMENTS

.PHONY: deps build test demo bench clean

# libzmq is required; ccache only makes rebuilds faster, so its absence is not an error.
deps:
	@if [ ! -f /usr/include/zmq.h ] || [ ! -f /usr/include/zmq.hpp ]; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q $(ZMQ_PACKAGES) \
	  || { apt-get update -q && apt-get install -y -q $(ZMQ_PACKAGES); } \
	  || { echo "libzmq is missing: install the Debian packages libzmq3-dev and cppzmq-dev" >&2; \
	       exit 1; }; \
	fi
	@command -v ccache >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q ccache || { apt-get update -q && apt-get install -y -q ccache; } \
	  || echo "ccache not installed: builds will be slower" >&2; }
	@$(PYTHON) -c "$$MISSING_REQUIREMENTS" $(REQUIREMENTS) \
	  || $(PYTHON) -m pip install -q $(addprefix -r ,$(REQUIREMENTS))

# Compiles in place, in parallel, skipping unchanged files (see setup.py).
build: deps
	$(PYTHON) setup.py build_tfps

test: build
	$(PYTHON) -m pytest -x -q --timeout=$(PYTEST_TIMEOUT) tests/

# Regenerates benchmarks/results/ (root: network namespaces; about 50 min on an idle machine).
bench: build
	$(PYTHON) benchmarks/run_all.py

demo: build
	$(PYTHON) -m tf_ps_ops.run -np 2 -ns 2 --timeout 600 $(PYTHON) examples/train_digits.py

clean:
	rm -rf build/ *.egg-info .pytest_cache
	rm -f tf_ps_ops/_tf_ps_ops.so tf_ps_ops/_core.*.so tf_ps_ops/bin/ps_server
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

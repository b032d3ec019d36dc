# Everything a fresh machine needs: `make demo` and `make test` create .venv and install.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.polyspec-installed
# CPU-only torch. On Linux, PyPI's torch wheel is the CUDA build (GBs of CUDA libraries): take
# the +cpu build. First from the sources pip is configured with (a local --find-links / index,
# where the machine has one: no network wait), else from PyTorch's CPU index with one retry
# and a short socket timeout (where that index cannot be reached, pip gives up in seconds
# instead of retrying five times per request). Elsewhere (macOS) PyPI's wheel is CPU-only.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH := $(if $(filter Linux,$(shell uname -s)),torch==2.13.0+cpu,torch==2.13.0)

.PHONY: demo test lint figures bench install clean mutation

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" 2>/dev/null || \
	  $(PY) -m pip install -q --retries 1 --timeout 15 "$(TORCH)" \
	    --extra-index-url $(TORCH_CPU_INDEX)
	$(PY) -m pip install -q -e '.[all,dev]'  # all: jax, torch, hf, plot and gpu (the cost database)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/polyspec demo --out out/demo

# POLYSPEC_STRICT=1: a test that would skip (a missing optional dependency) fails instead.
# --dist loadgroup: tests marked xdist_group (those sharing an expensive fixture: the figures,
# the zoo-trace plans) run on one worker, so the fixture is computed once per run
test: $(STAMP)
	$(VENV)/bin/ruff check .
	POLYSPEC_STRICT=1 $(PY) -m pytest -n 2 --dist loadgroup --durations=15

# planted bugs (mutation/mutants.toml) each run against their tests in a temporary copy of
# the repository; not part of `make test` (minutes); last line `killed N/M`
mutation: $(STAMP)
	$(PY) mutation/run.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

figures: $(STAMP)
	$(VENV)/bin/polyspec figures --out out/figures

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) out

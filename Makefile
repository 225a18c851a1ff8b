# The README's two commands: `make demo` and `make test`. Both build what they need themselves.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# NOTE: torch is pinned here, before the project: on this CPU-only setup 2.13.0 resolves to a
# local CPU wheel, while an unpinned torch would pull several GB of CUDA packages.
TORCH_PIN ?= torch==2.13.0

.PHONY: setup demo test test-unit test-all lint bench bench-trace bench-zoo bench-accuracy gpu-wheels gpu-check clean docs

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard advisor/trace/_scan*.[ch])
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# --replace: the demo's folder is its own, so a second `make demo` replaces the first run (only
# the files advisor wrote there) instead of refusing the folder.
demo: $(STAMP)
	$(VENV)/bin/advisor diagnose --replace --out advisor-runs/demo examples/data_loading.py

test: $(STAMP)
	$(PY) -m ruff check advisor tests benchmarks examples
	$(PY) -m pytest -q -n 2 --dist loadfile
	# the trace tests again without the native scanner: what an install without a C compiler runs
	ADVISOR_NATIVE_SCAN=0 $(PY) -m pytest -q -n 2 --dist loadfile tests/trace

# The fast loop while editing: no process is started (tests that start one are marked e2e where
# they are defined; tests/conftest.py fails an unmarked one that tries).
test-unit: $(STAMP)
	$(PY) -m ruff check advisor tests benchmarks examples
	$(PY) -m pytest -q -n 2 -m "not e2e"

test-all: $(STAMP)
	ADVISOR_RUN_SLOW=1 $(PY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(PY) -m ruff check advisor tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/capture_overhead.py
	$(PY) benchmarks/fix_speedups.py

bench-trace: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/trace_load.py

bench-zoo: $(STAMP)
	$(PY) benchmarks/zoo.py

# The prepared GPU check (issue #28, docs/gpu.md). gpu-wheels, here: the packages the GPU machine
# lacks, as Python 3.12 wheels, into .gpu-wheels/ (carried there). gpu-check, there: no venv, the
# machine's own python3 and torch.
gpu-wheels: $(STAMP)
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .gpu-wheels msgspec libcst monai torch-tb-profiler

gpu-check: SHELL := /bin/bash
gpu-check:
	mkdir -p $${OUT:-gpu-check-out}
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/advisor-site .gpu-wheels/*.whl
	# the trace scanner for that machine's Python, where it can be compiled (the check compares it with msgspec)
	# (the compiler straight, not setup.py: that machine's setuptools may predate our pyproject)
	cc -O2 -std=c99 -shared -fPIC -I"$$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" advisor/trace/_scan.c \
	  -o advisor/trace/_scan$$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') > $${OUT:-gpu-check-out}/scanner-build.log 2>&1 \
	  || echo "gpu-check: the trace scanner did not build (see scanner-build.log); msgspec decodes"
	set -o pipefail; PYTHONPATH=/tmp/advisor-site PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py $(GPU_CHECK_ARGS) 2>&1 | tee $${OUT:-gpu-check-out}/gpu-check.log

# advisor-bench: 100 generated cases, their truth timed plainly, docs/accuracy.md (about 30 min; quiet machine)
bench-accuracy: $(STAMP)
	$(PY) benchmarks/accuracy/run.py

# docs/rules.md is generated from rules/**/*.yaml, docs/fixes.md from advisor/fixes/catalog/ and
# docs/report.schema.json from the Report model; tests/cli/test_docs.py,
# tests/fixes/test_catalog_meta.py and tests/report/test_schema.py fail when they are stale.
docs: $(STAMP)
	mkdir -p docs
	$(VENV)/bin/advisor rules --format markdown > docs/rules.md.tmp || { rm -f docs/rules.md.tmp; exit 1; }
	mv docs/rules.md.tmp docs/rules.md
	$(VENV)/bin/advisor fixes --format markdown > docs/fixes.md.tmp || { rm -f docs/fixes.md.tmp; exit 1; }
	mv docs/fixes.md.tmp docs/fixes.md
	$(PY) -m advisor.report.schema > docs/report.schema.json.tmp || { rm -f docs/report.schema.json.tmp; exit 1; }
	mv docs/report.schema.json.tmp docs/report.schema.json

clean:
	rm -rf $(VENV) build dist *.egg-info advisor-runs

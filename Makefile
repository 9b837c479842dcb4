# torchhpc — the README's commands.
#   make demo    set up if needed, then the quick tour of every system (writes runs/demo/<id>/)
#   make test    set up if needed, then lint (ruff, the import contract) and the whole test suite
#   make bench   set up if needed, then every benchmark against its anchor
#   make gpu-check  every GPU path beside its anchor (benchmarks/gpu.py), in at most 8 minutes
#   make setup   create .venv and install everything (idempotent; instant when nothing changed)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.torchhpc-setup

# Pinned versions: the set this suite is tested with.
TORCH := torch==2.13.0
# fbgemm-gpu has a CPU wheel; take the CUDA one where a GPU driver is present.
FBGEMM := $(if $(shell command -v nvidia-smi 2>/dev/null),fbgemm-gpu==1.8.0,fbgemm-gpu-cpu==1.8.0)
PINS := triton==3.7.1 numpy==2.4.6 pyyaml==6.0.4 tqdm==4.70.1 matplotlib==3.11.2 \
        gymnasium==1.4.0 deepspeed==0.19.8 pyscf==2.14.0 scipy==1.17.1 numba==0.68.1 scikit-learn==1.9.1 \
        palmerpenguins==0.1.6 pandas==3.1.1 \
        h5py==3.16.0 pysz==1.1.0 zfpy==1.0.1.post0 fpzip==1.2.5 zstandard==0.25.0 pyarrow==26.0.1 \
        pytest==9.2.0 pytest-xdist==3.8.0 ruff==0.17.6 import-linter==2.17 \
        $(FBGEMM) tensordict==0.15.3 torchmetrics==1.0.3 pyre-extensions==0.0.32 iopath==0.1.10
# The anchors that come from Debian: LASTZ (segalign) and Open MPI (collectives; mpi4py builds against it).
APT_PKGS := lastz openmpi-bin libopenmpi-dev
APT_OK := command -v lastz >/dev/null && command -v mpirun >/dev/null && test -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
MPI4PY := mpi4py==4.1.2
# torchrec names the CUDA fbgemm-gpu wheel as a dependency, so it goes in with --no-deps.
TORCHREC := torchrec==1.8.0

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export OMP_NUM_THREADS ?= 2

.PHONY: setup test demo bench gpu-check lint clean kernels

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	-@$(APT_OK) || ! command -v apt-get >/dev/null || (apt-get install -y -q $(APT_PKGS) || (apt-get update -q && apt-get install -y -q $(APT_PKGS))) || echo "$(APT_PKGS) not installed: the tests that compare with LASTZ and Open MPI skip here and fail under CI=true"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) $(PINS)
	-$(PY) -m pip install -q $(MPI4PY) || echo "mpi4py not installed (needs libopenmpi-dev): the Open MPI reference tests skip here and fail under CI=true"
	$(PY) -m pip install -q --no-deps $(TORCHREC)
	$(PY) -m pip install -q --no-deps -e .
	@$(PY) -c "import torch, torchrec, triton, gymnasium; print('torchhpc setup ok: torch', torch.__version__, '| triton', triton.__version__, '| torchrec', torchrec.__version__ if hasattr(torchrec, '__version__') else '1.8.0')"
	@touch $(STAMP)

lint: setup
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache

# Two pytest workers, one test file each at a time (module fixtures stay per file): the suite is mostly
# processes waiting on processes (torchrun ranks, CLI runs), so two cores take it from ~11 to ~8 minutes.
TEST_WORKERS ?= 2

test: setup lint kernels
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# segalign's CPU kernels compiled ahead of time for this CPU (once per source change; a no-op after):
# the aligner's command starts without numba's JIT, and the suite checks both
kernels: setup
	$(PY) -m torchhpc.ext.segalign.torch_numba

demo: setup
	$(VENV)/bin/torchhpc demo --config configs/demo/default.yaml

bench: setup
	@set -e; for b in benchmarks/*.py; do [ $$b = benchmarks/gpu.py ] && continue; echo "== $$b"; $(PY) $$b; done

# Every GPU path beside its anchor in one run of at most 8 minutes (benchmarks/gpu.py; on a machine
# without a GPU it lists the steps and runs those that need none). On a GPU machine with no internet and no
# .venv, but with the .gpucheck/ that `benchmarks/gpu_machine.sh prepare` made: its Python, no set-up
# (docs/core/guide.md).
gpu-check:
	@if [ ! -x $(PY) ] && [ -f .gpucheck/ready ]; then benchmarks/gpu_machine.sh run; \
	else $(MAKE) --no-print-directory setup && env -u OMP_NUM_THREADS $(PY) benchmarks/gpu.py; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

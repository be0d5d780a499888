# The verbs of the depthwise patch set. `make help` lists them.
# Everything runs in a virtual environment made from pyproject.toml (.venv).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HARNESS := $(PY) -m build_scripts
# FORCE=1 lets source/patch/unpatch proceed despite a wrong commit or a dirty tree.
export FORCE

.DEFAULT_GOAL := help
.PHONY: help source patch unpatch check series overlay build build-local docker test race-check lint test-gpu gpu-deps gpu-session gpu-plan gpu-plan-estimate gpu-plan-import test-upstream bench bench-models bench-report profile routing-table resource-report plan-report plan-audit memory-profile clean

help:  ## list the verbs
	@echo "Depthwise-convolution patch set for PyTorch $$(sed -n 's/^tag = "\(.*\)"/\1/p' pin.toml) -- verbs:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | awk -F'\t' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "Variables: PYTORCH_SRC (checkout, default build/pytorch), DWCONV_CACHE (downloads, default ~/.cache/dwconv),"
	@echo "           TORCH_CUDA_ARCH_LIST (default from pin.toml), FORCE=1, NVCC, CXX"
	@echo "  build:   MAX_JOBS, BUILDER_IMAGE, PYTORCH_GIT_URL   docker: IMAGE, RUNTIME_IMAGE"
	@echo "  test-upstream: WITH=overlay|local|image, PYTHON_UNDER_TEST (default GPU_PYTHON), STOCK_PYTHON,"
	@echo "                 IMAGE, BASELINE, UPSTREAM_TESTS (default PYTORCH_SRC/test), UPSTREAM_OUT"

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
	touch $@

source: $(VENV)/.ready  ## clone the pinned PyTorch into PYTORCH_SRC, or check the checkout there
	$(HARNESS) source

patch: $(VENV)/.ready  ## apply the patch set to PYTORCH_SRC (all or nothing; again is a no-op)
	$(HARNESS) patch

unpatch: $(VENV)/.ready  ## restore PYTORCH_SRC to upstream
	$(HARNESS) unpatch

check: $(VENV)/.ready  ## L0, no GPU: codegen, compile, link and symbol checks on the pinned wheel
	$(HARNESS) check

series: $(VENV)/.ready  ## list the patch set's items, reasons and hash
	$(HARNESS) series

overlay: $(VENV)/.ready  ## L0, then the overlay wheel for stock torch 2.11.0+cu130 in dist/
	$(HARNESS) overlay

# The full build (L2). Passed through to docker buildx as build args when set.
export MAX_JOBS BUILDER_IMAGE RUNTIME_IMAGE PYTORCH_GIT_URL IMAGE
build: $(VENV)/.ready  ## the custom torch wheel torch-2.11.0+cu130.dwconv, built in Docker into dist/ (hours)
	$(HARNESS) build

build-local: $(VENV)/.ready  ## the same without Docker, on a machine with CUDA 13.0 and cuDNN
	$(HARNESS) build-local

docker: $(VENV)/.ready  ## the runtime image around the wheel in dist/ (`docker run --gpus all <image> selftest`)
	$(HARNESS) docker

test: $(VENV)/.ready  ## the test suite, no GPU needed (includes the real L0 check and the Docker lint)
	$(PY) -m pytest tests

race-check: $(VENV)/.ready  ## the kernels' whole emulator sweep under ThreadSanitizer: accesses no barrier orders (about 45 minutes; `make test` runs a part)
	DWCONV_RACE_CASES=: DWCONV_RUN_CPU_SECONDS=7200 $(PY) -m pytest tests/test_emulator.py -k "race"

lint: $(VENV)/.ready  ## hadolint the Dockerfiles, shellcheck the shell scripts
	$(VENV)/bin/hadolint --config .hadolint.yaml docker/*.Dockerfile
	$(VENV)/bin/shellcheck docker/runtime/entrypoint.sh .ci/run

# The GPU tests run in the Python that has torch 2.11.0+cu130 (not .venv), on the overlay
# staged by `make overlay` (build/l0/overlay-staging; DWCONV_OVERLAY_DIR overrides).
# torch.testing._internal needs expecttest, and `make gpu-session` stops a hung test with
# pytest-timeout (tests/gpu/requirements.txt): `make gpu-deps` fetches them into .whl/ for a GPU
# machine that cannot reach PyPI, and test-gpu installs what .whl/ holds first.
# GPU_TESTS: a file or folder of tests/gpu.
GPU_PYTHON ?= python3
# The GPU verbs run on the overlay that `make overlay` stages (or DWCONV_OVERLAY_DIR).
REQUIRE_STAGED_OVERLAY = test -f build/l0/overlay-staging/dwconv_overlay/__init__.py || test -n "$$DWCONV_OVERLAY_DIR" || { \
	echo "make $@: no staged overlay: run \`make overlay\` first (or set DWCONV_OVERLAY_DIR)" >&2; exit 2; }
GPU_SITE := build/gpu-site
GPU_TESTS ?= tests/gpu
test-gpu:  ## GPU tests of the kernels through the overlay (needs a GPU, torch 2.11.0+cu130, `make overlay` first)
	@$(GPU_PYTHON) -c 'import torch, pytest' 2>/dev/null || { \
	    echo "make test-gpu: $(GPU_PYTHON) cannot import torch and pytest; run it where python3 has torch 2.11.0+cu130 and a GPU, or set GPU_PYTHON" >&2; exit 2; }
	@$(REQUIRE_STAGED_OVERLAY)
	@if ls .whl/*.whl >/dev/null 2>&1; then \
	    $(GPU_PYTHON) -m pip install -q --no-index --no-deps --upgrade --target $(GPU_SITE) .whl/*.whl; fi
	PYTHONPATH=$(GPU_SITE) PYTHONUNBUFFERED=1 $(GPU_PYTHON) -m pytest $(GPU_TESTS) -v -s -rs $(PYTEST_ARGS)

gpu-deps:  ## download the GPU tests' pure-Python dependencies into .whl/ (to carry to a GPU machine)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: -d .whl -r tests/gpu/requirements.txt

# Runs where the torch under test is, on a GPU machine that may have no network: this
# part of the harness needs only the standard library, so GPU_PYTHON runs it (no .venv).
export WITH STOCK_PYTHON BASELINE UPSTREAM_TESTS UPSTREAM_OUT
test-upstream:  ## upstream's convolution tests, patched torch (WITH=overlay|local|image) against stock
	PYTHON_UNDER_TEST=$${PYTHON_UNDER_TEST:-$(GPU_PYTHON)} $(GPU_PYTHON) -m build_scripts test-upstream

# Like test-gpu, the GPU run uses GPU_PYTHON (torch 2.11.0+cu130, no .venv, no network) and the
# overlay staged by `make overlay`. It writes RESULTS/<device>/<date>/bench*.json and bench.md
# (and the plots where matplotlib is installed; else `make bench-report` draws them here).
export SETS CONFIGS REPEATS RESULTS BENCH VARIANTS BENCH_STOP_AFTER PASSES MATCH NCU CUDNN_BENCHMARK LAUNCHES
bench:  ## (GPU) time the layer sets: stock, cuDNN, native, ours, routed (SETS=a,b VARIANTS=a,b CONFIGS=coverage MATCH=regex REPEATS=n RESULTS=dir CUDNN_BENCHMARK=1 LAUNCHES=1; DWCONV_DISABLE_KERNELS=a,b: ours and routed without those paths)
	@$(REQUIRE_STAGED_OVERLAY)
	PYTHONUNBUFFERED=1 $(GPU_PYTHON) -m build_scripts bench run

# Whole networks (build_scripts/bench/models.py), stock against the overlay: RESULTS/<device>/<date>/models-*.json,
# models.md and models.png.
export MODELS
bench-models:  ## (GPU) whole models' training step and inference: stock, cuDNN, ours, routed (MODELS=a,b CONFIGS= VARIANTS= REPEATS=n CUDNN_BENCHMARK=1)
	@$(REQUIRE_STAGED_OVERLAY)
	PYTHONUNBUFFERED=1 $(GPU_PYTHON) -m build_scripts bench models

# One device call: the GPU verbs named in STEPS, each stopped in time for the call to end with
# OUT/session.md (also printed last) and a log per step. See build_scripts/gpu_session.py.
export STEPS OUT BUDGET TESTS
gpu-session:  ## (GPU) one device call: STEPS=probe,tests,sanitizer,bench,look-back,routed,models,profile,upstream within BUDGET s (540), logs in OUT (TESTS=kernels or tests/gpu files; SETS, CONFIGS, VARIANTS, MATCH, CUDNN_BENCHMARK, LAUNCHES as bench; MODELS as bench-models)
	@$(REQUIRE_STAGED_OVERLAY)
	PYTHONPATH=$${DWCONV_OVERLAY_DIR:-$(CURDIR)/build/l0/overlay-staging} PYTHONUNBUFFERED=1 MAKE="$(MAKE)" \
	    $(GPU_PYTHON) -m build_scripts.gpu_session

# Several gpu-sessions in one device call, from a plan file (build_scripts/gpu_plan.py): OUT/plan.md and
# OUT/legs.tar.gz. gpu-plan-estimate sizes each leg here from the reports under results/.
gpu-plan:  ## (GPU) the legs of PLAN=<file> in one device call within BUDGET s (540): OUT/plan.md, OUT/legs.tar.gz
	@$(REQUIRE_STAGED_OVERLAY)
	PYTHONUNBUFFERED=1 MAKE="$(MAKE)" $(GPU_PYTHON) -m build_scripts.gpu_plan run

gpu-plan-estimate: $(VENV)/.ready  ## each leg of PLAN=<file>: its seconds estimated from the bench reports under results/
	$(VENV)/bin/python -m build_scripts.gpu_plan estimate

# What a gpu-plan call gave back (FROM=<the run's files_at>) filed under results/<device>/<date>/ (or INTO=<folder>),
# with bench.md, its plots and the launch audits (build_scripts/plan_import.py).
gpu-plan-import: $(VENV)/.ready  ## file a gpu-plan call's plan.md and legs.tar.gz (FROM=<folder>) in results/<device>/<date>/, with bench.md, plots, launch audits
	$(VENV)/bin/python -m build_scripts.plan_import $(if $(FROM),--from "$(FROM)") $(if $(INTO),--into "$(INTO)")

profile:  ## (GPU) Nsight Compute on our kernels of chosen bench passes (SETS=a,b CONFIGS= PASSES=backward_weight MATCH=regex OUT=dir)
	@$(REQUIRE_STAGED_OVERLAY)
	PYTHONUNBUFFERED=1 $(GPU_PYTHON) -m build_scripts bench profile $(if $(OUT),--out $(OUT))

bench-report: $(VENV)/.ready  ## markdown tables and PNG plots of a bench run (BENCH="<report.json> ...") or of a bench-models one
	$(HARNESS) bench report $(BENCH)

routing-table: $(VENV)/.ready  ## regenerate the routing's measurements from a bench report (BENCH=<report.json>); print how they route layers held out (TABLE=<file>: into a file that DWCONV_ROUTING_TABLE loads at run time, no rebuild)
	$(HARNESS) routing-table

resource-report: $(VENV)/.ready  ## L0, then registers, spills, shared memory and 16-byte accesses per kernel (ARCH=sm_90)
	$(HARNESS) resource-report

plan-report: $(VENV)/.ready  ## the kernel and launch of every bench pass, from the host code on a CPU (SMS=132, ARCH=sm_90, SETS=, CONFIGS=, REGISTERS=1)
	$(HARNESS) plan-report

plan-audit: $(VENV)/.ready  ## a GPU run's launches (make bench LAUNCHES=1) against the host code's plans for that GPU (BENCH=<report.json>)
	$(HARNESS) plan-audit

memory-profile: $(VENV)/.ready  ## bank conflicts and global sectors of every bench pass's kernel, on the CPU emulator (SETS=, CONFIGS=, PASSES=, MATCH=, OUT=)
	$(HARNESS) memory-profile

clean:  ## remove build outputs (keeps the PyTorch checkout, the venv and the download cache)
	rm -rf build/l0 dist

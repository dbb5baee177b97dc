#!/usr/bin/env bash
# The Python checks on a lent GPU machine, one command, made to end within 7 minutes (--budget_s 390):
# the CUDA-gated tests, benchmarks.gpu_scale (Llama-2-7B / LLaMA-160M shapes), the main job on the GPU,
# bench_engine with the Standard and the online-distilled draft. Each stage has its own time limit and the
# next runs whatever happened; OUT gets results.json, results.md and log.txt after every stage.
#   bash bash_scripts/gpu/python_checks.sh OUT [benchmarks.gpu_checks flags...]
#   DRY_RUN=1 bash bash_scripts/gpu/python_checks.sh OUT     # the same stages on this CPU, tiny pair, small
# Needs on the GPU machine what bash_scripts/gpu/common.sh installs from .gpu/ (docs/gpu.md: the commands).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
osd_gpu_check benchmarks.gpu_checks "$@"

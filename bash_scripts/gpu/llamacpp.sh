#!/usr/bin/env bash
# The llama.cpp check on a lent GPU machine, one command, made to end within 7 minutes (--budget_s 390):
# llama-osd-stream built with CUDA for sm_90 from the stripped tree in .gpu/llama.cpp.tar.xz, then the demo
# pair's latency per gamma (target alone vs speculative, Standard and online-distilled drafts) against Eq. 2
# charged with llama.cpp's measured verification cost. OUT gets results.json, results.md and log.txt after
# every stage. Run python_checks.sh first on the same machine for the online-distilled draft.
#   bash bash_scripts/gpu/llamacpp.sh OUT [llamacpp_patches.gpu_checks flags...]
#   DRY_RUN=1 bash bash_scripts/gpu/llamacpp.sh OUT     # on this CPU: the commands, the report on a fixture
# Needs on the GPU machine what bash_scripts/gpu/common.sh installs from .gpu/ (docs/gpu.md: the commands).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
osd_gpu_check llamacpp_patches.gpu_checks "$@"

#!/usr/bin/env bash
# Set up .venv-vllm and run tests/serving against a real vLLM engine (what CI runs after test.sh).
# One OpenMP thread, no core pinning and a 1 GiB KV cache: the machine is shared.
#   bash bash_scripts/test_vllm.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/bash_scripts/setup_vllm.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-nobind}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
exec "${OSD_VLLM_VENV:-$ROOT/.venv-vllm}/bin/python" -m pytest tests/serving "$@"

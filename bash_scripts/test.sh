#!/usr/bin/env bash
# Set up .venv and run the whole test suite (what CI runs).
#   bash bash_scripts/test.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/bash_scripts/setup_env.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
exec "${OSD_VENV:-$ROOT/.venv}/bin/python" -m pytest tests "$@"

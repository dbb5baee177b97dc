#!/usr/bin/env bash
# Gradual drift: the share of gsm8k/spider/finance queries moves linearly from (0.1, 0.8, 0.1) to
# (0.8, 0.1, 0.1) over 6000 queries (data/smooth.json from `python data/prepare_online.py`).
# Alpha per query and per dataset (alpha/dataset/{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/drift.sh runs/drift
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/drift.sh runs/drift_static   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/drift.sh runs/x
# Runs bash_scripts/common/stream.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_USAGE="usage: bash bash_scripts/online/drift.sh {savepath}"
export DATA=${DATA:-$ROOT/data/smooth.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/stream.sh" osd.train "${1-}"

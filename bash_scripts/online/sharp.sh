#!/usr/bin/env bash
# Abrupt distribution shifts (the paper's Fig. 3): gsm8k, then spider, then finance, 2000 queries each
# (data/sharp.json from `python data/prepare_online.py`), one draft distilled online, update every query.
# Alpha per query and per dataset (alpha/dataset/{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/sharp.sh runs/sharp
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/sharp.sh runs/sharp_static   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/sharp.sh runs/x
# Runs bash_scripts/common/stream.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_USAGE="usage: bash bash_scripts/online/sharp.sh {savepath}"
export DATA=${DATA:-$ROOT/data/sharp.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/stream.sh" osd.train "${1-}"

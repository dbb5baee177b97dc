#!/usr/bin/env bash
# Chatbot-Arena queries of one topic or language (data/arena/{file}.json from data/label_arena.py).
# Alpha per query and per dataset (alpha/dataset/{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/arena.sh runs/arena {file}
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/arena.sh runs/arena_static {file}   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/arena.sh runs/x {file}
# Runs bash_scripts/common/stream.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_USAGE="usage: bash bash_scripts/online/arena.sh {savepath} {file}"
FILE=${2:?$OSD_USAGE}
export DATA=${DATA:-$ROOT/data/arena/${FILE}.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/stream.sh" osd.train "$1"

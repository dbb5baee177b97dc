#!/usr/bin/env bash
# A random mix of datasets (the reference's two_mix): build the stream with
# python data/prepare_online.py --kind mix --inputs gsm8k=data/raw_data/gsm8k_train.json \
#     finance=data/raw_data/gbharti_finance-alpaca_train.json --n 4000 --output data/mix.json
# Alpha per query and per dataset (alpha/dataset/{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/mix.sh runs/mix
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/mix.sh runs/mix_static   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/mix.sh runs/x
# Runs bash_scripts/common/stream.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_USAGE="usage: bash bash_scripts/online/mix.sh {savepath}"
export DATA=${DATA:-$ROOT/data/mix.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/stream.sh" osd.train "${1-}"

#!/usr/bin/env bash
# Online distillation of the draft on the spider stream (the paper's Fig. 2 setting): each training
# query is served with speculative decoding, and every 8 queries the draft takes one step on the
# tokens it got wrong. Alpha is logged per query (wandb and {savepath}/metrics.jsonl).
#
#   bash bash_scripts/spider/online.sh runs/spider_online teacher forward
#   STUDENT=path/to/draft TEACHER=path/to/target DATA=my_stream.json bash bash_scripts/spider/online.sh runs/x teacher jsd
#
# Arguments: {savepath} [sample_source (ignored online: the served tokens are the target's)] [kl_method]
# Runs bash_scripts/common/online.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_SCRIPT=bash_scripts/spider/online.sh  # named in the runner's usage message
export DATA=${DATA:-$ROOT/data/raw_data/spider_train.json}
export MAX_LENGTH=${MAX_LENGTH:-256}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/online.sh" "$@"

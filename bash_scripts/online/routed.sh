#!/usr/bin/env bash
# Several drafts routed by query class (the paper's Fig. 6): one draft per --route_by value, each
# distilled on its own queries; compare with arena.sh/mix.sh on the same stream (one shared draft).
# Alpha per query and per dataset (alpha/dataset/{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/routed.sh runs/routed [route_by]
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/routed.sh runs/routed_static [route_by]   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/routed.sh runs/x [route_by]
# Runs bash_scripts/common/stream.sh, which holds the other defaults and overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_USAGE="usage: bash bash_scripts/online/routed.sh {savepath} [route_by]"
ROUTE_BY=${2:-topic}
export DATA=${DATA:-$ROOT/data/arena/mix_topics.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/stream.sh" osd.distill.routing "${1-}" --route_by "$ROUTE_BY"

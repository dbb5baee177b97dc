#!/usr/bin/env bash
# Offline distillation of the draft on code-python (the paper's Table 1 setting): the draft is trained on
# samples from {sample_source} with {kl_method}; alpha is measured before the first step ("Standard")
# and after every epoch (wandb and {savepath}/metrics.jsonl). Teacher answers come from
# data/generate_answer.py (or are generated on the fly when the data has none).
#
#   bash bash_scripts/code-python/offline.sh runs/code-python_offline_student_forward student forward
#   STUDENT=path/to/draft TEACHER=path/to/target DATA=my_train.json EVAL_DATA=my_eval.json \
#       bash bash_scripts/code-python/offline.sh runs/x mix_token jsd
#
# Arguments: {savepath} {sample_source: teacher|student|mix_request|mix_token} {kl_method: forward|reverse|jsd|tvd|reference_mix}
# Runs bash_scripts/common/offline.sh, which holds the other defaults and overrides.
# Extra flags for osd.train can be appended through EXTRA_ARGS, e.g. EXTRA_ARGS='--max_steps 10 --run_name "my run"' (quoted words kept).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT: repository defaults below

export OSD_SCRIPT=bash_scripts/code-python/offline.sh  # named in the runner's usage message
export DATA=${DATA:-$ROOT/data/raw_data/code_search_net_train_with_answer.json}
export EVAL_DATA=${EVAL_DATA:-$ROOT/data/raw_data/code_search_net_test.json}

exec bash "$(dirname "${BASH_SOURCE[0]}")/../common/offline.sh" "$@"

#!/usr/bin/env bash
# Online distillation on the embedded demo pair (CPU, no downloads): a stream over the local
# workload that shifts from sql to math to code to finance; alpha per query and per domain in
# {savepath}/metrics.jsonl, plotted to {savepath}/alpha.png. (The guided version with a table:
# python -m osd.demo.online_demo.)
#
#   bash bash_scripts/demo/online.sh runs/demo_online
#   PER_DOMAIN=200 UPDATE_INTERVAL=8 bash bash_scripts/demo/online.sh runs/demo_online_long teacher jsd
#   REPORT_TO=wandb bash bash_scripts/demo/online.sh runs/demo_online   # also to wandb (offline without a key)
#
# Arguments: {savepath} [sample_source (ignored online)] [kl_method]
# Rerunning the same command continues the run from its last checkpoint (or does nothing once it has
# finished); other settings into the same {savepath} are refused: remove it, or use another one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE="usage: bash bash_scripts/demo/online.sh {savepath} [sample_source] [kl_method]"
SAVEPATH=${1:?$USAGE}  # (a literal "}" inside ${...} would end the expansion early)
SAMPLE_SOURCE=${2:-teacher}
KL_METHOD=${3:-forward}
PER_DOMAIN=${PER_DOMAIN:-60}
UPDATE_INTERVAL=${UPDATE_INTERVAL:-1}
LR=${LR:-1e-4}
REPORT_TO=${REPORT_TO:-none}
STUDENT=${STUDENT:-$ROOT/osd/demo/models/draft}
TEACHER=${TEACHER:-$ROOT/osd/demo/models/target}  # SmolLM2-135M-Instruct, converted by bash_scripts/setup_env.sh
STREAM="$SAVEPATH/stream.json"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one request at a time: a second thread gains little on 2 cores

mkdir -p "$SAVEPATH"
"$PYTHON" "$ROOT/data/prepare_online.py" --kind abrupt --lengths "$PER_DOMAIN" "$PER_DOMAIN" "$PER_DOMAIN" "$PER_DOMAIN" \
    --inputs sql="$ROOT/data/local/sql_train.json" math="$ROOT/data/local/math_train.json" \
    code="$ROOT/data/local/code_train.json" finance="$ROOT/data/local/finance_train.json" --output "$STREAM"
"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$STREAM" \
    --mode online --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 1 \
    --max_new_tokens 64 --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 1 \
    --teacher_dtype bfloat16 --draft_serving_dtype bfloat16 \
    --output_dir "$SAVEPATH" --num_train_epochs 1 --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type constant --weight_decay 0 --max_grad_norm 0 \
    --save_strategy steps --save_steps 100 --logging_steps 20 --use_cpu True --report_to "$REPORT_TO" \
    --resume_from_checkpoint last
"$PYTHON" -m osd.plots "$SAVEPATH/metrics.jsonl" --label online --stream "$STREAM" --out "$SAVEPATH/alpha.png" \
    --window 20 --title "SmolLM2-135M target, online, update every $UPDATE_INTERVAL"

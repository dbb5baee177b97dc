#!/usr/bin/env bash
# Gradual drift: the share of gsm8k/spider/finance queries moves linearly from (0.1, 0.8, 0.1) to
# (0.8, 0.1, 0.1) over 6000 queries (data/smooth.json from `python data/prepare_online.py`).
# Alpha per query and per dataset (alpha_{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/drift.sh runs/drift
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/drift.sh runs/drift_static   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/drift.sh runs/x
set -euo pipefail

SAVEPATH=${1:?usage: bash bash_scripts/online/drift.sh {savepath}}
DATA=${DATA:-data/smooth.json}
STUDENT=${STUDENT:-JackFram/llama-160m}
TEACHER=${TEACHER:-lmsys/vicuna-7b-v1.3}
KL_METHOD=${KL_METHOD:-forward}
UPDATE_INTERVAL=${UPDATE_INTERVAL:-1}
LR=${LR:-1e-5}
PRECISION=${PRECISION:---bf16 True --tf32 True}
REPORT_TO=${REPORT_TO:-wandb}

python -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$DATA" \
    --mode online --kl_method "$KL_METHOD" --max_propose_num 5 \
    --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 1 \
    --output_dir "$SAVEPATH" --num_train_epochs 1 --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type constant --max_grad_norm 0 \
    --model_max_length 512 --save_strategy steps --save_steps 500 --logging_steps 50 \
    $PRECISION --report_to "$REPORT_TO"

#!/usr/bin/env bash
# Online distillation of the draft on the finance stream (the paper's Fig. 2 setting): each training
# query is served with speculative decoding, and every 8 queries the draft takes one step on the
# tokens it got wrong. Alpha is logged per query (wandb and {savepath}/metrics.jsonl).
#
#   bash bash_scripts/finance/online.sh runs/finance_online teacher forward
#   STUDENT=path/to/draft TEACHER=path/to/target DATA=my_stream.json bash bash_scripts/finance/online.sh runs/x teacher jsd
#
# Arguments: {savepath} [sample_source (ignored online: the served tokens are the target's)] [kl_method]
set -euo pipefail

SAVEPATH=${1:?usage: bash bash_scripts/finance/online.sh {savepath} [sample_source] [kl_method]}
SAMPLE_SOURCE=${2:-teacher}
KL_METHOD=${3:-forward}
STUDENT=${STUDENT:-JackFram/llama-160m}
TEACHER=${TEACHER:-lmsys/vicuna-7b-v1.3}
DATA=${DATA:-data/raw_data/gbharti_finance-alpaca_train.json}
UPDATE_INTERVAL=${UPDATE_INTERVAL:-8}
LR=${LR:-1e-4}
PRECISION=${PRECISION:---bf16 True --tf32 True}
REPORT_TO=${REPORT_TO:-wandb}

python -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$DATA" \
    --mode online --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 5 \
    --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 1 \
    --output_dir "$SAVEPATH" --num_train_epochs 1 --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type constant --weight_decay 0 --max_grad_norm 0 \
    --model_max_length 512 --save_strategy steps --save_steps 500 --logging_steps 50 \
    $PRECISION --report_to "$REPORT_TO"

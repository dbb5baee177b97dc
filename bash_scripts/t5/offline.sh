#!/usr/bin/env bash
# Offline distillation of a T5 draft from a T5 teacher on one dataset, through the same trainer as the
# decoder-only models: the encoder reads the bare query, the loss counts the decoder tokens of the
# {sample_source} response. Teacher responses are generated on the fly from a prompts-only training
# file (as the reference did), unless DATA points to a file with answers (data/local holds the
# workload's reference answers: "teacher" then trains on those).
# Models and files follow the dataset (bash_scripts/t5/datasets.sh): a local workload domain runs the
# T5 demo pair on CPU; the paper's datasets run t5-efficient-small from flan-t5-xl.
#
#   bash bash_scripts/t5/offline.sh runs/t5_sql_offline sql student forward       # T5 demo pair, CPU
#   EXTRA_ARGS='--max_steps 4' bash bash_scripts/t5/offline.sh runs/t5_math math teacher tvd
#   bash bash_scripts/t5/offline.sh runs/t5_gsm8k_offline gsm8k teacher forward   # the paper's run
#   STUDENT=google/t5-efficient-large bash bash_scripts/t5/offline.sh runs/t5_spider spider student jsd
#
# Arguments: {savepath} {dataset: sql|math|code|finance (local), gsm8k|spider|gbharti/finance-alpaca|code_search_net
#            (code-python), or a stem of data/raw_data/{stem}_{train,test}.json}
#            {sample_source: teacher|student|mix_request|mix_token} {kl_method: forward|reverse|jsd|tvd|reference_mix}
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args
source "$(dirname "${BASH_SOURCE[0]}")/datasets.sh"  # t5_dataset_defaults

USAGE="usage: bash bash_scripts/t5/offline.sh {savepath} {dataset} {sample_source} {kl_method}"
SAVEPATH=${1:?$USAGE}
DATASET=${2:?$USAGE}
SAMPLE_SOURCE=${3:?$USAGE}
KL_METHOD=${4:?$USAGE}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
t5_dataset_defaults "$DATASET"
EPOCHS=${EPOCHS:-3}
BATCH_SIZE=${BATCH_SIZE:-2}
GRAD_ACC=${GRAD_ACC:-8}
LR=${LR:-2e-5}
osd_extra_args

"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" \
    --data_path "$DATA" --eval_data_path "$EVAL_DATA" --max_eval_samples 200 \
    --mode offline --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 5 \
    --output_dir "$SAVEPATH" --num_train_epochs "$EPOCHS" \
    --per_device_train_batch_size "$BATCH_SIZE" --gradient_accumulation_steps "$GRAD_ACC" \
    --eval_strategy steps --eval_steps 50 --save_strategy steps --save_steps 50 --save_total_limit 3 \
    --learning_rate "$LR" --lr_scheduler_type cosine --warmup_steps 0.03 --weight_decay 0 \
    --model_max_length 1024 --max_new_tokens 128 --logging_steps 1 \
    $PRECISION --report_to "$REPORT_TO" "${EXTRA[@]}"

#!/usr/bin/env bash
# Online distillation of a T5 draft from a T5 teacher on a dataset stream (the training file in order);
# the loss counts every generated token (the reference's --all_token_mask True), one update every 2
# queries. Models and files follow the dataset as in offline.sh (bash_scripts/t5/datasets.sh): a local
# workload domain streams data/local/{domain}_train.json through the T5 demo pair on CPU.
#
#   EXTRA_ARGS='--max_steps 40' bash bash_scripts/t5/online.sh runs/t5_sql_online sql   # T5 demo pair, CPU
#   bash bash_scripts/t5/online.sh runs/t5_gsm8k_online gsm8k teacher forward          # the paper's run
#   STUDENT=google/t5-efficient-base bash bash_scripts/t5/online.sh runs/t5_spider spider teacher jsd
#
# Arguments: {savepath} {dataset: as offline.sh} [sample_source (ignored online)] [kl_method]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args
source "$(dirname "${BASH_SOURCE[0]}")/datasets.sh"  # t5_dataset_defaults

USAGE="usage: bash bash_scripts/t5/online.sh {savepath} {dataset} [sample_source] [kl_method]"
SAVEPATH=${1:?$USAGE}
DATASET=${2:?$USAGE}
SAMPLE_SOURCE=${3:-teacher}
KL_METHOD=${4:-forward}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
t5_dataset_defaults "$DATASET"
UPDATE_INTERVAL=${UPDATE_INTERVAL:-2}
LR=${LR:-2e-5}
osd_extra_args

"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$DATA" \
    --mode online --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 5 \
    --online_loss_positions all --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 10 \
    --output_dir "$SAVEPATH" --num_train_epochs 1 --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type constant --max_grad_norm 0 \
    --model_max_length 1024 --max_new_tokens 128 --save_strategy steps --save_steps 500 --logging_steps 50 \
    $PRECISION --report_to "$REPORT_TO" "${EXTRA[@]}"

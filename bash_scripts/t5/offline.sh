#!/usr/bin/env bash
# Offline distillation of a T5 draft (t5-efficient-small) from flan-t5-xl on one dataset, through the
# same trainer as the decoder-only models: the encoder reads the bare query, the loss counts the
# decoder tokens of the {sample_source} response. Teacher responses are generated on the fly from the
# prompts-only training file (as the reference did), unless DATA points to a file with answers.
#
#   bash bash_scripts/t5/offline.sh runs/t5_gsm8k_offline gsm8k teacher forward
#   STUDENT=google/t5-efficient-large bash bash_scripts/t5/offline.sh runs/t5_spider spider student jsd
#
# Arguments: {savepath} {dataset: gsm8k|spider|finance|code-python, or a stem of data/raw_data/{stem}_{train,test}.json}
#            {sample_source: teacher|student|mix_request|mix_token} {kl_method: forward|reverse|jsd|tvd|reference_mix}
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE="usage: bash bash_scripts/t5/offline.sh {savepath} {dataset} {sample_source} {kl_method}"
SAVEPATH=${1:?$USAGE}
DATASET=${2:?$USAGE}
SAMPLE_SOURCE=${3:?$USAGE}
KL_METHOD=${4:?$USAGE}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
case "$DATASET" in
    gsm8k) TRAIN_STEM=gsm8k_train EVAL_STEM=gsm8k_test ;;
    spider) TRAIN_STEM=spider_train EVAL_STEM=spider_validation ;;
    finance) TRAIN_STEM=gbharti_finance-alpaca_train EVAL_STEM=gbharti_finance-alpaca_eval ;;
    code-python) TRAIN_STEM=code_search_net_train EVAL_STEM=code_search_net_test ;;
    *) TRAIN_STEM=${DATASET}_train EVAL_STEM=${DATASET}_test ;;
esac
STUDENT=${STUDENT:-google/t5-efficient-small}
TEACHER=${TEACHER:-google/flan-t5-xl}
DATA=${DATA:-$ROOT/data/raw_data/${TRAIN_STEM}.json}
EVAL_DATA=${EVAL_DATA:-$ROOT/data/raw_data/${EVAL_STEM}.json}
EPOCHS=${EPOCHS:-3}
BATCH_SIZE=${BATCH_SIZE:-2}
GRAD_ACC=${GRAD_ACC:-8}
LR=${LR:-2e-5}
PRECISION=${PRECISION-"--bf16 True"}  # PRECISION= (empty) for CPU or fp32
REPORT_TO=${REPORT_TO:-wandb}
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

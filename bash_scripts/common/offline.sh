#!/usr/bin/env bash
# Shared runner of the per-dataset offline distillation scripts (bash_scripts/{spider,gsm8k,finance,
# code-python}/offline.sh, the paper's Table 1 setting). Those wrappers export their dataset's DATA,
# EVAL_DATA, MAX_LENGTH, SAVE_STEPS and OSD_SCRIPT (their own path, for the usage message), then exec
# this; every other default and environment override lives here. Run it directly with your own data:
#
#   DATA=my_train.json EVAL_DATA=my_eval.json bash bash_scripts/common/offline.sh runs/x student forward
#   PYTHON=echo bash bash_scripts/gsm8k/offline.sh runs/x student forward   # print the osd.train call
#
# Arguments: {savepath} {sample_source: teacher|student|mix_request|mix_token} {kl_method: forward|reverse|jsd|tvd|reference_mix}
# Extra flags for osd.train can be appended through EXTRA_ARGS, e.g. EXTRA_ARGS='--max_steps 10 --run_name "my run"' (quoted words kept).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE="usage: bash ${OSD_SCRIPT:-bash_scripts/common/offline.sh} {savepath} {sample_source} {kl_method}"
SAVEPATH=${1:?$USAGE}
SAMPLE_SOURCE=${2:?$USAGE}
KL_METHOD=${3:?$USAGE}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
STUDENT=${STUDENT:-JackFram/llama-160m}
TEACHER=${TEACHER:-lmsys/vicuna-7b-v1.3}
DATA=${DATA:?set DATA to the training conversations (JSON)}
EVAL_DATA=${EVAL_DATA:?set EVAL_DATA to the evaluation conversations (JSON)}
EPOCHS=${EPOCHS:-2}
BATCH_SIZE=${BATCH_SIZE:-32}
GRAD_ACC=${GRAD_ACC:-4}
LR=${LR:-2e-5}
MAX_LENGTH=${MAX_LENGTH:-512}  # spider and finance export 256
SAVE_STEPS=${SAVE_STEPS:-50}  # spider exports 30
PRECISION=${PRECISION-"--bf16 True --tf32 True"}  # PRECISION= (empty) for CPU or fp32
REPORT_TO=${REPORT_TO:-wandb}
osd_extra_args

"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" \
    --data_path "$DATA" --eval_data_path "$EVAL_DATA" \
    --mode offline --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 5 \
    --output_dir "$SAVEPATH" --num_train_epochs "$EPOCHS" \
    --per_device_train_batch_size "$BATCH_SIZE" --gradient_accumulation_steps "$GRAD_ACC" \
    --eval_strategy epoch --save_strategy steps --save_steps "$SAVE_STEPS" --save_total_limit 3 \
    --learning_rate "$LR" --lr_scheduler_type cosine --warmup_steps 0.03 --weight_decay 0 \
    --activation_checkpointing True --model_max_length "$MAX_LENGTH" --logging_steps 1 \
    $PRECISION --report_to "$REPORT_TO" "${EXTRA[@]}"

#!/usr/bin/env bash
# Shared runner of the per-dataset online distillation scripts (bash_scripts/{spider,gsm8k,finance,
# code-python}/online.sh, the paper's Fig. 2 setting): each query of DATA is served with speculative
# decoding, and every UPDATE_INTERVAL queries the draft takes one step on the tokens it got wrong.
# Those wrappers export their dataset's DATA and OSD_SCRIPT (their own path, for the usage message),
# then exec this; every other default and environment override lives here.
#
#   DATA=my_stream.json bash bash_scripts/common/online.sh runs/x teacher jsd
#   PYTHON=echo bash bash_scripts/gsm8k/online.sh runs/x   # print the osd.train call
#
# Arguments: {savepath} [sample_source (ignored online: the served tokens are the target's)] [kl_method]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE="usage: bash ${OSD_SCRIPT:-bash_scripts/common/online.sh} {savepath} [sample_source] [kl_method]"
SAVEPATH=${1:?$USAGE}
SAMPLE_SOURCE=${2:-teacher}
KL_METHOD=${3:-forward}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
STUDENT=${STUDENT:-JackFram/llama-160m}
TEACHER=${TEACHER:-lmsys/vicuna-7b-v1.3}
DATA=${DATA:?set DATA to the stream of conversations (JSON)}
UPDATE_INTERVAL=${UPDATE_INTERVAL:-8}
LR=${LR:-1e-4}
MAX_LENGTH=${MAX_LENGTH:-512}  # spider, gsm8k and finance export 256
EPOCHS=${EPOCHS:-1}  # finance exports 3
SCHEDULE=${SCHEDULE:-constant}  # finance exports cosine
PRECISION=${PRECISION:---bf16 True --tf32 True}
REPORT_TO=${REPORT_TO:-wandb}

"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$DATA" \
    --mode online --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 5 \
    --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 1 \
    --output_dir "$SAVEPATH" --num_train_epochs "$EPOCHS" --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type "$SCHEDULE" --weight_decay 0 --max_grad_norm 0 \
    --model_max_length "$MAX_LENGTH" --save_strategy steps --save_steps 500 --logging_steps 50 \
    $PRECISION --report_to "$REPORT_TO"

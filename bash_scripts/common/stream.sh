#!/usr/bin/env bash
# Shared runner of the online stream experiments (bash_scripts/online/{sharp,drift,mix,arena,routed}.sh):
# one draft (or one per route with osd.distill.routing) is distilled online on the stream DATA, one
# update every UPDATE_INTERVAL queries (1 by default; 1000000000 keeps the draft static). Those
# wrappers export DATA and OSD_USAGE (their usage message), then exec this with the entry module, the
# savepath and any module-specific flags, which are appended to the call.
#
#   DATA=data/sharp.json bash bash_scripts/common/stream.sh osd.train runs/x
#   DATA=data/arena/mix_topics.json bash bash_scripts/common/stream.sh osd.distill.routing runs/x --route_by topic
#   PYTHON=echo bash bash_scripts/online/sharp.sh runs/x   # print the call
#
# Arguments: {module: osd.train|osd.distill.routing} {savepath} [extra flags for the module]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE=${OSD_USAGE:-"usage: bash bash_scripts/common/stream.sh {module} {savepath} [flags]"}
MODULE=${1:?$USAGE}
SAVEPATH=${2:?$USAGE}
DATA=${DATA:?set DATA to the stream of conversations (JSON)}
STUDENT=${STUDENT:-JackFram/llama-160m}
TEACHER=${TEACHER:-lmsys/vicuna-7b-v1.3}
KL_METHOD=${KL_METHOD:-forward}  # jsd: the generalised JSD; the reference code's "jsd" (0.9 forward + 0.1 reverse KL) is reference_mix
UPDATE_INTERVAL=${UPDATE_INTERVAL:-1}
LR=${LR:-1e-5}
PRECISION=${PRECISION:---bf16 True --tf32 True}
REPORT_TO=${REPORT_TO:-wandb}

"$PYTHON" -m "$MODULE" \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" --data_path "$DATA" \
    --mode online --kl_method "$KL_METHOD" --max_propose_num 5 \
    --online_update_interval "$UPDATE_INTERVAL" --online_eval_interval 1 \
    --output_dir "$SAVEPATH" --num_train_epochs 1 --per_device_train_batch_size 1 \
    --learning_rate "$LR" --lr_scheduler_type constant --max_grad_norm 0 \
    --model_max_length 512 --save_strategy steps --save_steps 500 --logging_steps 50 \
    $PRECISION --report_to "$REPORT_TO" "${@:3}"

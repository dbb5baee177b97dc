#!/usr/bin/env bash
# Offline distillation on the embedded demo pair (SmolLM2-135M-Instruct target, osd/demo/models) and the local workload
# (data/local), on CPU with no downloads: the same trainer and flags as the paper's scripts, with
# sizes that finish in minutes. Alpha before ("Standard") and after is in {savepath}/metrics.jsonl.
#
#   bash bash_scripts/demo/offline.sh runs/demo_student_forward student forward
#   DOMAIN=math MAX_STEPS=40 bash bash_scripts/demo/offline.sh runs/demo_math mix_token jsd
#   REPORT_TO=wandb bash bash_scripts/demo/offline.sh runs/demo teacher forward   # offline wandb without a key
#
# Arguments: {savepath} {sample_source: teacher|student|mix_request|mix_token} {kl_method: forward|reverse|jsd|tvd|reference_mix}
# Rerunning the same command into {savepath} does nothing once the run has finished (an interrupted
# one starts over: it saves no checkpoint); other settings are refused: remove it, or use another one.
# The "teacher" source trains on DATA's assistant turns; data/local holds the workload's reference
# answers, so for the teacher's own answers (as the paper) write them first and point DATA at them:
#   python data/generate_answer.py --filename data/local/sql_train.json --model osd/demo/models/target
# (benchmarks/table1_offline.py does this itself).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args

USAGE="usage: bash bash_scripts/demo/offline.sh {savepath} {sample_source} {kl_method}"
SAVEPATH=${1:?$USAGE}
SAMPLE_SOURCE=${2:?$USAGE}
KL_METHOD=${3:?$USAGE}
DOMAIN=${DOMAIN:-sql}
STUDENT=${STUDENT:-$ROOT/osd/demo/models/draft}
TEACHER=${TEACHER:-$ROOT/osd/demo/models/target}  # SmolLM2-135M-Instruct, converted by bash_scripts/setup_env.sh
DATA=${DATA:-$ROOT/data/local/${DOMAIN}_train.json}
EVAL_DATA=${EVAL_DATA:-$ROOT/data/local/${DOMAIN}_eval.json}
MAX_STEPS=${MAX_STEPS:-60}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-1e-4}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-48}
MAX_EVAL_SAMPLES=${MAX_EVAL_SAMPLES:-80}
REPORT_TO=${REPORT_TO:-none}
osd_extra_args
# tiny models gain nothing from threads, and on a shared CPU extra threads slow torch down many times
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

"$PYTHON" -m osd.train \
    --student_model_path "$STUDENT" --teacher_model_path "$TEACHER" \
    --data_path "$DATA" --eval_data_path "$EVAL_DATA" --max_eval_samples "$MAX_EVAL_SAMPLES" \
    --mode offline --sample_source "$SAMPLE_SOURCE" --kl_method "$KL_METHOD" --max_propose_num 1 \
    --output_dir "$SAVEPATH" --max_steps "$MAX_STEPS" --per_device_train_batch_size "$BATCH_SIZE" \
    --eval_strategy no --save_strategy no --learning_rate "$LR" --lr_scheduler_type constant \
    --model_max_length 256 --max_new_tokens "$MAX_NEW_TOKENS" --teacher_dtype bfloat16 --logging_steps 5 \
    --report_to "$REPORT_TO" --resume_from_checkpoint last "${EXTRA[@]}"

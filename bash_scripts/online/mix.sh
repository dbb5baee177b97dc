#!/usr/bin/env bash
# A random mix of datasets (the reference's two_mix): build the stream with
# python data/prepare_online.py --kind mix --inputs gsm8k=data/raw_data/gsm8k_train.json \
#     finance=data/raw_data/gbharti_finance-alpaca_train.json --n 4000 --output data/mix.json
# Alpha per query and per dataset (alpha_{dataset}) goes to wandb and {savepath}/metrics.jsonl;
# plot it with: python -m osd.plots {savepath}/metrics.jsonl --stream $DATA --out {savepath}/alpha.png
#
#   bash bash_scripts/online/mix.sh runs/mix
#   UPDATE_INTERVAL=1000000000 bash bash_scripts/online/mix.sh runs/mix_static   # static draft: alpha only
#   STUDENT=... TEACHER=... DATA=... bash bash_scripts/online/mix.sh runs/x
set -euo pipefail

SAVEPATH=${1:?usage: bash bash_scripts/online/mix.sh {savepath}}
DATA=${DATA:-data/mix.json}
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

#!/usr/bin/env bash
# bench_engine with online-distilled drafts, one per domain: the Standard demo draft distilled online with the
# main job's recipe until 3ea54b3 (osd.analysis.online_replay: lr 1e-4, 4 AdamW steps after every query on every
# served token, gamma 3, served in bf16) over the first QUERIES training queries of each domain, answers of TOKENS
# tokens as bench_engine serves them; then bench_engine, each draft serving its own domain's eval prompts.
#   bash bash_scripts/online/bench_online_drafts.sh [OUT_DIR]     # default outputs/bench_online_drafts
#   QUERIES=192 TOKENS=64 by default (~45 min on 2 cores: the recordings and replays run two at a time).
# Resumable: a recording, draft or result already in OUT_DIR is kept.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON
OUT=outputs/bench_online_drafts  # under the repository: the result files name it as it is
if [ $# -ge 1 ]; then OUT=$(realpath -m "$1"); fi  # a relative OUT_DIR is the caller's
cd "$ROOT"
QUERIES=${QUERIES:-192}
TOKENS=${TOKENS:-64}
mkdir -p "$OUT"

draft() {  # domain: the target's answers to the stream (top-32 for the loss), then the online replay
    local domain=$1
    # each step's last file marks it done (a recording writes its .safetensors after its .jsonl; a replay its
    # --out after the draft), so a step killed half-way runs again
    [ -f "$OUT/rec_$domain.safetensors" ] || "$PYTHON" -m osd.analysis.record --target osd/demo/models/target \
        --conversations "data/local/${domain}_train.json" --limit "$QUERIES" --max_new_tokens "$TOKENS" \
        --top_k 32 --dtype bfloat16 --threads 1 --output "$OUT/rec_$domain"
    [ -f "$OUT/replay_$domain.json" ] || "$PYTHON" -m osd.analysis.online_replay \
        --recording "$OUT/rec_$domain" --stream "data/local/${domain}_train.json" --limit "$QUERIES" \
        --draft osd/demo/models/draft --gamma 3 --learning_rate 1e-4 --steps_per_update 4 --loss_positions all \
        --draft_dtype bfloat16 --threads 1 --save_draft "$OUT/drafts/$domain" --out "$OUT/replay_$domain.json"
}

(draft sql && draft code) &
first=$!
draft math && draft finance
wait "$first"
[ -f "$OUT/bench_engine.json" ] || "$PYTHON" benchmarks/bench_engine.py --threads 1 \
    --data_drafts "$OUT/drafts/{domain}" --output "$OUT/bench_engine.json"

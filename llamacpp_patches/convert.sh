#!/usr/bin/env bash
# Convert a Hugging Face model folder to GGUF with the pinned tree's converter, then quantize.
#   bash llamacpp_patches/convert.sh HF_DIR_OR_HUB_NAME OUT_DIR/NAME [TYPES...]   # default TYPES: f16 q8_0 q4_0
#   bash llamacpp_patches/convert.sh osd/demo/models/draft llamacpp_patches/work/gguf/draft f16
#   bash llamacpp_patches/convert.sh lmsys/vicuna-7b-v1.3 llamacpp_patches/work/gguf/vicuna-7b f16 q4_0
# A hub name is fetched into the Hugging Face cache first (snapshot_download; HF_HUB_OFFLINE=1 takes
# it from the cache).
# writes OUT_DIR/NAME-<type>.gguf per type (f32/f16/bf16 straight from the converter, the others
# via llama-quantize from the f16 file). Run build.sh first (it fetches the tree and llama-quantize).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
SRC="${LLAMACPP_SRC:-$HERE/work/llama.cpp}"
QUANTIZE="$SRC/build/bin/llama-quantize"
if [[ $# -lt 2 ]]; then
    echo "usage: bash llamacpp_patches/convert.sh HF_DIR_OR_HUB_NAME OUT_DIR/NAME [TYPES...]" >&2
    exit 2
fi
HF_DIR="$1"
OUT="$2"
shift 2
if [[ ! -d "$HF_DIR" ]]; then  # a hub name: its snapshot folder in the cache
    HF_DIR="$("$PYTHON" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' "$HF_DIR")"
fi
[[ -f "$SRC/convert_hf_to_gguf.py" ]] || { echo "no llama.cpp tree at $SRC: run bash llamacpp_patches/build.sh first" >&2; exit 1; }
if [[ $# -gt 0 ]]; then TYPES=("$@"); else TYPES=(f16 q8_0 q4_0); fi

mkdir -p "$(dirname "$OUT")"
for TYPE in "${TYPES[@]}"; do
    case "$TYPE" in
        f32|f16|bf16)
            "$PYTHON" "$SRC/convert_hf_to_gguf.py" "$HF_DIR" --outtype "$TYPE" --outfile "$OUT-$TYPE.gguf" ;;
        *)
            [[ -f "$OUT-f16.gguf" ]] || "$PYTHON" "$SRC/convert_hf_to_gguf.py" "$HF_DIR" --outtype f16 --outfile "$OUT-f16.gguf"
            "$QUANTIZE" "$OUT-f16.gguf" "$OUT-$TYPE.gguf" "$TYPE" ;;
    esac
done
for TYPE in "${TYPES[@]}"; do ls -l "$OUT-$TYPE.gguf"; done

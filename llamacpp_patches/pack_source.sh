#!/usr/bin/env bash
# The pinned llama.cpp tree (build.sh's) stripped to what llama-osd-stream's build and convert_hf_to_gguf.py
# need, as one .tar.xz small enough to travel to a lent GPU machine (about 2.7 MB; the sdist is 73 MB).
#   bash llamacpp_patches/pack_source.sh .gpu/llama.cpp.tar.xz
#   LLAMACPP_TARBALL=.gpu/llama.cpp.tar.xz bash llamacpp_patches/build.sh --cuda --cuda-arch=90 --example-only
# Kept: the build files, ggml with its CPU and CUDA backends, src, include, common, vendor, examples and pocs
# (CMake reads their lists), the converter and gguf-py. Dropped: ggml's other backends, tools (llama-quantize
# among them), tests, app, models (tokenizer test files), docs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:?usage: bash llamacpp_patches/pack_source.sh OUT.tar.xz}"
SRC="${LLAMACPP_SRC:-$HERE/work/llama.cpp}"
KEEP=(LICENSE CMakeLists.txt cmake ggml src include common vendor examples pocs convert_hf_to_gguf.py conversion gguf-py)
DROP=(cann et hexagon metal opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn)

bash "$HERE/build.sh" --fetch-only
EXCLUDES=(--exclude=examples/osd-stream)   # build.sh adds our example afresh
for BACKEND in "${DROP[@]}"; do EXCLUDES+=("--exclude=ggml/src/ggml-$BACKEND"); done
mkdir -p "$(dirname "$OUT")"
tar -C "$SRC" "${EXCLUDES[@]}" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cJf "$OUT" "${KEEP[@]}"
ls -l "$OUT"

#!/usr/bin/env bash
# Fetch the pinned llama.cpp, add our llama-osd-stream example, build it (CPU; --cuda for CUDA).
#   bash llamacpp_patches/build.sh            # CPU build in llamacpp_patches/work/llama.cpp/build
#   bash llamacpp_patches/build.sh --cuda     # adds -DGGML_CUDA=ON
#   bash llamacpp_patches/build.sh --no-amx   # a VM whose CPU flags show AMX but which traps AMX
#                                             # instructions (SIGILL in tinygemm_kernel_amx on q8_0/q4_0)
#   LLAMACPP_SRC=/path/to/llama.cpp bash llamacpp_patches/build.sh   # use your own checkout instead
# The source is the llama.cpp tree vendored by the PyPI sdist of llama-cpp-python (only package
# registries are reachable here); users with GitHub access may point LLAMACPP_SRC at a clone of the
# same upstream tree. Nothing of llama.cpp is committed: the tree lives under work/ (git-ignored).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
PIN="llama-cpp-python==0.3.36"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
SRC="${LLAMACPP_SRC:-$WORK/llama.cpp}"
JOBS="${JOBS:-$(nproc)}"
TARGETS="llama-osd-stream llama-quantize"
CMAKE_FLAGS=(-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release)
for ARG in "$@"; do
    case "$ARG" in
        --cuda) CMAKE_FLAGS+=(-DGGML_CUDA=ON) ;;
        --no-amx) CMAKE_FLAGS+=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
                               "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16") ;;
        *) echo "unknown flag $ARG (expected --cuda, --no-amx)" >&2; exit 2 ;;
    esac
done

if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    mkdir -p "$WORK"
    "$PYTHON" -m pip download --no-binary :all: --no-deps "$PIN" -d "$WORK"
    SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz)"
    echo "$SDIST_SHA256  $SDIST" | sha256sum -c -
    tar -xzf "$SDIST" -C "$WORK"
    mv "$WORK"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
    rm -rf "$WORK"/llama_cpp_python-*/
fi

# our example: a new target next to examples/speculative (the upstream examples stay untouched)
rm -rf "$SRC/examples/osd-stream"
cp -r "$HERE/osd-stream" "$SRC/examples/osd-stream"
grep -q "add_subdirectory(osd-stream)" "$SRC/examples/CMakeLists.txt" \
    || echo "add_subdirectory(osd-stream)" >> "$SRC/examples/CMakeLists.txt"

cmake -S "$SRC" -B "$SRC/build" "${CMAKE_FLAGS[@]}"
cmake --build "$SRC/build" -j "$JOBS" --target $TARGETS
echo "built: $SRC/build/bin/llama-osd-stream"

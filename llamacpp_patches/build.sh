#!/usr/bin/env bash
# Fetch the pinned llama.cpp, add our llama-osd-stream example, build it (CPU; --cuda for CUDA).
#   bash llamacpp_patches/build.sh            # CPU build in llamacpp_patches/work/llama.cpp/build
#   bash llamacpp_patches/build.sh --cuda     # adds -DGGML_CUDA=ON
#   bash llamacpp_patches/build.sh --cuda --cuda-arch=90 --example-only   # a lent H100/H200: sm_90, the example only
#   bash llamacpp_patches/build.sh --cuda --no-flash-attn   # without the CUDA FlashAttention kernels: about half
#                                             # the CUDA compile; attention then takes ggml's matrix products
#   bash llamacpp_patches/build.sh --no-amx   # a VM whose CPU flags show AMX but which traps AMX
#                                             # instructions (SIGILL in tinygemm_kernel_amx on q8_0/q4_0)
#   bash llamacpp_patches/build.sh --fetch-only                        # the tree only (pack_source.sh)
#   LLAMACPP_SRC=/path/to/llama.cpp bash llamacpp_patches/build.sh   # use your own checkout instead
#   LLAMACPP_TARBALL=.gpu/llama.cpp.tar.xz bash llamacpp_patches/build.sh ...  # the tree pack_source.sh stripped
# The source is the llama.cpp tree vendored by the PyPI sdist of llama-cpp-python (only package
# registries are reachable here); users with GitHub access may point LLAMACPP_SRC at a clone of the
# same upstream tree. Nothing of llama.cpp is committed: the tree lives under work/ (git-ignored).
# --example-only builds llama-osd-stream alone (no llama-quantize), without llama.cpp's tests, tools,
# server and app, which a stripped tree (pack_source.sh) does not hold.
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
CUDA=0
FETCH_ONLY=0
for ARG in "$@"; do
    case "$ARG" in
        --cuda) CUDA=1 ;;
        --cuda-arch=*) CMAKE_FLAGS+=("-DCMAKE_CUDA_ARCHITECTURES=${ARG#--cuda-arch=}") ;;
        --example-only) TARGETS="llama-osd-stream"
                        CMAKE_FLAGS+=(-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
                                      -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF) ;;
        --no-flash-attn) CMAKE_FLAGS+=(-DGGML_CUDA_FA=OFF) ;;
        --fetch-only) FETCH_ONLY=1 ;;
        --no-amx) CMAKE_FLAGS+=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
                               "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16") ;;
        *) echo "unknown flag $ARG (expected --cuda, --cuda-arch=ARCH, --example-only, --no-flash-attn, --fetch-only, --no-amx)" >&2; exit 2 ;;
    esac
done

# cuBLAS where the CUDA toolkit has none: a toolkit assembled from pip wheels (this workplace's GPU
# machines) keeps it in the nvidia-cublas wheel beside torch (lib/libcublas.so.N, include/cublas_v2.h)
cublas_flags() {
    local lib
    compgen -G "${CUDA_HOME:-/usr/local/cuda}/lib64/libcublas.so*" >/dev/null && return
    lib="$("$PYTHON" -c 'import glob, sysconfig; print(next(iter(sorted(glob.glob(sysconfig.get_paths()["purelib"] + "/nvidia/**/libcublas.so.*", recursive=True))), ""))')"
    [[ -n "$lib" ]] || { echo "no cuBLAS in the CUDA toolkit or in $PYTHON's nvidia wheels" >&2; exit 1; }
    local dir
    dir="$(dirname "$lib")"
    CMAKE_FLAGS+=("-DCUDA_cublas_LIBRARY=$lib" "-DCUDA_cublasLt_LIBRARY=$(ls "$dir"/libcublasLt.so.* | head -1)"
                  "-DCMAKE_CUDA_FLAGS=-I$dir/../include")
}

if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    mkdir -p "$WORK"
    if [[ -n "${LLAMACPP_TARBALL:-}" ]]; then
        mkdir -p "$SRC"
        tar -xJf "$LLAMACPP_TARBALL" -C "$SRC"
    else
        "$PYTHON" -m pip download --no-binary :all: --no-deps "$PIN" -d "$WORK"
        SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz)"
        echo "$SDIST_SHA256  $SDIST" | sha256sum -c -
        tar -xzf "$SDIST" -C "$WORK"
        mv "$WORK"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
        rm -rf "$WORK"/llama_cpp_python-*/
    fi
fi
[[ "$FETCH_ONLY" == 1 ]] && { echo "source: $SRC"; exit 0; }

if [[ "$CUDA" == 1 ]]; then
    # NCCL is for several GPUs; without VMM's memory pool ggml need not link the driver's libcuda (which
    # a toolkit from wheels does not find)
    CMAKE_FLAGS+=(-DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_NO_VMM=ON)
    cublas_flags
fi

# our example: a new target next to examples/speculative (the upstream examples stay untouched)
rm -rf "$SRC/examples/osd-stream"
cp -r "$HERE/osd-stream" "$SRC/examples/osd-stream"
grep -q "add_subdirectory(osd-stream)" "$SRC/examples/CMakeLists.txt" \
    || echo "add_subdirectory(osd-stream)" >> "$SRC/examples/CMakeLists.txt"

cmake -S "$SRC" -B "$SRC/build" "${CMAKE_FLAGS[@]}"
cmake --build "$SRC/build" -j "$JOBS" --target $TARGETS
echo "built: $SRC/build/bin/llama-osd-stream"

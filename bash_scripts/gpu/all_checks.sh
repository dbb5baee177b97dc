#!/usr/bin/env bash
# Both GPU checks in one call, for a loan whose 15 minutes hold one machine start and one call of up to 10
# minutes: llama.cpp's CUDA build starts first, in the background (nice 19, on every core but the first four),
# while python_checks.sh runs on those four (its timings are of one CPU thread driving the GPU: a build on the
# same cores slowed them up to threefold); then llamacpp.sh, whose build stage finds the build done (or resumes it).
#   bash bash_scripts/gpu/all_checks.sh OUT    # OUT/python/, OUT/llamacpp/ (as each script writes), OUT/build.txt
#   bash bash_scripts/gpu/all_checks.sh OUT --stages target main_job    # flags after OUT go to python_checks.sh
#   DRY_RUN=1 bash bash_scripts/gpu/all_checks.sh OUT    # both rehearsals on this CPU; no build
# BUDGET_S (default 580) is the whole call's seconds; the Python checks get PYTHON_S of it (default 380) and
# llama.cpp what is left. A build still running when llama.cpp's turn comes is stopped, and its stage resumes it.
# WORK_DIR (default outputs, under the repository) holds the checks' own outputs: gpu_checks/, gpu_llamacpp/.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PYTHON:-}" ] && [ ! -x "$ROOT/.venv/bin/python" ]; then PYTHON=python3; fi  # as common.sh
source "$ROOT/bash_scripts/common/env.sh"
export PYTHON  # the build's (build.sh finds cuBLAS beside its torch)
OUT="$(mkdir -p "${1:?usage: bash $0 OUT [python_checks.sh flags...]}" && cd "$1" && pwd)"
shift
BUDGET_S="${BUDGET_S:-580}"
PYTHON_S="${PYTHON_S:-380}"
WORK_DIR="${WORK_DIR:-outputs}"
START=$SECONDS
DONE="$(mktemp -u)"  # the background build touches it when it ends
BUILD="" CHECKS=()
if [ -n "${DRY_RUN:-}" ]; then
    echo "dry run: no build" > "$OUT/build.txt"
    touch "$DONE"
else
    CORES="$(nproc)"
    if (( CORES >= 8 )) && command -v taskset >/dev/null; then
        CHECKS=(taskset -c 0-3) BUILDER=(taskset -c "4-$(( CORES - 1 ))") JOBS=$(( CORES - 4 ))
    else
        CHECKS=() BUILDER=() JOBS=$(( CORES > 3 ? CORES - 2 : 1 ))
    fi
    LLAMACPP_TARBALL="$ROOT/.gpu/llama.cpp.tar.xz" JOBS="$JOBS" setsid "${BUILDER[@]}" bash -c \
        'nice -n 19 bash "$1"/llamacpp_patches/build.sh --cuda --cuda-arch=90 --example-only --no-flash-attn \
            > "$2"/build.txt 2>&1; echo "build.sh exit $? at $(( SECONDS ))s" >> "$2"/build.txt; touch "$3"' \
        build "$ROOT" "$OUT" "$DONE" &
    BUILD=$!
fi

"${CHECKS[@]}" bash "$ROOT/bash_scripts/gpu/python_checks.sh" "$OUT/python" --budget_s "$PYTHON_S" \
    --work_dir "$WORK_DIR/gpu_checks" "$@"
while [ ! -e "$DONE" ] && (( SECONDS - START < BUDGET_S - 120 )); do sleep 2; done
if [ ! -e "$DONE" ]; then
    kill -- "-$BUILD" 2>/dev/null
    echo "stopped at $(( SECONDS - START ))s of the call; llamacpp.sh's build stage resumes it" >> "$OUT/build.txt"
fi
rm -f "$DONE"
sed -i "s#$ROOT/##g" "$OUT/build.txt"  # the repository's paths relative, as the checks' own logs have them
bash "$ROOT/bash_scripts/gpu/llamacpp.sh" "$OUT/llamacpp" --budget_s "$(( BUDGET_S - (SECONDS - START) ))" \
    --work_dir "$WORK_DIR/gpu_llamacpp" --online_run "$WORK_DIR/gpu_checks/main_job"

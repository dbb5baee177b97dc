#!/usr/bin/env bash
# Both GPU checks in one call, for a loan whose 15 minutes hold one machine start and one call of up to 10
# minutes: llama.cpp's CUDA build starts first, in the background at low priority (nice 19, every core but
# two), while python_checks.sh runs; then llamacpp.sh, whose build stage finds the build done (or resumes it).
#   bash bash_scripts/gpu/all_checks.sh OUT    # OUT/python/, OUT/llamacpp/ (as each script writes), OUT/build.txt
#   DRY_RUN=1 bash bash_scripts/gpu/all_checks.sh OUT    # both rehearsals on this CPU; no build
# BUDGET_S (default 570) is the whole call's seconds; the Python checks get PYTHON_S of it (default 340) and
# llama.cpp what is left. A build still running when llama.cpp's turn comes is stopped, and its stage resumes it.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PYTHON:-}" ] && [ ! -x "$ROOT/.venv/bin/python" ]; then PYTHON=python3; fi  # as common.sh
source "$ROOT/bash_scripts/common/env.sh"
export PYTHON  # the build's (build.sh finds cuBLAS beside its torch)
OUT="$(mkdir -p "${1:?usage: bash $0 OUT}" && cd "$1" && pwd)"
BUDGET_S="${BUDGET_S:-570}"
PYTHON_S="${PYTHON_S:-340}"
START=$SECONDS
DONE="$(mktemp -u)"  # the background build touches it when it ends
BUILD=""
if [ -n "${DRY_RUN:-}" ]; then
    echo "dry run: no build" > "$OUT/build.txt"
    touch "$DONE"
else
    LLAMACPP_TARBALL="$ROOT/.gpu/llama.cpp.tar.xz" JOBS="$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))" \
        setsid bash -c 'nice -n 19 bash "$1"/llamacpp_patches/build.sh --cuda --cuda-arch=90 --example-only \
            --no-flash-attn > "$2"/build.txt 2>&1; echo "build.sh exit $? at $(( SECONDS ))s" >> "$2"/build.txt; touch "$3"' \
        build "$ROOT" "$OUT" "$DONE" &
    BUILD=$!
fi

bash "$ROOT/bash_scripts/gpu/python_checks.sh" "$OUT/python" --budget_s "$PYTHON_S"
while [ ! -e "$DONE" ] && (( SECONDS - START < BUDGET_S - 120 )); do sleep 2; done
if [ ! -e "$DONE" ]; then
    kill -- "-$BUILD" 2>/dev/null
    echo "stopped at $(( SECONDS - START ))s of the call; llamacpp.sh's build stage resumes it" >> "$OUT/build.txt"
fi
rm -f "$DONE"
bash "$ROOT/bash_scripts/gpu/llamacpp.sh" "$OUT/llamacpp" --budget_s "$(( BUDGET_S - (SECONDS - START) ))"

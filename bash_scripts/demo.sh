#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: set up .venv, then run online
# speculative decoding with the demo teacher/draft pair over a shifting local query stream
# (prints alpha as it rises, a per-domain table, writes outputs/online_demo/alpha.png).
#   bash bash_scripts/demo.sh [python -m osd.demo.online_demo flags...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/bash_scripts/setup_env.sh"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "${OSD_VENV:-$ROOT/.venv}/bin/python" -m osd.demo.online_demo "$@"

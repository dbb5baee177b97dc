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
# huge pages for torch's CPU buffers of 2 MB and more (read once, at torch's first allocation; `import osd`
# leaves it alone): the online update allocates its dense embedding gradients afresh at every step
export THP_MEM_ALLOC_ENABLE="${THP_MEM_ALLOC_ENABLE:-1}"
exec "${OSD_VENV:-$ROOT/.venv}/bin/python" -m osd.demo.online_demo "$@"

#!/usr/bin/env bash
# Build the local workload, then the demo tokenizer, teacher and draft (osd/demo/models/), seeded.
# Usage: bash bash_scripts/demo/build_demo_models.sh [extra build_models flags, e.g. --teacher_steps 20]
set -euo pipefail

PYTHON=${PYTHON:-.venv/bin/python}
SEED=0
WORKLOAD_DIR=data/local
OUT_DIR=osd/demo/models

cd "$(dirname "$0")/../.."
"$PYTHON" data/build_local_workload.py --seed "$SEED" --out_dir "$WORKLOAD_DIR"
"$PYTHON" -m osd.demo.build_models --seed "$SEED" --workload_dir "$WORKLOAD_DIR" --out_dir "$OUT_DIR" "$@"

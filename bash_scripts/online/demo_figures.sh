#!/usr/bin/env bash
# Regenerate the online figures and tables on the embedded demo pair (SmolLM2-135M-Instruct target;
# CPU, no downloads), each into outputs/online_*/{alpha.png,table.md,results.json}:
#   Fig. 2 analogue (single domain: online vs Standard vs two offline-distilled drafts),
#   Fig. 3 analogue (abrupt shifts: dip and recovery), gradual drift, routed vs shared drafts,
#   and the cost of updates (time share, buffer memory). Every query costs ~3 s with this target
#   (and is served twice, online and static), so the streams are short.
#
#   bash bash_scripts/online/demo_figures.sh
#   SCALE=2 bash bash_scripts/online/demo_figures.sh    # streams twice as long
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON
cd "$ROOT"  # outputs/ are under the repository, from any directory

SCALE=${SCALE:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one query at a time: a second thread gains little on 2 cores

# Fig. 2: also trains its two offline baselines (60 on-policy steps each: disjoint sql queries, the stream's first 10%)
"$PYTHON" -m benchmarks.online_single --domain sql --queries $((48 * SCALE)) --update_interval 8 --out outputs/online_single
"$PYTHON" -m benchmarks.online_shift --kind abrupt --per_domain $((16 * SCALE)) --window 8 --out outputs/online_shift
"$PYTHON" -m benchmarks.online_shift --kind drift --domains sql code --queries $((64 * SCALE)) --window 8 --out outputs/online_drift
"$PYTHON" -m benchmarks.online_routed --queries $((64 * SCALE)) --window 16 --out outputs/online_routed
"$PYTHON" -m benchmarks.online_cost --domain sql --queries $((24 * SCALE)) --out outputs/online_cost

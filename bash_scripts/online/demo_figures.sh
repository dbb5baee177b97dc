#!/usr/bin/env bash
# Regenerate the online figures and tables on the embedded demo pair (SmolLM2-135M-Instruct target;
# CPU, no downloads), each into outputs/online_*/{alpha.png,table.md,results.json}:
#   Fig. 2 analogue (single domain: online vs Standard vs two offline-distilled drafts),
#   Fig. 3 analogue (abrupt shifts: dip and recovery, beside static drafts distilled on the stream's
#   first 30/50/70/100%), Fig. 5 analogue (alpha per topic over a mixed stream), gradual drift,
#   routed vs shared drafts, and the cost of updates (time share, buffer memory). Every query costs
#   ~3 s with this target (and is served by every draft compared), so the streams are short.
#
#   bash bash_scripts/online/demo_figures.sh
#   SCALE=2 bash bash_scripts/online/demo_figures.sh    # streams twice as long
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # ROOT, PYTHON
cd "$ROOT"  # outputs/ are under the repository, from any directory

SCALE=${SCALE:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one query at a time: a second thread gains little on 2 cores
export THP_MEM_ALLOC_ENABLE=${THP_MEM_ALLOC_ENABLE:-1}  # huge pages for the online updates' buffers (as demo.sh)

# Fig. 2: also trains its two offline baselines (60 on-policy steps each: disjoint sql queries, the stream's first 10%)
"$PYTHON" -m benchmarks.online_single --domain sql --queries $((48 * SCALE)) --online_update_interval 8 --out outputs/online_single
# Fig. 3: each static draft distilled once (60 on-policy steps of 8, as Fig. 2's) on the stream's first 30/50/70/100%
"$PYTHON" -m benchmarks.online_shift --kind abrupt --per_domain $((16 * SCALE)) --window 8 --static_fractions 0.3 0.5 0.7 1.0 --out outputs/online_shift_static
# Fig. 5: alpha per topic, five topics of the workload drawn i.i.d.
"$PYTHON" -m benchmarks.online_shift --kind mix --topics school savings tkinter return loan --queries $((96 * SCALE)) --window 24 --out outputs/online_topics
"$PYTHON" -m benchmarks.online_shift --kind drift --domains sql code --queries $((64 * SCALE)) --window 8 --out outputs/online_drift
"$PYTHON" -m benchmarks.online_routed --queries $((64 * SCALE)) --window 16 --out outputs/online_routed
"$PYTHON" -m benchmarks.online_cost --domain sql --queries $((24 * SCALE)) --out outputs/online_cost

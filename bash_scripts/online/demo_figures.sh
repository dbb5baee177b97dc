#!/usr/bin/env bash
# Regenerate the online figures and tables on the embedded demo pair (CPU, no downloads), each
# into outputs/online_*/{alpha.png,table.md,results.json}:
#   Fig. 2 analogue (single domain: online vs Standard vs offline-distilled draft, and update cost),
#   Fig. 3 analogue (abrupt shifts: dip and recovery), gradual drift, routed vs shared drafts.
#
#   bash bash_scripts/online/demo_figures.sh
#   SCALE=2 bash bash_scripts/online/demo_figures.sh    # streams twice as long
set -euo pipefail

SCALE=${SCALE:-1}
OFFLINE_DRAFT=${OFFLINE_DRAFT:-outputs/demo_distilled_draft}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

python -m benchmarks.online_single --domain sql --queries $((120 * SCALE)) --update_interval 8 \
    --offline_draft "$OFFLINE_DRAFT" --out outputs/online_single
python -m benchmarks.online_shift --kind abrupt --per_domain $((50 * SCALE)) --out outputs/online_shift
python -m benchmarks.online_shift --kind drift --domains sql math --queries $((160 * SCALE)) --out outputs/online_drift
python -m benchmarks.online_routed --queries $((200 * SCALE)) --out outputs/online_routed
python -m benchmarks.online_cost --domain sql --queries $((48 * SCALE)) --out outputs/online_cost

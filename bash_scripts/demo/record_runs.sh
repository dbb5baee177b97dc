#!/usr/bin/env bash
# Record runs of the main job on this machine into a results folder: ROUNDS rounds, each a run of every mode in
# MODES one after another ("held": held to AVX2 by bash_scripts/hold_to_avx2.sh; "as_is": as the CPU is), on a
# quiet machine. A run that ends well has its summary.json copied to FOLDER as
# summary_[avx2_held_]<cpu>_<commit>_<n>.json (n after the folder's own: a second call adds runs), beside
# lscpu_<cpu>.txt; then the folder is tabulated (python -m benchmarks.demo_summaries). Runs write to RUNS
# (the repository's outputs/record_runs, so that their summaries name repository-relative paths); extra
# arguments go to every run.
#   bash bash_scripts/demo/record_runs.sh benchmarks/results/online_demo/v14_amd
#   ROUNDS=2 MODES=held bash bash_scripts/demo/record_runs.sh outputs/held_runs --gamma 3
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: bash bash_scripts/demo/record_runs.sh FOLDER [online_demo flags]" >&2; exit 2; }
FOLDER="$1"
shift
ROUNDS="${ROUNDS:-3}"
MODES="${MODES:-held as_is}"
RUNS="${RUNS:-$ROOT/outputs/record_runs}"
for mode in $MODES; do
  case "$mode" in held | as_is) ;; *) echo "record_runs.sh: MODES: '$mode' is neither held nor as_is" >&2; exit 2 ;; esac
done
mkdir -p "$FOLDER" "$RUNS"
FOLDER="$(cd "$FOLDER" && pwd)"
RUNS="$(cd "$RUNS" && pwd)"
model="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- || true)"
cpu="$(echo "${model:-$(uname -m)}" | tr 'A-Z' 'a-z' | sed -E 's/\((r|tm)\)//g; s/[^a-z0-9]+/ /g' | awk '{print $1 "_" $2}')"
cpu="${cpu%_}"
commit="$(git -C "$ROOT" rev-parse --short HEAD)"
command -v lscpu >/dev/null && lscpu > "$FOLDER/lscpu_$cpu.txt"
for ((round = 1; round <= ROUNDS; round++)); do
  for mode in $MODES; do
    held=""
    [ "$mode" = held ] && held=avx2_held_
    prefix="summary_${held}${cpu}_${commit}"
    n=1
    while [ -e "$FOLDER/${prefix}_$n.json" ]; do n=$((n + 1)); done
    run="$RUNS/${prefix#summary_}_$n"
    rm -rf "$run"  # a run killed before: its timings would not be one run's
    # held: bash_scripts/hold_to_avx2.sh's limits; as_is: none, even where this script was called held
    hold=(env -u ATEN_CPU_CAPABILITY -u ONEDNN_MAX_CPU_ISA -u MKL_ENABLE_INSTRUCTIONS -u NUMBA_CPU_NAME -u NUMBA_CPU_FEATURES)
    [ "$mode" = held ] && hold=(bash "$ROOT/bash_scripts/hold_to_avx2.sh")
    echo "record_runs.sh: round $round, $mode -> $run" >&2
    "${hold[@]}" bash "$ROOT/bash_scripts/demo.sh" --output_dir "$run" "$@" > "$run.log" 2>&1 || {
      echo "record_runs.sh: the run failed (its log: $run.log)" >&2; exit 1; }
    cp "$run/summary.json" "$FOLDER/${prefix}_$n.json"
  done
done
cd "$ROOT" && "${OSD_VENV:-$ROOT/.venv}/bin/python" -m benchmarks.demo_summaries "$FOLDER"

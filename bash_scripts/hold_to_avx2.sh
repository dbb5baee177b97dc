#!/usr/bin/env bash
# Run a command as on a CPU with AVX2 and neither AVX-512 nor AMX, where this one has them: torch's own kernels,
# oneDNN, MKL and the bf16 kernel LLVM compiles here (osd.spec.bf16_rows) held to AVX2. The instructions are an AVX2
# CPU's; the timings are not (this CPU's clock, caches and memory stay), so compare ratios, not minutes.
#   bash bash_scripts/hold_to_avx2.sh bash bash_scripts/demo.sh
set -euo pipefail
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
# numba's variables, which osd.spec.bf16_rows reads too: LLVM targets a CPU by name and features; unset, the
# features are this CPU's own (AVX-512 code on a Haswell name), empty, they are the name's
export NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""
exec "$@"

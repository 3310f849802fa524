#!/bin/bash
# Why is a device call's first `scpipe run` slower in its small steps than the next ones
# (issue 31: normalize_total 16.9 against 1.2 ms at 200k)? Runs the same 200k file RUNS times in
# fresh processes, the GPU idle for IDLE seconds before the first, and samples the GPU's SM clock
# and performance state every 20 ms beside each run; then once more after a second idle pause
# with the kernel cache emptied. Prints each run's small steps and the clocks seen.
# Usage: bash scripts/device/experiments/first_process.sh BIN_DIR (scpipe). Output in $OUT/first/.
set -u
B=${1:?directory with scpipe}
OUT=${OUT:-/tmp/out}
R=$OUT/first; mkdir -p "$R"
export SCPIPE_KERNEL_CACHE=/tmp/kc-first
F=/dev/shm/first_200k.h5ad
[ -f $F ] || "$B/scpipe" generate 200000 20000 -o $F > /dev/null 2>&1
nvidia-smi -q | grep -i -E "persistence mode|performance state|clocks event reasons active" | head -5
run() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw --format=csv,noheader -lms 20 > "$R/clocks_$1.csv" 2>&1 &
  local smi=$!
  sleep 0.3
  "$B/scpipe" run $F -o /dev/shm/first_out.h5ad --device gpu --no-neighbors --report "$R/run_$1.json" > "$R/run_$1.log" 2>&1 || echo "run $1 FAILED"
  kill $smi; wait $smi 2>/dev/null
  rm -f /dev/shm/first_out.h5ad
  python3 - "$R/run_$1.json" "$R/clocks_$1.csv" "$1" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
keep = ["set up the GPU(s)", "move X to the GPU", "calculate_qc_metrics", "filter_cells", "normalize_total", "log1p", "highly_variable_genes", "pca"]
ms = {s["step"]: s["seconds"] * 1e3 for s in rep["steps"]}
print(f"run {sys.argv[3]}: " + ", ".join(f"{k.split(' ')[0]} {ms[k]:.1f}" for k in keep if k in ms))
clocks = [l.split(", ") for l in open(sys.argv[2]) if l.count(",") >= 4]
sm = [int(c[1].split()[0]) for c in clocks if c[1].split()[0].isdigit()]
if sm:
    print(f"  SM clock MHz: first {sm[:8]} ... min {min(sm)} max {max(sm)}; states {sorted(set(c[3] for c in clocks))}")
EOF
}
sleep ${IDLE:-20}
for i in $(seq 1 ${RUNS:-3}); do run $i; done
sleep ${IDLE:-20}
rm -rf $SCPIPE_KERNEL_CACHE
run idle_empty_cache
run after

#!/bin/bash
# Where QC and harmony spend their time in a fresh process (issue 31): `scpipe generate` writes
# N x 20,000 counts (the workload B model), then `scpipe run --harmony batch` runs in fresh
# processes with SCPIPE_TRACE_PHASES=1 and SCPIPE_TRACE_TRANSFERS=1 (each phase synchronised and
# timed on stderr), once per entry of VARIANTS (environment settings; "-" for none), after one
# untraced run that fills the page cache.
# Usage: bash scripts/device/experiments/step_traces.sh BIN_DIR   (with scpipe)
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/step_traces; mkdir -p "$R"
export SCPIPE_KERNEL_CACHE=/tmp/kc-traces
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu_txt"
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag > "$R/thp_txt" 2>&1
cat "$R/gpu_txt" "$R/thp_txt"
for cells in ${SIZES:-200000 1000000}; do
  F=/dev/shm/traces_$cells.h5ad
  /usr/bin/time -f "generate $cells: %e s" "$B/scpipe" generate "$cells" 20000 -o "$F" 2>&1 | tail -1
  "$B/scpipe" run "$F" -o /dev/shm/traces_out.h5ad --device gpu --harmony batch ${EXTRA:-} > /dev/null 2>&1
  for v in ${VARIANTS:--}; do
    name=$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_')
    log="$R/${cells}_$name.txt"
    env $( [ "$v" = - ] || echo "$v" ) SCPIPE_TRACE_PHASES=1 SCPIPE_TRACE_TRANSFERS=1 "$B/scpipe" run "$F" \
      -o /dev/shm/traces_out.h5ad --device gpu --harmony batch ${EXTRA:-} --report "$R/${cells}_$name.json" > "$log" 2>&1
    echo "== $cells cells, $v (exit $?)"
    grep -E "^calculate_qc|^qc assemble|^pca [a-z]|^harmony [a-z]" "$log" | grep -v "^harmony iteration"
    grep -iE "download|staged" "$log" | head -12
    awk '/^harmony iteration/ { sub(/^harmony iteration /, ""); split($0, a, ": "); n[a[1]]++; t[a[1]] += a[2] }
         END { for (p in n) printf "harmony iterations, %s: %d, %.2f ms in all\n", p, n[p], t[p] }' "$log"
    grep -E "^(calculate_qc_metrics|harmony_integrate|pca|total) " "$log"
  done
  rm -f "$F" /dev/shm/traces_out.h5ad
done

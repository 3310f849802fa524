#!/bin/bash
# Where the early GPU steps spend their time in a fresh process: scpipe on the CELLS-cell demo
# (default 200,000 x 20,000) with SCPIPE_TRACE_PHASES=1, the kernel cache filled, under each
# setting of VARIANTS (environment assignments, `-` for none). Prints each step's seconds from
# the report and the traced phases. Usage: bash scripts/device/experiments/step_phases.sh BIN_DIR [CELLS]
set -u
B=${1:?folder with scpipe}
CELLS=${2:-200000}
OUT=${OUT:-/tmp/out}
R=$OUT/phases; mkdir -p "$R"
export SCPIPE_KERNEL_CACHE=/tmp/kc-phases
"$B/scpipe" run --demo --demo-cells 2000 --demo-genes 2000 -o /dev/shm/w.h5ad > /dev/null 2>&1
for v in ${VARIANTS:--}; do
  for i in 1 2; do
    name="${v//[^A-Za-z0-9_]/_}-$i"
    env ${v/#-/} SCPIPE_TRACE_PHASES=1 "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 \
      -o /dev/shm/p.h5ad --report "$R/$name.json" ${SCPIPE_ARGS:-} > "$R/$name.log" 2>&1 || echo "FAILED $name"
    rm -f /dev/shm/p.h5ad
    echo "== $v run $i"
    grep -E "^(calculate_qc_metrics|normalize_total|log1p|pca) " "$R/$name.log" | tr '\n' ';'; echo
    python3 - "$R/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  steps ms:", ", ".join(f"{s['step']} {s['seconds'] * 1e3:.1f}" for s in r['steps']
      if s['step'] in ('calculate_qc_metrics', 'filter_cells', 'filter_genes', 'normalize_total',
                       'log1p', 'highly_variable_genes', 'scale', 'pca', 'neighbors')))
PY
  done
done

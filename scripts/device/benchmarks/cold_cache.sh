#!/bin/bash
# First runs with an empty kernel cache against cached runs: each build of BUILDS (binaries in
# BUNDLE_DIR; default "scpipe-prev scpipe") runs the CELLS-cell demo (default 200,000) with an
# empty SCPIPE_KERNEL_CACHE, then again with it filled, taking turns for ROUNDS rounds (default
# 3), then once each with --harmony batch. One line a run: total, total without the input's
# generation, the early steps, kernels compiled and NVRTC's seconds. Reports in $OUT/cold/.
# Usage: bash scripts/device/benchmarks/cold_cache.sh BUNDLE_DIR [CELLS]
set -u
B=${1:?bundle directory with the builds}
CELLS=${2:-200000}
OUT=${OUT:-/tmp/out}
BUILDS=${BUILDS:-scpipe-prev scpipe}
R=$OUT/cold; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # BUILD NAME CACHE [extra options]
  local b=$1 name=$2 cache=$3; shift 3
  SCPIPE_KERNEL_CACHE=$cache "$B/$b" run --demo --demo-cells "$CELLS" --demo-genes 20000 \
    -o "/dev/shm/$name.h5ad" --report "$R/$name.json" "$@" > "$R/$name.log" 2>&1 || echo "FAILED $name"
  rm -f "/dev/shm/$name.h5ad"
  python3 - "$R/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = {x['step']: x['seconds'] for x in r['steps']}
g = r.get('gpu') or {}
gen = s.get('generate demo data', 0)
print(f"{sys.argv[1].split('/')[-1][:-5]:34} total {r['total_seconds']:6.2f}  w/o input {r['total_seconds'] - gen:5.2f}"
      f"  qc {s.get('calculate_qc_metrics', 0):.3f} norm {s.get('normalize_total', 0):.3f} pca {s.get('pca', 0):.3f}"
      f" harmony {s.get('harmony_integrate', 0):.3f} nbrs {s.get('neighbors', 0):.3f}"
      f"  compiled {g.get('kernels_compiled')} in {g.get('kernel_compile_seconds', 0):.2f}s")
PY
}
for round in $(seq "${ROUNDS:-3}"); do
  for b in $BUILDS; do
    run "$b" "r$round-$b-cold" "/tmp/kc-$round-$b"
    run "$b" "r$round-$b-cached" "/tmp/kc-$round-$b"
  done
done
for b in $BUILDS; do
  run "$b" "h-$b-cold" "/tmp/kch-$b" --harmony batch
  run "$b" "h-$b-cached" "/tmp/kch-$b" --harmony batch
done

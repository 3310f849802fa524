#!/bin/bash
# First runs with an empty kernel cache against cached runs: each build of BUILDS (binaries in
# BUNDLE_DIR; default "scpipe scpipe:nvrtc", where `:nvrtc` runs that binary with
# SCPIPE_BUILT_IN_KERNELS=0, as builds without built-in kernels ran) runs the CELLS-cell demo
# (default 200,000) with an
# empty SCPIPE_KERNEL_CACHE, then again with it filled, taking turns for ROUNDS rounds (default
# 3), then once each with --harmony batch. One line a run: total, total without the input's
# generation, the early steps, kernels built in, compiled and NVRTC's seconds. The first run of
# round 1 is the machine's first process. Reports in $OUT/cold/.
# Usage: bash scripts/device/benchmarks/cold_cache.sh BUNDLE_DIR [CELLS]
set -u
B=${1:?bundle directory with the builds}
CELLS=${2:-200000}
OUT=${OUT:-/tmp/out}
BUILDS=${BUILDS:-scpipe scpipe:nvrtc}
R=$OUT/cold; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # BUILD[:nvrtc] NAME CACHE [extra options]
  local b=${1%%:*} name=$2 cache=$3 built_in=1
  [ "$1" != "${1%:nvrtc}" ] && built_in=0
  shift 3
  SCPIPE_BUILT_IN_KERNELS=$built_in SCPIPE_KERNEL_CACHE=$cache "$B/$b" run --demo --demo-cells "$CELLS" --demo-genes 20000 \
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
      f"  built in {g.get('kernels_built_in')}, compiled {g.get('kernels_compiled')} in {g.get('kernel_compile_seconds', 0):.2f}s")
PY
}
for round in $(seq "${ROUNDS:-3}"); do
  for b in $BUILDS; do
    n=${b/:/-}
    run "$b" "r$round-$n-cold" "/tmp/kc-$round-$n"
    run "$b" "r$round-$n-cached" "/tmp/kc-$round-$n"
  done
done
for b in $BUILDS; do
  n=${b/:/-}
  run "$b" "h-$n-cold" "/tmp/kch-$n" --harmony batch
  run "$b" "h-$n-cached" "/tmp/kch-$n" --harmony batch
done

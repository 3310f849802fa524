#!/bin/bash
# Issue 50's build profile on the GPU: the default flow and t-SNE with two scpipe binaries, A
# (before a build-profile change) and B (after), alternated in one call, so that a change of
# optimisation levels (HDF5, cudarc, ...) is seen to cost the GPU run nothing. Each run: the 1 M
# demo's whole default flow (`--demo --demo-cells 1000000 --demo-genes 20000 --gpus 1`), then
# `--tsne` on 200,000 cells, whose X_tsne must be the same bits from A and B when the t-SNE code
# is the same (or when a change was meant to keep its bits).
# Usage: bash scripts/device/benchmarks/build_profile_ab.sh SCPIPE_A SCPIPE_B [ROUNDS]
set -u
A=${1:?scpipe before}; B=${2:?scpipe after}; ROUNDS=${3:-2}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export SCPIPE_KERNEL_CACHE=/tmp/ab-kernel-cache
report() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
steps = " ".join(f"{s['step']} {s['seconds']:.2f}" for s in r["steps"])
print(f"{sys.argv[2]}: total {r['total_seconds']:.2f} s | {steps}")
PY
}
for bin in A B; do  # fill each binary's kernel cache once (the first run with an empty cache is not compared)
  exe=$A; [ $bin = B ] && exe=$B
  "$exe" run --demo --demo-cells 100000 --demo-genes 20000 --gpus 1 --tsne -o /dev/shm/ab-warm.h5ad > /dev/null 2>&1 || echo "$bin warm-up FAILED"
done
for r in $(seq "$ROUNDS"); do
  for bin in A B; do
    exe=$A; [ $bin = B ] && exe=$B
    "$exe" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus 1 -o /dev/shm/ab.h5ad \
      --report "$OUT/flow-$bin-$r.json" > "$OUT/flow-$bin-$r.log" 2>&1 || echo "$bin flow FAILED: $(tail -2 "$OUT/flow-$bin-$r.log")"
    report "$OUT/flow-$bin-$r.json" "flow 1M $bin round $r"
  done
done
for bin in A B; do
  exe=$A; [ $bin = B ] && exe=$B
  "$exe" run --demo --demo-cells 200000 --demo-genes 20000 --gpus 1 --tsne -o /dev/shm/ab-tsne-$bin.h5ad \
    --report "$OUT/tsne-$bin.json" > "$OUT/tsne-$bin.log" 2>&1 || echo "$bin tsne FAILED: $(tail -2 "$OUT/tsne-$bin.log")"
  report "$OUT/tsne-$bin.json" "tsne 200k $bin"
done
python3 - <<'PY'
import h5py, numpy as np, hashlib
e = {b: h5py.File(f"/dev/shm/ab-tsne-{b}.h5ad", "r")["obsm/X_tsne"][()] for b in "AB"}
h = {b: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16] for b, v in e.items()}
print(f"X_tsne A {h['A']} B {h['B']}: {'the same bits' if h['A'] == h['B'] else 'DIFFERENT, largest |A-B| %.3g' % np.abs(e['A'] - e['B']).max()}")
PY
rm -f /dev/shm/ab*.h5ad

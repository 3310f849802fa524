#!/bin/bash
# For the next session (not run): where the inverted file's pass 2 and refinement go at atlas
# scale, on the build of this session's end (carry .gpu-s with scpipe and bench-knn).
# 1. the atlas PCs (up to PCA), saved raw;
# 2. every launch of the scan's kernels timed by ncu (one metric: a pass each, so cheap):
#    ivf_tensor_bound, ivf_tensor_collect (one launch per batch of 2^20 slots), knn_refine,
#    ivf_scan_listed (the f32 re-scans), ivf_scatter: pass 2's time split into its parts;
# 3. ncu's full set on one collect launch of the main run (the warm-up's is skipped) at 1 M
#    cells of the same PCs, 1,000 lists x 140 probes: shared-memory and tensor-pipe use.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1"
timeout 200 $B/scpipe run $ATLAS --no-neighbors -o /dev/shm/pcs.h5ad > "$OUT/pcs.log" 2>&1 || say "FAILED (pcs)"
python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" /dev/shm/pcs.h5ad /dev/shm/pcs.f32
rm -f /dev/shm/pcs.h5ad
timeout 240 ncu --metrics gpu__time_duration.sum --kernel-name regex:'ivf_tensor|knn_refine|ivf_scan_listed|ivf_scatter' \
  --csv $B/bench-knn --raw /dev/shm/pcs.f32 --dims 100 --gpus 1 --ivf default > "$OUT/durations.csv" 2> "$OUT/durations.err"
python3 - "$OUT/durations.csv" <<'PY' 2>&1 | tee -a "$S"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k, v = head.index('Kernel Name'), head.index('Metric Value')
tot = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    try: ns = float(r[v].replace(',', ''))
    except ValueError: continue
    tot[r[k].split('(')[0]] += ns; n[r[k].split('(')[0]] += 1
for name, ns in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{name}: {n[name]} launches, {ns / 1e9:.3f} s")
PY
head -c 400000000 /dev/shm/pcs.f32 > /dev/shm/pcs1m.f32
timeout 200 ncu --kernel-name ivf_tensor_collect --launch-skip 1 --launch-count 1 --set full \
  -o "$OUT/collect" $B/bench-knn --raw /dev/shm/pcs1m.f32 --dims 100 --gpus 1 --ivf 1000/140+b140 > "$OUT/ncu.log" 2>&1
ncu --import "$OUT/collect.ncu-rep" --page details --print-units base 2>/dev/null > "$OUT/collect.txt"
grep -E "Duration|Compute \(SM\) Throughput|L1/TEX Cache Throughput|highest-utilized|Issue Slots Busy|Achieved Occupancy" "$OUT/collect.txt" | tee -a "$S"

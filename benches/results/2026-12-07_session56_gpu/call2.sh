#!/bin/bash
# Session 56, call 2 (carry .gpu-w: scpipe built from bf114e6: call 1's new build with
# filter_cells keeping obs in place):
# 1. the atlas workflow twice with the same seed, outputs kept and compared dataset by dataset
#    (issue 54's gate: the same seed twice, the same result bit for bit), each run timed;
# 2. issue 54's quality gate at 1 M cells: the exact graph's runs and the inverted file's over
#    seeds 0 1 2, then ivf_quality.py (ARI, modularity, trustworthiness, silhouette).
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu"
timeout 60 $B/scpipe run --demo --demo-on-gpu --demo-cells 50000 --device gpu --gpus 1 --neighbors-method ivf \
  -o /dev/shm/warm.h5ad > $L/warm.log 2>&1; say "warm-up rc=$?"
for r in 1 2; do
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 150 $B/scpipe run $ATLAS --gpus 1 --neighbors-method ivf \
    -o /dev/shm/atlas_$r.h5ad --report $L/atlas_$r.json > $L/atlas_$r.log 2>&1; say "== atlas run $r rc=$?"
  grep -E "^[a-zA-Z_ ()]+ +[0-9]+\.[0-9]{3} |Maximum resident|Elapsed" $L/atlas_$r.log | cut -c1-200 >> "$S"
done
say "== the two runs' outputs"
timeout 200 python3 scripts/device/benchmarks/compare_h5ad.py /dev/shm/atlas_1.h5ad /dev/shm/atlas_2.h5ad 2>&1 | tail -20 | tee -a "$S"
rm -f /dev/shm/atlas_*.h5ad /dev/shm/warm.h5ad
pack_logs
say "== quality at 1 M"
PARTS="runs quality" VARIANTS="ivf=" bash scripts/device/tests/ivf_descent.sh $B > $L/quality.log 2>&1
grep -vE "^\s*$" $L/quality.log | tail -30 >> "$S"
mv "$OUT"/descent $L/ 2>/dev/null; rm -f /dev/shm/q_*.h5ad
pack_logs

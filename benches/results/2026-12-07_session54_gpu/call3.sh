#!/bin/bash
# Session 54, call 3 (carry .gpu-v: scpipe with four umap_epoch variants picked by
# SCPIPE_UMAP_KERNEL, scpipe_base = 52aac91, test-gpu_kernels, pbmc68k):
# umap_epoch (the next move's cell read ahead), umap_epoch_plain (not), umap_epoch_lb (read
# ahead, __launch_bounds__(128, 8)), umap_epoch_scan4 (read ahead, four edges' next samples read
# at once), umap_epoch_lb_scan4 (both).
# 1. umap_equals_the_cpu_bit_for_bit for each variant;
# 2. the 1 M demo (no Leiden, no markers): base, then each variant, two rounds;
# 3. a 4 M demo: base, umap_epoch, umap_epoch_scan4, umap_epoch_lb_scan4;
# 4. ncu's full set on umap_epoch_scan4 (epoch 100) at 1 M, with its SASS-level stalls.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
say() { echo "$@" | tee -a "$S"; }
B=.gpu-v
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
V="umap_epoch umap_epoch_plain umap_epoch_lb umap_epoch_scan4 umap_epoch_lb_scan4"
for v in $V; do
  SCPIPE_UMAP_KERNEL=$v REQUIRE_GPU=1 timeout 120 $B/test-gpu_kernels umap_equals > $L/bits_$v.log 2>&1; say "bits $v rc=$? $(grep -E 'test result' $L/bits_$v.log)"
done
run() { # name binary variant cells round
  SCPIPE_UMAP_KERNEL=$3 SCPIPE_TRACE_PHASES=1 timeout 150 $B/$2 run --demo --demo-on-gpu --demo-cells $4 --device gpu --gpus 1 --no-leiden --no-markers -o /dev/shm/u.h5ad > $L/u_$1_$4_$5.log 2>&1 || say "FAILED ($1 $4 $5)"
  say "$4 $1 $5: $(grep -E 'umap epochs epochs' $L/u_$1_$4_$5.log | sed 's/ (at.*//') | $(grep -E '^umap ' $L/u_$1_$4_$5.log | awk '{print $2}')"
}
for r in 1 2; do
  run base scpipe_base umap_epoch 1000000 $r
  for v in $V; do run $v scpipe $v 1000000 $r; done
done
for v in base umap_epoch umap_epoch_scan4 umap_epoch_lb_scan4; do
  if [ $v = base ]; then run base scpipe_base umap_epoch 4000000 1; else run $v scpipe $v 4000000 1; fi
done
SCPIPE_UMAP_KERNEL=umap_epoch_scan4 timeout 200 ncu --kernel-name regex:umap_epoch --launch-skip 100 --launch-count 1 --set full \
  -o $L/umap1m $B/scpipe run --demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 --no-leiden --no-markers -o /dev/shm/u1m_ncu.h5ad > $L/ncu.log 2>&1 || say "FAILED (ncu)"
ncu --import $L/umap1m.ncu-rep --page details --print-units base > $OUT/umap1m.txt 2>&1
ncu --import $L/umap1m.ncu-rep --page source --csv --print-source sass > $L/umap1m_sass.csv 2>&1
grep -E "Elapsed Cycles|SM Active Cycles|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Avg. Active Threads|L2 Hit|Warp Cycles Per Issued|No Eligible" $OUT/umap1m.txt | tee -a "$S"
tar -C $L -czf "$OUT/logs.tgz" --exclude='*.ncu-rep' . ; ls "$OUT"

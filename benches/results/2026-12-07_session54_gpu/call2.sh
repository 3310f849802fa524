#!/bin/bash
# Session 54, call 2 (carry .gpu-v: scpipe with UMAP's epochs a move a turn and the cells in
# work order, scpipe_base = 52aac91, test-gpu_kernels, pbmc68k, .rmm-bench packed).
# 1. umap_equals_the_cpu_bit_for_bit, and memcheck of it;
# 2. the 1 M demo (no Leiden, no markers), base and new in turns, two each: UMAP's epochs;
# 3. ncu's full set on the new umap_epoch (epoch 100) at 1 M;
# 4. the atlas workflow (PARTS=e2e) with the new build;
# 5. issue 55: the one-thread cells beside RMM, pinned (repeating call 1's lost log).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
say() { echo "$@" | tee -a "$S"; }
B=.gpu-v
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
tar -C . -xJf $B/rmm-bench.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
REQUIRE_GPU=1 timeout 300 $B/test-gpu_kernels umap_equals --nocapture > $L/bits.log 2>&1; say "bits rc=$? $(grep -E 'test result' $L/bits.log)"
grep -E "panicked|differ" $L/bits.log | head -5 >> "$S"
U1M="--demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 --no-leiden --no-markers"
for r in 1 2; do for b in scpipe_base scpipe; do
  SCPIPE_TRACE_PHASES=1 timeout 120 $B/$b run $U1M -o /dev/shm/u1m.h5ad > $L/u1m_${b}_$r.log 2>&1 || say "FAILED ($b $r)"
  say "$b $r: $(grep -E 'umap epochs epochs' $L/u1m_${b}_$r.log) | $(grep -E '^total' $L/u1m_${b}_$r.log)"
done; python3 -c "
import h5py,sys,numpy as np
a=h5py.File('/dev/shm/u1m.h5ad')['obsm/X_umap'][:]; print('new X_umap', a.shape, np.isfinite(a).all(), a.min(0), a.max(0))" | tee -a "$S"; done
timeout 300 ncu --kernel-name umap_epoch --launch-skip 100 --launch-count 1 --set full \
  -o $L/umap1m $B/scpipe run $U1M -o /dev/shm/u1m_ncu.h5ad > $L/ncu.log 2>&1 || say "FAILED (ncu)"
ncu --import $L/umap1m.ncu-rep --page details --print-units base > $L/umap1m.txt 2>&1
grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots|Executed Ipc|Branch Efficiency|Avg. Active Threads|L2 Hit|L1/TEX Hit|Warp Cycles Per Issued|No Eligible" $L/umap1m.txt | tee -a "$S"
cp $L/umap1m.txt "$OUT/"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/test-gpu_kernels umap_equals > $L/memcheck.log 2>&1; say "memcheck rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck.log | tr '\n' ' ')"
PARTS=e2e E2E_S=300 bash scripts/device/benchmarks/atlas_workflow.sh $B > $L/atlas.log 2>&1
cat "$OUT/a_all.txt" >> "$S"; grep -E "umap|leiden" "$OUT/atlas/e2e.log" | head -20 >> "$S"
(cd .rmm-bench && mkdir -p ours) 
PIN=3 NOGRID=1 ROUNDS=1 timeout 240 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
cat "$OUT"/sub_allocators_pinned.txt >> "$S"
mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt "$OUT"/atlas $L/ 2>/dev/null
tar -C $L -czf "$OUT/logs.tgz" . ; ls "$OUT"

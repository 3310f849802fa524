#!/bin/bash
# Session 54, call 1 (carry .gpu-u: scpipe at 52aac91, rmm-core's test binaries, .rmm-bench
# packed with our random_allocations bench in ours/).
# 1. UMAP's epochs at 1 M demo cells: the trace, then ncu's full set on epoch 100's launch and
#    its SASS-level hot spots (where the 19.8 s of the atlas's epochs go);
# 2. issue 55: rmm-core's tests on the GPU (REQUIRE_GPU=1), then the one-thread cells beside RMM
#    pinned (the quick bins up to 64 KiB, cf07fcf, first time on the GPU machine).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-u
for f in $B/*.xz $B/rmm/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
tar -C . -xJf $B/rmm-bench.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc
U1M="--demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 --no-leiden --no-markers"
SCPIPE_TRACE_PHASES=1 timeout 120 $B/scpipe run $U1M -o /dev/shm/u1m.h5ad > "$OUT/u1m.log" 2>&1 || say "FAILED (u1m)"
grep -iE "umap|total" "$OUT/u1m.log" | tail -8 | tee -a "$S"
timeout 300 ncu --kernel-name umap_epoch --launch-skip 100 --launch-count 1 --set full --import-source yes \
  -o "$OUT/umap1m" $B/scpipe run $U1M -o /dev/shm/u1m_ncu.h5ad > "$OUT/ncu.log" 2>&1 || say "FAILED (ncu)"
ncu --import "$OUT/umap1m.ncu-rep" --page details --print-units base > "$OUT/umap1m.txt" 2>&1
grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Issue Slots|Executed Ipc|Branch Efficiency|Avg. Active Threads|Divergent|L2 Hit|L1/TEX Hit|Warp Cycles Per Issued|No Eligible" "$OUT/umap1m.txt" | tee -a "$S"
ncu --import "$OUT/umap1m.ncu-rep" --page source --csv --print-source sass > "$OUT/umap1m_sass.csv" 2>&1
ls -la "$OUT" | tee -a "$S"
# 2. issue 55
for t in $B/rmm/*; do
  case "$t" in *.xz) continue;; esac
  if REQUIRE_GPU=1 timeout 200 "$t" --test-threads=1 > "$OUT/rmm_$(basename "$t").log" 2>&1; then say "PASS $(basename "$t")"; else say "FAIL $(basename "$t")"; fi
done
REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck $B/rmm/stream_ordering --test-threads=1 > "$OUT/memcheck_stream_ordering.log" 2>&1; say "memcheck stream_ordering rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_stream_ordering.log" | tail -1)"
PIN=3 NOGRID=1 ROUNDS=1 timeout 240 bash scripts/device/benchmarks/rmm_sub_allocators.sh > "$OUT/sub.log" 2>&1 || say "FAILED (sub)"
grep -E "^==|x1:|max_size" "$OUT"/sub_allocators_pinned.txt | head -80 >> "$S"

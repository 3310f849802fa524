#!/bin/bash
# Session 53, call 4: every gpu_kernels test and gpu_split_run's kNN tests on build 2e767d5
# (the new tensor epilogue), then ncu on the tensor passes and the refinement (workload C,
# 1 M x 100, 1000 lists, 140 probes, pass 1 over all): where the passes' time goes now.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
REQUIRE_GPU=1 timeout 200 $B/gpu_kernels 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
REQUIRE_GPU=1 timeout 60 $B/gpu_split_run knn 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
timeout 100 ncu --kernel-name regex:'ivf_tensor|knn_refine' --launch-count 8 \
  --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section InstructionStats \
  -o "$OUT/passes" $B/bench-knn --cells 1000000 --dims 100 --gpus 1 --ivf 1000/140+b140 > "$OUT/ncu.log" 2>&1
tail -2 "$OUT/ncu.log" | tee -a "$S"
ncu --import "$OUT/passes.ncu-rep" --page details --print-units base 2>/dev/null > "$OUT/ncu_details.txt"
grep -E "ivf_tensor|knn_refine|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|Issue Slots Busy|Executed Instructions  |highest-utilized|Achieved Occupancy|Stall|stall" "$OUT/ncu_details.txt" | cut -c1-200 | head -120 | tee -a "$S"

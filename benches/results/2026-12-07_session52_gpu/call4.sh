#!/bin/bash
# For the next session (not run): where PCA's first pass goes on the atlas. ncu profiles a few
# of the Gram matrix's launches (the batched TF32 GEMM, split_tf32, add_lower) in the atlas run
# up to PCA: duration, SM and memory throughput. Then call3.sh's comparison of UMAP's epochs
# (build .gpu-s/scpipe_prefetch with c972b9e's umap.cu, .gpu-s/scpipe without it).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc-atlas
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1"
timeout 300 ncu --kernel-name regex:'gemm|Kernel|split_tf32|add_lower' --launch-skip 300 --launch-count 9 \
  --section SpeedOfLight --csv $B/scpipe run $ATLAS --no-neighbors -o /dev/shm/pcs.h5ad \
  > "$OUT/ncu_pca.csv" 2> "$OUT/ncu_pca.err"
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput" "$OUT/ncu_pca.csv" | cut -c1-220 | tee -a "$S"
rm -f /dev/shm/pcs.h5ad
ORDER="scpipe_prefetch scpipe" bash benches/results/2026-12-07_session52_gpu/call3.sh

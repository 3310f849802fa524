#!/usr/bin/env bash
# benches/WORKLOADS.md C: neighbors and harmony once per allocator mode at 200k and 1M cells x 50
# components (4 batches, k = 15), beside PyTorch's exact kNN and our CPU kNN on the same points.
# Run in place (bash scripts/device/benchmarks/allocator_modes.sh) with .gpu-nb carried
# (bench-allocator_modes; tests/gpu_kernels and data/ for the harmony check); knn_torch.py is
# taken from beside this script. Results: $OUT/modes.tgz (JSON + SVGs).
set -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."   # the repository root
export SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=.gpu-nb/bench-allocator_modes
(cd .gpu-nb && SCPIPE_DATA=$PWD/data REQUIRE_GPU=1 timeout 60 ./tests/gpu_kernels --nocapture harmony 2>&1 | grep -E "harmony|per-PC|corr" | head -20)
timeout 200 $B --cells 200000 --runs 3 --cpu-knn --dump-data /tmp/pts --out /tmp/modes/200k 2>&1 | tail -16
timeout 330 $B --cells 1000000 --runs 2 --dump-data /tmp/pts --out /tmp/modes/1m 2>&1 | tail -16
for n in 200000 1000000; do timeout 60 python3 "$HERE/knn_torch.py" /tmp/pts/points_$n.f32 50 15 2 | tail -1; done | tee /tmp/modes/torch.jsonl
tar -C /tmp -czf $OUT/modes.tgz modes

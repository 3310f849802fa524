#!/bin/bash
# Session 53, call 1: the inverted file's pass 1 over each list's nearest probes only.
# 1. gpu_kernels' ivf and tensor tests (the tensor scan against the f32 scan, pass 1 over the
#    default 32 lists and over one), memcheck of the tensor-scan test;
# 2. the atlas shape up to PCA (X_pca kept as raw f32);
# 3. bench-knn --gpus 1 on those PCs: the default index with pass 1 over all, 64, 32, 16 and 8
#    lists (phase traces: pass 1 and pass 2 apart), each one run after a 50k-cell warm-up;
# 4. ncu (full set) on one launch of each pass, on the first 1 M cells of the same PCs with
#    1000 lists and 140 probes (about the atlas's 860k cells scanned per cell, scaled down).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
for t in ivf tensor; do
  REQUIRE_GPU=1 timeout 200 $B/gpu_kernels $t --nocapture 2>&1 | grep -E "^test |test result|panicked|assert|scanned again" | tee -a "$S"
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/gpu_kernels ivf_tensor_scan 2>&1 \
  | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6 | tee -a "$S"
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1"
say "== up to PCA"
/usr/bin/time -v timeout 200 $B/scpipe run $ATLAS --no-neighbors -o /dev/shm/pcs.h5ad > "$OUT/pcs.log" 2>&1 || say "FAILED (pcs)"
grep -E "^(pca|total) |Elapsed" "$OUT/pcs.log" | tee -a "$S"
python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" /dev/shm/pcs.h5ad /dev/shm/pcs.f32
rm -f /dev/shm/pcs.h5ad
say "== bench-knn, pass 1 over fewer lists"
SCPIPE_TRACE_PHASES=1 timeout ${BENCH_S:-240} $B/bench-knn --raw /dev/shm/pcs.f32 --dims 100 --gpus 1 \
  --ivf ${SPECS:-default+b200,default+b32,default+b8,default+b64,default+b16} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || say "bench stopped"
grep -E "ivf (tensor|recall)|on 1 GPU" "$OUT/bench.log" | tee -a "$S"
say "== ncu, 1 M cells, 1000 lists, 140 probes"
head -c 400000000 /dev/shm/pcs.f32 > /dev/shm/pcs1m.f32
timeout 200 ncu --kernel-name regex:ivf_tensor --launch-skip 2 --launch-count 2 --set full \
  -o "$OUT/ivf_passes" $B/bench-knn --raw /dev/shm/pcs1m.f32 --dims 100 --gpus 1 --ivf 1000/140+b140 > "$OUT/ncu.log" 2>&1
tail -3 "$OUT/ncu.log" | tee -a "$S"
ncu --import "$OUT/ivf_passes.ncu-rep" --page details --print-units base 2>/dev/null > "$OUT/ncu_details.txt"
grep -E "ivf_tensor|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Block Limit|Issue Slots Busy|Shared Memory" "$OUT/ncu_details.txt" | head -60 | tee -a "$S"

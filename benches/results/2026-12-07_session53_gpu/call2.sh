#!/bin/bash
# Session 53, call 2: the tensor passes' epilogue turned into bounds in place with each row's
# least, the slow paths (pass 1's merge, pass 2's appends) only where a bound passes; pass 1
# over the nearer half of the probes (default_bound_probes).
# 1. gpu_kernels' ivf, tensor, pruned and neighbors tests; memcheck of the tensor-scan tests;
# 2. the 1 M demo's default neighbors (inverted file), call 1's build (scpipe_c1, the old
#    epilogue) against this one, alternating, three each;
# 3. the atlas PCs; bench-knn --gpus 1 on them: the default (pass 1 over 69 lists) and pass 1
#    over all; ncu (a few sections) on one launch of each pass and of the refinement at 1 M cells x
#    140 probes;
# 4. the atlas workflow end to end (PARTS=e2e of atlas_workflow.sh).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
for t in ivf tensor pruned neighbors; do
  REQUIRE_GPU=1 timeout 200 $B/gpu_kernels $t 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
done
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/gpu_kernels tensor 2>&1 \
  | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6 | tee -a "$S"
say "== 1 M demo, default neighbors"
for i in 1 2 3; do for which in scpipe_c1 scpipe; do
  timeout 120 $B/$which run --demo --demo-on-gpu --demo-cells 1000000 --demo-genes 20000 --target-sum 10000 \
    --no-umap --no-leiden --no-markers -o /dev/shm/m1.h5ad > "$OUT/m1_${which}_$i.log" 2>&1 || say "FAILED ($which)"
  say "$which $i: $(grep -E '^neighbors ' "$OUT/m1_${which}_$i.log" | cut -c1-140)"
done; done
rm -f /dev/shm/m1.h5ad
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1"
say "== up to PCA"
timeout 200 $B/scpipe run $ATLAS --no-neighbors -o /dev/shm/pcs.h5ad > "$OUT/pcs.log" 2>&1 || say "FAILED (pcs)"
grep -E "^(pca|total) " "$OUT/pcs.log" | tee -a "$S"
python3 -c "import h5py,sys; h5py.File(sys.argv[1])['obsm/X_pca'][:].astype('<f4').tofile(sys.argv[2])" /dev/shm/pcs.h5ad /dev/shm/pcs.f32
rm -f /dev/shm/pcs.h5ad
say "== bench-knn"
SCPIPE_TRACE_PHASES=1 timeout 150 $B/bench-knn --raw /dev/shm/pcs.f32 --dims 100 --gpus 1 \
  --ivf ${SPECS:-default,default+b200} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || say "bench stopped"
grep -E "ivf (tensor|recall)|on 1 GPU" "$OUT/bench.log" | tee -a "$S"
head -c 400000000 /dev/shm/pcs.f32 > /dev/shm/pcs1m.f32
rm -f /dev/shm/pcs.f32
timeout 150 ncu --kernel-name regex:'ivf_tensor|knn_refine' --launch-count 12 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
  --section WarpStateStats --section InstructionStats --section SchedulerStats \
  -o "$OUT/ivf_passes" $B/bench-knn --raw /dev/shm/pcs1m.f32 --dims 100 --gpus 1 --ivf 1000/140+b140 > "$OUT/ncu.log" 2>&1
ncu --import "$OUT/ivf_passes.ncu-rep" --page details --print-units base 2>/dev/null > "$OUT/ncu_details.txt"
grep -E "ivf_tensor|knn_refine|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Instructions  |highest-utilized" "$OUT/ncu_details.txt" | head -90 | tee -a "$S"
rm -f /dev/shm/pcs1m.f32
PARTS=e2e bash scripts/device/benchmarks/atlas_workflow.sh $B > "$OUT/e2e_call.log" 2>&1
cat "$OUT/a_all.txt" >> "$S"; tail -25 "$OUT/a_all.txt"

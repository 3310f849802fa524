#!/bin/bash
# Session 54, call 4 (carry .gpu-v: scpipe with the umap_epoch variants picked by
# SCPIPE_UMAP_KERNEL, test-gpu_kernels, pbmc68k). New: umap_epoch_ahead4 / _ahead2 (the next due
# edge found and its values read turns ahead, a window of 4 / 2 edges' next samples).
# 1. umap_equals_the_cpu_bit_for_bit for the new variants, memcheck of ahead4's;
# 2. the 1 M demo (no Leiden, no markers): scan4, ahead4, ahead2, two rounds; the 4 M demo once;
# 3. the atlas workflow (PARTS=e2e) with the fastest at 4 M.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
say() { echo "$@" | tee -a "$S"; }
B=.gpu-v
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
V="umap_epoch_scan4 umap_epoch_ahead4 umap_epoch_ahead2"
for v in umap_epoch_ahead4 umap_epoch_ahead2; do
  SCPIPE_UMAP_KERNEL=$v REQUIRE_GPU=1 timeout 120 $B/test-gpu_kernels umap_equals > $L/bits_$v.log 2>&1; say "bits $v rc=$? $(grep -E 'test result' $L/bits_$v.log)"
done
SCPIPE_UMAP_KERNEL=umap_epoch_ahead4 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/test-gpu_kernels umap_equals > $L/memcheck.log 2>&1; say "memcheck ahead4 rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck.log | tr '\n' ' ')"
run() { # variant cells round
  SCPIPE_UMAP_KERNEL=$1 SCPIPE_TRACE_PHASES=1 timeout 150 $B/scpipe run --demo --demo-on-gpu --demo-cells $2 --device gpu --gpus 1 --no-leiden --no-markers -o /dev/shm/u.h5ad > $L/u_$1_$2_$3.log 2>&1 || say "FAILED ($1 $2 $3)"
  say "$2 $1 $3: $(grep -E 'umap epochs epochs' $L/u_$1_$2_$3.log | sed 's/ (at.*//')"
}
for r in 1 2; do for v in $V; do run $v 1000000 $r; done; done
best=; bt=999999
for v in $V; do run $v 4000000 1; t=$(grep -E 'umap epochs epochs' $L/u_${v}_4000000_1.log | sed -E 's/.*epochs: ([0-9.]+) ms.*/\1/'); say "4M $v $t"
  if [ -n "$t" ] && awk "BEGIN{exit !($t < $bt)}"; then bt=$t; best=$v; fi; done
say "fastest at 4 M: $best ($bt ms)"
SCPIPE_UMAP_KERNEL=$best PARTS=e2e E2E_S=300 bash scripts/device/benchmarks/atlas_workflow.sh $B > $L/atlas.log 2>&1
grep -vE "module:|kernel:" "$OUT/a_all.txt" >> "$S"; grep -E "^umap|^leiden" "$OUT/atlas/e2e.log" | head -30 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
tar -C $L -czf "$OUT/logs.tgz" . ; ls "$OUT"

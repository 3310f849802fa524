#!/bin/bash
# Session 54, call 5 (carry .gpu-v: scpipe with the chosen umap_epoch (a move a turn, the next
# move's cell read ahead, four edges' next samples read at once, cells in work order) and the
# run's main stream urgent; scpipe_base = 52aac91; test-gpu_kernels, test-gpu_device, pbmc68k).
# 1. tests: umap_equals_the_cpu_bit_for_bit (and memcheck), leiden, gpu_device;
# 2. the 1 M default flow (UMAP beside Leiden, markers), base and new in turns, twice;
# 3. the atlas workflow (PARTS=e2e).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
say() { echo "$@" | tee -a "$S"; }
B=.gpu-v
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
for t in umap_equals leiden; do
  REQUIRE_GPU=1 timeout 200 $B/test-gpu_kernels $t > $L/t_$t.log 2>&1; say "gpu_kernels $t rc=$? $(grep -E 'test result' $L/t_$t.log)"
done
REQUIRE_GPU=1 timeout 100 $B/test-gpu_device --test-threads=1 > $L/t_device.log 2>&1; say "gpu_device rc=$? $(grep -E 'test result' $L/t_device.log)"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/test-gpu_kernels umap_equals > $L/memcheck.log 2>&1; say "memcheck umap rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck.log | tr '\n' ' ')"
for r in 1 2; do for b in scpipe_base scpipe; do
  SCPIPE_TRACE_PHASES=1 timeout 150 $B/$b run --demo --demo-on-gpu --demo-cells 1000000 --device gpu --gpus 1 -o /dev/shm/d.h5ad > $L/d1m_${b}_$r.log 2>&1 || say "FAILED ($b $r)"
  say "1M default $b $r: $(grep -E 'umap epochs epochs' $L/d1m_${b}_$r.log | sed 's/ (at.*//') | $(grep -E '^(umap|leiden|rank_genes_groups|total) ' $L/d1m_${b}_$r.log | awk '{printf "%s %s; ", $1, $2}')"
done; done
PARTS=e2e E2E_S=300 bash scripts/device/benchmarks/atlas_workflow.sh $B > $L/atlas.log 2>&1
grep -vE "module:|kernel:" "$OUT/a_all.txt" >> "$S"; grep -E "^umap|^leiden iteration 1|^leiden labels" "$OUT/atlas/e2e.log" | head -30 >> "$S"
mv "$OUT"/atlas "$OUT"/a_all.txt $L/ 2>/dev/null
tar -C $L -czf "$OUT/logs.tgz" . ; ls "$OUT"

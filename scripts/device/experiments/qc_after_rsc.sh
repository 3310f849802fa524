#!/bin/bash
# Why QC at 200k is slower in scpipe runs that follow a rapids-singlecell run in the same call
# (issue 31): the same traced runs before and after rapids-singlecell's cold and warm run, each
# with the kernel's memory counters (/proc/vmstat) around it, the machine's load, free memory
# and transparent huge page settings; after it also with SCPIPE_HUGE_PAGES=0 and after a pause.
# Usage: bash scripts/device/experiments/qc_after_rsc.sh BIN_DIR [N]   (scpipe in BIN_DIR; carry
# .rsc-bench's wheels and scripts; $OUT gets the logs)
set -u
BIN=${1:?directory with scpipe}
N=${2:-200000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../../.." || exit 1  # the repository root
export SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
source scripts/device/rsc_env.sh
rsc_input "$N"
COUNTERS='^(pgfault|pgmajfault|thp_fault_alloc|thp_fault_fallback|compact_stall|compact_success|compact_fail|allocstall_normal|allocstall_movable|pgscan_direct|pgsteal_direct|pgscan_kswapd|numa_miss|numa_foreign|numa_other|pgalloc_normal|zone_reclaim_failed) '
snap() {
  echo "== $1"
  cat /proc/loadavg
  free -m | head -2
  cat /proc/buddyinfo
  nvidia-smi --query-gpu=pstate,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
  ps -eo pcpu,rss,etime,comm --sort=-pcpu | head -6
}
runs() {  # TAG COUNT [ENV=VALUE...]
  local tag=$1 count=$2; shift 2
  for i in $(seq "$count"); do
    grep -E "$COUNTERS" /proc/vmstat > /tmp/vm_before
    rm -f /dev/shm/qc_after.h5ad
    env "$@" SCPIPE_TRACE_PHASES=1 SCPIPE_TRACE_TRANSFERS=1 /usr/bin/time -v "$BIN/scpipe" run "$F" \
      --device gpu --no-neighbors -o /dev/shm/qc_after.h5ad --report "$OUT/${tag}_$i.json" \
      > "$OUT/${tag}_$i.log" 2>&1 || echo "FAILED $tag $i"
    grep -E "$COUNTERS" /proc/vmstat > /tmp/vm_after
    echo "-- $tag $i: $(grep -E '^calculate_qc_metrics (kernel|downloads|host)' "$OUT/${tag}_$i.log" \
      | sed 's/ (at.*//' | tr '\n' ';') $(grep -E 'faults|Elapsed' "$OUT/${tag}_$i.log" | tr -s ' ' | tr '\n' ';')"
    join /tmp/vm_before /tmp/vm_after | awk '$3 != $2 {printf " %s +%d", $1, $3 - $2} END {print ""}'
  done
}
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
nproc; lscpu | grep -E "NUMA|Model name|Thread|Socket"
snap "before rapids-singlecell"
runs before 3
python3 .rsc-bench/rsc_bench.py --no-cpu --no-write-h5ad --n-cells "$N" 2>&1 \
  | grep -v -E "FutureWarning|__version__" > "$OUT/rsc.log"
grep -i -E "qc|normalize" "$OUT/rsc.log" | head -6
snap "after rapids-singlecell"
runs after 3
runs after_nohuge 3 SCPIPE_HUGE_PAGES=0
sleep 20
snap "after a 20 s pause"
runs after_pause 2
rm -f /dev/shm/qc_after.h5ad

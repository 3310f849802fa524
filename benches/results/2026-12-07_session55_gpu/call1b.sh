#!/bin/bash
# Session 55, call 1b (carry .gpu-v as for call1.sh): issue 55's checks, split off call 1 when
# device time ran short: rmm-core's 18 test binaries with REQUIRE_GPU=1, then the one-thread
# cells beside RMM, pinned to core 3 (0fc1f29: a miss cuts a larger quick block; 765dcf3).
set -u
B=${B:-.gpu-v}
source scripts/device/call_preamble.sh
for f in $B/rmm/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
tar -C . -xJf $B/rmm-bench.tar.xz
for t in $B/rmm/*; do [[ $t == *.xz ]] && continue
  REQUIRE_GPU=1 timeout 60 $t > $L/rmm_$(basename $t).log 2>&1; echo "$(basename $t) rc=$? $(grep -E 'test result' $L/rmm_$(basename $t).log | tail -1)" >> $L/rmm_tests.txt
done
say "rmm-core tests: $(grep -c 'rc=0' $L/rmm_tests.txt) of $(wc -l < $L/rmm_tests.txt) rc=0"; grep -v 'rc=0' $L/rmm_tests.txt >> "$S"
PIN=3 NOGRID=1 ROUNDS=1 timeout 180 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
cat "$OUT"/sub_allocators_pinned.txt >> "$S"
mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
pack_logs

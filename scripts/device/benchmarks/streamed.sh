#!/usr/bin/env bash
# The 1.1 M-cell runs of issue 10 (benches/RESULTS.md, section c): generate, the pipeline in memory end to
# end, streamed under an 8 GiB device memory limit end to end, then the in-process comparison of
# the two placements (bench-streamed). DIR holds scpipe and bench-streamed (release, stripped:
# see scripts/device/README.md) and is carried to the GPU machine; $OUT receives the JSON.
# Usage: bash scripts/device/benchmarks/streamed.sh DIR   (a copy of this script inside DIR may
# also be run there without an argument)
cd "${1:-$(dirname "$0")}" || exit 1
set -x
F=/tmp/huge.h5ad
[ -f $F ] || /usr/bin/time -v ./scpipe generate 1100000 20000 -o $F 2>&1 | grep -E "Elapsed|Maximum resident|stored"
./scpipe run $F -o /tmp/out.h5ad --harmony batch --report $OUT/mem.json 2>&1 | tail -22; rm -f /tmp/out.h5ad
./scpipe run $F -o /tmp/out.h5ad --harmony batch --device-memory-limit 8GiB --report $OUT/str.json 2>&1 | tail -22; rm -f /tmp/out.h5ad
./bench-streamed $F --limit 8GiB --neighbors --harmony batch --json $OUT/cmp.json 2>&1 | tail -50

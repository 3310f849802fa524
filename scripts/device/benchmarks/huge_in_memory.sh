#!/usr/bin/env bash
# Issue 10's first goal (1.1 M cells, 2.18 G values, h5ad to written output in memory, at most
# 20 s), with the output's X and .raw written during harmony and neighbors and the parallel fill:
# generate, one warm-up run (this VM backs memory on first use, about 3 s per 8 GiB), then the
# run written to /dev/shm (RAM) and the run written to the local disk. Usage:
# bash scripts/device/benchmarks/huge_in_memory.sh BUNDLE_DIR (holding scpipe); $OUT receives the JSON.
B=${1:?bundle directory with scpipe}
OUT=${OUT:-/tmp/out}
F=/tmp/huge.h5ad
"$B/scpipe" generate 1100000 20000 -o $F 2>&1 | tail -2
run() {  # run NAME OUTPUT
  "$B/scpipe" run $F -o "$2" --harmony batch --report "$OUT/$1.json" 2>&1 | tail -24
  rm -f "$2"
}
echo "== warm-up"; run warm /dev/shm/out.h5ad | grep -E "write|total"
echo "== output in /dev/shm"; run huge-1100k-shm /dev/shm/out.h5ad
echo "== output on the disk (/tmp)"; run huge-1100k-disk /tmp/out.h5ad

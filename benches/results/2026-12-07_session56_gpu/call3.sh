#!/bin/bash
# Session 56, call 3 (carry .gpu-w as for call 2, build bf114e6): issue 54's quality gate at
# 1 M cells, which call 2's default inverted file missed on modularity (0.9090 against the exact
# runs' 0.9140 - 0.005), against three variants over seeds 0 1 2: --target-recall 0.96 and 0.97,
# and one round of NN-descent's local join (--descent-rounds 1).
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
say "== quality at 1 M, variants"
PARTS="runs quality" VARIANTS="t96=--target-recall,0.96 t97=--target-recall,0.97 d1=--descent-rounds,1" \
  bash scripts/device/tests/ivf_descent.sh $B > $L/quality.log 2>&1
grep -E "^-- |^neighbors |^leiden " $L/quality.log | cut -c1-200 >> "$S"
sed -n '/== quality/,$p' $L/quality.log >> "$S"
mv "$OUT"/descent $L/ 2>/dev/null; rm -f /dev/shm/q_*.h5ad
pack_logs

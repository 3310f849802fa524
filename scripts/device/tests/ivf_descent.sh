#!/bin/bash
# NN-descent's local join after the inverted file (issue 29's quality gate), in one call:
# 1. tests: gpu_kernels' descent and ivf tests (REQUIRE_GPU=1), the descent test under
#    compute-sanitizer memcheck;
# 2. scpipe on the demo (CELLS generated on the GPU, no markers): the exact kNN, then the
#    inverted file with each of VARIANTS (name=options, comma-separated options), each with
#    every seed of SEEDS (`--random-state`, default "0 1 2") and a fresh process with the
#    kernel cache filled; their neighbors, umap and leiden lines;
# 3. ivf_quality.py on every variant's runs against the exact ones (means over the seeds).
# PARTS (default "tests runs quality") picks the parts.
# Usage: bash scripts/device/tests/ivf_descent.sh BIN_DIR   (BIN_DIR: scpipe, test-gpu_kernels)
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/descent; mkdir -p "$R"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-descent
CELLS=${CELLS:-1000000}
PARTS=${PARTS:-tests runs quality}
SEEDS=${SEEDS:-0 1 2}
VARIANTS=${VARIANTS:-d0=--descent-rounds,0 d1= d2=--descent-rounds,2 t90=--target-recall,0.9 t85=--target-recall,0.85}
part() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
if part tests; then
  echo "== tests"
  for t in descent ivf; do
    REQUIRE_GPU=1 "$B/test-gpu_kernels" $t --nocapture 2>&1 | grep -E "^test |test result|panicked|assert|recall" | tail -12
  done
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/test-gpu_kernels" nn_descent 2>&1 \
    | grep -E "ERROR SUMMARY|test result|panicked" | tail -3
fi
run() {  # name, options...
  local name=$1; shift
  "$B/scpipe" run --demo --demo-on-gpu --demo-cells "$CELLS" --no-markers --device gpu "$@" \
    -o "/dev/shm/q_$name.h5ad" --report "$R/$name.json" > "$R/$name.log" 2>&1 || echo "FAILED $name"
  echo "-- $name: $*"
  grep -E "^(neighbors|umap|leiden|total) |FAILED|rror" "$R/$name.log"
}
if part runs; then
  echo "== scpipe, $CELLS cells"
  for s in $SEEDS; do
    run "exact_s$s" --neighbors-method exact --random-state "$s"
    for v in $VARIANTS; do
      run "${v%%=*}_s$s" --neighbors-method ivf --random-state "$s" $(echo "${v#*=}" | tr ',' ' ')
    done
  done
fi
runs() { for s in $SEEDS; do printf '/dev/shm/q_%s_s%s.h5ad,' "$1" "$s"; done | sed 's/,$//'; }
if part quality; then
  echo "== quality"
  python3 scripts/device/tests/ivf_quality.py "$(runs exact)" $(for v in $VARIANTS; do runs "${v%%=*}"; echo; done) \
    2>&1 | tee "$R/quality.txt"
fi

#!/usr/bin/env bash
# Issue 55's per-pair budget on the host: instructions, data accesses and simulated cache misses
# inside the sub-allocators' allocate and deallocate calls (callgrind, collecting only within
# them), per allocate + free pair of workload A (random_allocations' trace, one thread, one
# stream, `--quick`: 5,006 pairs a pass, 4 passes: 20,024 pairs) on the simulated device; the
# bytes memset writes are shown apart (callgrind counts its `rep stosb` a byte each). No GPU
# needed; valgrind must be installed. Usage, from the repository root:
#   bash scripts/checks/allocator_instructions.sh [RESOURCES] [MAX_SIZES]
# (defaults: "pool arena binning fixed" and "1024 1048576").
set -euo pipefail
source scripts/env.sh
cargo bench -p benches --bench random_allocations --no-run 2>/dev/null
bin=$(ls -t target/release/deps/random_allocations-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
for r in ${1:-pool arena binning fixed}; do
  for m in ${2:-1024 1048576}; do
    valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/cg" --collect-atstart=no \
      "--toggle-collect=*MemoryResource*allocate*" "--toggle-collect=*MemoryResource*deallocate*" \
      "$bin" --device sim --only "$r" --max-size "$m" --threads 1 --quick > /dev/null 2>&1
    python3 - "$r" "$m" "$out/cg" <<'PY'
import re, subprocess, sys
out = subprocess.run(["callgrind_annotate", sys.argv[3]], capture_output=True, text=True).stdout
events = re.search(r"Events shown:\s+(.*)", out).group(1).split()
line = next(l for l in out.splitlines() if "PROGRAM TOTALS" in l)
nums = [int(x.replace(",", "")) for x in re.findall(r"[\d,]+(?= )", line.split("PROGRAM")[0])]
d = dict(zip(events, nums))
pairs = 20_024
d1 = d.get("D1mr", 0) + d.get("D1mw", 0)
ll = d.get("DLmr", 0) + d.get("DLmw", 0)
# memset's `rep stosb` is one instruction a byte to callgrind (about 32 bytes a cycle to the
# CPU): shown apart, so that clearing a table does not read as hundreds of instructions.
ms = sum(int(m.group(1).replace(",", "")) for m in
         re.finditer(r"^\s*([\d,]+) .*__memset", out, re.M))
print(f"{sys.argv[1]:8s} max {int(sys.argv[2]):8d}: {(d['Ir'] - ms) / pairs:5.0f} instructions "
      f"(+ memset {ms / pairs:3.0f} bytes), "
      f"{(d.get('Dr', 0) + d.get('Dw', 0)) / pairs:4.0f} data accesses, {d1 / pairs:5.2f} D1 "
      f"misses, {ll / pairs:5.2f} LL misses a pair")
PY
  done
done
rm -rf "$out"

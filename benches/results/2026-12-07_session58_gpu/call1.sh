#!/bin/bash
# Session 58, call 1, not run (no device was lent). Session 57's call 1, unchanged, on a bundle
# rebuilt at main 5f7b4a8 (size classes, arena portions, the thief's carve, the split take) with
# ../2026-12-07_session57_gpu/next-gpu.patch applied; rmm-bench.tar.xz: RMM 26.10's build,
# ours/bench-random_allocations at 5f7b4a8, ours/bench-base at 8c43766. README.md says how.
exec bash benches/results/2026-12-07_session57_gpu/call1.sh "$@"

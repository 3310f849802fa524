#!/bin/bash
# The output write of the 1,000,000-cell pipeline, with and without reserving the large
# datasets' places first (SCPIPE_RESERVE_WRITE), on 1 GPU and on every GPU, in one call; then
# the tmpfs write ways of tmpfs_write_bench.py on the same host.
# Usage: bash scripts/device/experiments/write_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets the reports)
set -u
bash "$(dirname "$0")/switch_ab.sh" "${1:?bundle directory with scpipe}" SCPIPE_RESERVE_WRITE "${2:-1000000}"
echo "== tmpfs write ways, 8 GiB"
python3 "$(dirname "$0")/tmpfs_write_bench.py" /dev/shm 8

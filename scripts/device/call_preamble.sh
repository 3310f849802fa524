# Sourced at the top of a one-off device call script (`benches/results/*/callN.sh`), run from the
# repository root with the bundle folder `B` carried: unpacks B's `*.xz` binaries, prints the GPU,
# and sets what such a call uses: `OUT` (what comes back: at most 8 files, so logs go to `L` and
# are packed with `pack_logs` at the end), `S` (the summary in `$OUT`), `say` (echo into it), the
# kernel cache and `SCPIPE_DATA` (B's `data/`).
# Usage: B=.gpu-v; source scripts/device/call_preamble.sh; ...; pack_logs
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt; L=${L:-/tmp/logs}; mkdir -p "$L"
say() { echo "$@" | tee -a "$S"; }
pack_logs() { tar -C "$L" -czf "$OUT/logs.tgz" . ; ls "$OUT"; }
for f in "$B"/*.xz; do [ -e "$f" ] || continue; xz -dkf "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=${SCPIPE_KERNEL_CACHE:-/tmp/kc} SCPIPE_DATA=${SCPIPE_DATA:-$PWD/$B/data}

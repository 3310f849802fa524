#!/usr/bin/env bash
# On the GPU machine, from the repository root: issue 53's scrublet with its neighbour counts on
# the GPU. scpipe.pp.scrublet on the device (settings.device "gpu") and on the host's cores, and
# rapids-singlecell 0.18.1's rsc.pp.scrublet (cuML's brute-force kNN; skipped where cuML is
# missing), on generated counts (8 types, 3,000 genes, made on 16 processes) for each N of
# SIZES, one library per
# process (scpipe's phases traced; the host run only up to CPU_MAX cells, default 200,000);
# the scores' correlation and the calls' agreement of ours with rsc's. Carry `.whl` (the
# rmm_core wheel) and `.rsc-bench` (its `extra` folder too). Output under $OUT.
#   SIZES="200000 1000000" bash scripts/device/benchmarks/scrublet_gpu.sh
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for n in ${SIZES:-200000 1000000}; do
  cat > /tmp/scrub_gen.py <<'PY'

import sys, time, numpy as np, scipy.sparse as sp, anndata as ad
from concurrent.futures import ProcessPoolExecutor
n, g = int(sys.argv[1]), 3000
rates = np.random.default_rng(0).gamma(0.3, 2.0, size=(8, g)).astype(np.float32)
def block(i):  # 20,000 cells of random types, each block from its own seed
    rng = np.random.default_rng([0, i])
    types = rng.integers(0, 8, min(20000, n - i))
    return sp.csr_matrix(rng.poisson(rates[types]).astype(np.float32))
if __name__ == "__main__":
    t = time.perf_counter()
    with ProcessPoolExecutor(16) as pool:
        blocks = list(pool.map(block, range(0, n, 20000)))
    a = ad.AnnData(sp.vstack(blocks).tocsr())
    a.write_h5ad(f"/dev/shm/scrub-{n}.h5ad")
    print(f"{n} x {g}: {a.X.nnz} stored, made in {time.perf_counter() - t:.1f} s")
PY
  python3 /tmp/scrub_gen.py "$n" 2>&1 | grep -v Warn | tee "$OUT/gen-$n.txt"
  for lib in scpipe-gpu scpipe-cpu rsc; do
    [ "$lib" = rsc ] && ! python3 -c "import cuml" 2>/dev/null && { echo "rsc: skipped, its scrublet needs cuML, which this machine lacks"; continue; }
    [ "$lib" = scpipe-cpu ] && [ "$n" -gt "${CPU_MAX:-200000}" ] && continue
    SCPIPE_TRACE_PHASES=1 timeout "${LIMIT:-240}" python3 - "$n" "$lib" <<'PY' 2>&1 | grep -v -i warn | tail -80 | tee "$OUT/$lib-$n.txt"
import sys, time, numpy as np, anndata as ad
n, lib = int(sys.argv[1]), sys.argv[2]
a = ad.read_h5ad(f"/dev/shm/scrub-{n}.h5ad")
if lib.startswith("scpipe"):
    import scpipe
    scpipe.settings.device = "gpu" if lib == "scpipe-gpu" else "cpu"
    scpipe.settings.progress = True  # the call's parts in / step / results out, on stderr
    run = lambda b: scpipe.pp.scrublet(b)
else:
    import rapids_singlecell as rsc
    rsc.get.anndata_to_GPU(a)
    run = lambda b: rsc.pp.scrublet(b)
for call in ["first", "second"]:
    b = a.copy()
    t = time.perf_counter(); run(b); s = time.perf_counter() - t
    print(f"{lib} {n}: {call} call {s:.2f} s, {int(b.obs['predicted_doublet'].sum())} called, "
          f"threshold {b.uns['scrublet'].get('threshold', float('nan')):.4f}")
np.save(f"/dev/shm/score-{lib}-{n}.npy", b.obs["doublet_score"].to_numpy())
np.save(f"/dev/shm/call-{lib}-{n}.npy", b.obs["predicted_doublet"].to_numpy())
PY
  done
  python3 - "$n" <<'PY' 2>&1 | tee "$OUT/agree-$n.txt"
import sys, os, numpy as np
n = sys.argv[1]
libs = [l for l in ["scpipe-gpu", "scpipe-cpu", "rsc"] if os.path.exists(f"/dev/shm/score-{l}-{n}.npy")]
for i, a in enumerate(libs):
    for b in libs[i + 1:]:
        sa, sb = np.load(f"/dev/shm/score-{a}-{n}.npy"), np.load(f"/dev/shm/score-{b}-{n}.npy")
        ca, cb = np.load(f"/dev/shm/call-{a}-{n}.npy"), np.load(f"/dev/shm/call-{b}-{n}.npy")
        ok = np.isfinite(sa) & np.isfinite(sb)
        print(f"{n}: {a} vs {b}: scores r = {np.corrcoef(sa[ok], sb[ok])[0, 1]:.4f}, calls agree on {100 * (ca == cb).mean():.2f}%")
PY
  rm -f /dev/shm/scrub-$n.h5ad /dev/shm/score-*-$n.npy /dev/shm/call-*-$n.npy
done

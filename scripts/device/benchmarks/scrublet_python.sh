#!/usr/bin/env bash
# On the GPU machine, from the repository root: the Python package's tests with REQUIRE_GPU=1
# (scanpy 1.12.4, igraph and leidenalg from .rsc-bench's wheels, its `extra` folder carried)
# and scpipe.pp.scrublet's host time on the machine's cores at N generated cells (8 types,
# 3,000 genes), with a 4-batch key and as one batch. Carry `.whl` (the rmm_core wheel),
# `.rsc-bench` (without the rapids-singlecell wheel, not needed here) and the datasets as
# `.gpu-t/data` (SCPIPE_DATA). Output under $OUT.
#   [NO_TESTS=1] bash scripts/device/benchmarks/scrublet_python.sh [N]   (default 100000)
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/tests"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/.gpu-t/data}
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
if [ "${NO_TESTS:-0}" != 1 ]; then
  ( time REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider --tb=short rmm-python/tests 2>&1 ) 2>&1 \
    | grep -E "^E |FAILED|passed|failed|real" | tail -30 | tee "$OUT/tests/pytest.txt"
fi
N="${1:-100000}" timeout 300 python3 - <<'PY' 2>&1 | grep -v Warn | tee "$OUT/scrublet_host.txt"
import os, time, warnings
import anndata as ad, numpy as np, pandas as pd, scipy.sparse as sp
warnings.filterwarnings("ignore")
import scpipe
n, g = int(os.environ["N"]), 3000
rng = np.random.default_rng(0)
rates = rng.gamma(0.3, 2.0, size=(8, g)).astype(np.float32)
types = rng.integers(0, 8, n)
blocks = [sp.csr_matrix(rng.poisson(rates[types[i:i + 10000]]).astype(np.float32)) for i in range(0, n, 10000)]
a = ad.AnnData(sp.vstack(blocks).tocsr())
a.obs["batch"] = pd.Categorical(rng.integers(0, 4, n).astype(str))
print(f"{n} x {g}, {a.X.nnz} stored, {os.cpu_count()} cores")
scpipe.settings.device = "cpu"
for key in ["batch", None]:
    b = a.copy(); t = time.perf_counter(); scpipe.pp.scrublet(b, batch_key=key)
    print(f"scpipe.pp.scrublet(batch_key={key!r}): {time.perf_counter() - t:.2f} s, {int(b.obs.predicted_doublet.sum())} called")
PY

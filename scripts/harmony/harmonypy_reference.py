#!/usr/bin/env python3
"""Reference fixtures for scpipe's harmony tests, computed with harmonypy.

For two datasets it writes gzip TSV files into tests/data/harmony/ (the CI tests read them; no
Python is needed there):

  NAME_pcs.tsv.gz             the input embedding: 50 PCs per cell (header PC1..PC50)
  NAME_obs.tsv.gz             per cell: batch (and cell_type where known)
  NAME_harmonypy_seedS.tsv.gz harmonypy's corrected embedding with random_state=S, for two seeds

Datasets:
  pbmc2b   ../shared/data/scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad (400 real PBMCs,
           obs['batch'] = pbmc5k / pbmc10k; no cell types)
  synth4b  `scpipe generate 5000 4000 --seed 11` (4 batches, 8 cell types in obs['batch'] and
           obs['cell_type']; 4,962 cells pass the filters)

The PCA embeddings are our own: scpipe's CPU pipeline (`scpipe run --device cpu`, default
steps: QC, filters, normalize_total, log1p, cell_ranger HVG (2000 genes), scale, pca with 50
components) writes obsm['X_pca'], read back here.
So the fixtures compare harmony implementations on the same input, whatever the PCA.

harmonypy runs with its defaults (harmonypy 2.x follows R harmony 2: nclust min(round(N/30),
100), theta 2, sigma 0.1, dynamic lambda with alpha 0.2, batch_prop_cutoff 1e-5,
max_iter_harmony 10, max_iter_kmeans 4, epsilon_cluster 1e-3, epsilon_harmony 1e-2), once with
random_state 0 and once with random_state 1: the spread between the two is the yardstick the
tests hold scpipe to.

Usage (a venv outside the repository, as the harmony tests' note says):

  python3.11 -m venv /work/venv-harmony
  /work/venv-harmony/bin/pip install numpy pandas scipy harmonypy==2.1.0 h5py anndata
  cargo build -p sc-pipeline --bin scpipe
  /work/venv-harmony/bin/python scripts/harmony/harmonypy_reference.py --scpipe target/debug/scpipe

Seeds and sizes are fixed, so a rerun rewrites the same inputs (the PCA is deterministic);
harmonypy's outputs depend on its version (recorded in tests/data/harmony/README.md).
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

import anndata as ad
import harmonypy
import numpy as np
import pandas as pd

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "data"))
OUT = os.path.join(ROOT, "tests", "data", "harmony")
SEEDS = (0, 1)


def write_matrix(path, m):
    cols = [f"PC{i + 1}" for i in range(m.shape[1])]
    with gzip.open(path, "wt", compresslevel=9) as f:
        f.write("\t".join(cols) + "\n")
        for row in m:
            f.write("\t".join(f"{v:.7g}" for v in row) + "\n")


def write_obs(path, obs):
    with gzip.open(path, "wt", compresslevel=9) as f:
        obs.to_csv(f, sep="\t", index=False)


def pca_of(scpipe, h5ad, tmp, extra):
    out = os.path.join(tmp, os.path.basename(h5ad).replace(".h5ad", "") + "_pca.h5ad")
    cmd = [scpipe, "run", h5ad, "-o", out, "--device", "cpu", "--no-neighbors", *extra]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return ad.read_h5ad(out)


def dataset(name, a, columns):
    z = np.asarray(a.obsm["X_pca"], dtype=np.float32)
    assert z.shape[1] == 50, z.shape
    obs = pd.DataFrame({c: a.obs[c].astype(str).values for c in columns})
    write_matrix(os.path.join(OUT, f"{name}_pcs.tsv.gz"), z)
    write_obs(os.path.join(OUT, f"{name}_obs.tsv.gz"), obs)
    # harmonypy reads the rounded values the tests will read.
    z = pd.read_csv(os.path.join(OUT, f"{name}_pcs.tsv.gz"), sep="\t").values
    for seed in SEEDS:
        h = harmonypy.run_harmony(z, obs, "batch", random_state=seed, verbose=False)
        corrected = np.asarray(h.Z_corr)
        if corrected.shape != z.shape:
            corrected = corrected.T
        write_matrix(os.path.join(OUT, f"{name}_harmonypy_seed{seed}.tsv.gz"), corrected)
        print(f"{name} seed {seed}: {len(h.objective_harmony) - 1} rounds", file=sys.stderr)
    print(f"{name}: {z.shape[0]} cells x {z.shape[1]} PCs, batches "
          f"{obs['batch'].value_counts().to_dict()}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scpipe", required=True, help="the scpipe binary")
    args = p.parse_args()
    scpipe = os.path.abspath(args.scpipe)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        real = os.path.join(SHARED, "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
        dataset("pbmc2b", pca_of(scpipe, real, tmp, []), ["batch"])
        synth = os.path.join(tmp, "synth4b.h5ad")
        subprocess.run([scpipe, "generate", "5000", "4000", "--seed", "11", "-o", synth],
                       check=True, stdout=subprocess.DEVNULL)
        dataset("synth4b", pca_of(scpipe, synth, tmp, []), ["batch", "cell_type"])
    with open(os.path.join(OUT, "VERSIONS"), "w") as f:
        f.write(f"harmonypy {harmonypy.__version__}\nnumpy {np.__version__}\n")


if __name__ == "__main__":
    main()

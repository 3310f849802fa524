"""Writes the scanpy reference values the sc-kernels tests compare against.

Run from this directory with a Python that has scanpy 1.11.5 (see ../../../conformance/requirements.txt):

    python make_reference.py /path/to/shared/data

Input: `scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad` (400 cells, 2 batches, raw counts).
A subsample keeps the files small: every other cell (200 cells, 100 per batch) and 1,500 genes
drawn at random (seed 0) among those detected in at least 3 of the 400 cells, plus the 13 `MT-`
genes. Output: `pbmc_sub_counts.txt` (the subsample) and `pbmc_sub_reference.txt` (scanpy's
results on it). Both use one record per line: `name dtype length values...`.
"""

import sys
from pathlib import Path

import numpy as np
import scanpy as sc
import scipy.sparse as sp

data = Path(sys.argv[1] if len(sys.argv) > 1 else "../../../../shared/data")
a = sc.read_h5ad(data / "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
X = a.X.tocsr()
detected = np.asarray((X > 0).sum(0)).ravel()
mt = np.flatnonzero(np.asarray(a.var_names.str.startswith("MT-"), dtype=bool))
rng = np.random.default_rng(0)
pool = np.setdiff1d(np.flatnonzero(detected >= 3), mt)
genes = np.sort(np.concatenate([rng.choice(pool, 1500, replace=False), mt]))
cells = np.arange(0, a.n_obs, 2)
sub = sc.AnnData(X[cells][:, genes].astype(np.float32))
sub.obs_names = a.obs_names[cells]
sub.var_names = a.var_names[genes].astype(str)
sub.obs["batch"] = a.obs["batch"].to_numpy()[cells].astype(str)
sub.obs["batch"] = sub.obs["batch"].astype("category")
x = sub.X.tocsr()
x.sort_indices()

records = []


def rec(name, values, dtype=None):
    """float32 arrays are written with 9 significant digits (exact), float64 ones with 13."""
    v = np.asarray(values).ravel()
    if dtype is None:
        dtype = {"b": "bool", "i": "int", "u": "int", "f": "f64"}[v.dtype.kind]
    digits = 9 if v.dtype == np.float32 else 13
    if dtype == "bool":
        s = " ".join("1" if t else "0" for t in v)
    elif dtype == "int":
        s = " ".join(str(int(t)) for t in v)
    else:
        s = " ".join(f"{float(t):.{digits}g}" for t in v)
    records.append(f"{name} {dtype} {v.size} {s}")


with open("pbmc_sub_counts.txt", "w") as f:
    f.write(f"shape int 2 {x.shape[0]} {x.shape[1]}\n")
    f.write("indptr int {} {}\n".format(len(x.indptr), " ".join(map(str, x.indptr))))
    f.write("indices int {} {}\n".format(len(x.indices), " ".join(map(str, x.indices))))
    f.write("data int {} {}\n".format(len(x.data), " ".join(str(int(v)) for v in x.data)))
    codes = sub.obs["batch"].cat.codes.to_numpy()
    f.write("batch int {} {}\n".format(len(codes), " ".join(map(str, codes))))
    f.write("batch_categories str {} {}\n".format(len(sub.obs["batch"].cat.categories), " ".join(sub.obs["batch"].cat.categories)))
    f.write("gene_names str {} {}\n".format(sub.n_vars, " ".join(sub.var_names)))

# QC metrics.
sub.var["mt"] = np.asarray(sub.var_names.str.startswith("MT-"), dtype=bool)
obs, var = sc.pp.calculate_qc_metrics(sub, qc_vars=["mt"])
for c in obs.columns:
    rec("qc_obs:" + c, obs[c].to_numpy())
for c in var.columns:
    if not c.startswith("log1p"):
        rec("qc_var:" + c, var[c].to_numpy())

# Filters.
keep_cells, n_genes = sc.pp.filter_cells(sub.X, min_genes=150)
rec("filter_cells_min_genes_150", keep_cells)
keep_genes, n_cells = sc.pp.filter_genes(sub.X, min_cells=5)
rec("filter_genes_min_cells_5", keep_genes)
rec("filter_genes_n_cells", n_cells)

# The pipeline: filter genes (cells all have >= 150 genes or are dropped), normalize, log1p.
ad = sub[keep_cells].copy()
pipeline_genes, _ = sc.pp.filter_genes(ad.X, min_cells=5)
ad = ad[:, pipeline_genes].copy()
rec("pipeline_cells", keep_cells)
rec("pipeline_genes", pipeline_genes)
counts = ad.copy()
sc.pp.normalize_total(ad, target_sum=1e4)
rec("normalized_row_sums", np.asarray(ad.X.sum(1), dtype=np.float64))
rec("normalized_first_row", ad.X[0].toarray())
sc.pp.log1p(ad)
rec("log1p_row_sums", np.asarray(ad.X.sum(1), dtype=np.float64))

# Highly variable genes.
for flavor in ["seurat", "cell_ranger"]:
    for batch in [None, "batch"]:
        df = sc.pp.highly_variable_genes(ad, flavor=flavor, n_top_genes=300, batch_key=batch, inplace=False)
        tag = f"hvg_{flavor}_{'batch' if batch else 'nobatch'}"
        rec(tag + ":highly_variable", df["highly_variable"].to_numpy())
        if not batch:
            rec(tag + ":means", df["means"].to_numpy())
            rec(tag + ":dispersions", df["dispersions"].to_numpy())
        rec(tag + ":dispersions_norm", df["dispersions_norm"].to_numpy())
        if batch:
            rec(tag + ":highly_variable_nbatches", df["highly_variable_nbatches"].to_numpy())
    # Cutoff selection (no n_top_genes), single batch.
    df = sc.pp.highly_variable_genes(ad, flavor=flavor, inplace=False)
    rec(f"hvg_{flavor}_cutoffs:highly_variable", df["highly_variable"].to_numpy())
for batch in [None, "batch"]:
    df = sc.pp.highly_variable_genes(counts, flavor="seurat_v3", n_top_genes=300, batch_key=batch, inplace=False)
    tag = f"hvg_seurat_v3_{'batch' if batch else 'nobatch'}"
    rec(tag + ":highly_variable", df["highly_variable"].to_numpy())
    rec(tag + ":highly_variable_rank", df["highly_variable_rank"].to_numpy())
    if not batch:
        rec(tag + ":means", df["means"].to_numpy())
        rec(tag + ":variances", df["variances"].to_numpy())
    rec(tag + ":variances_norm", df["variances_norm"].to_numpy())
    if batch:
        rec(tag + ":highly_variable_nbatches", df["highly_variable_nbatches"].to_numpy())

# The loess fit itself, on the non-constant genes of all cells.
from skmisc.loess import loess
from scanpy.preprocessing._utils import _get_mean_var
m, v = _get_mean_var(counts.X)
nc = v > 0
model = loess(np.log10(m[nc]), np.log10(v[nc]), span=0.3, degree=2)
model.fit()
rec("loess_fitted", model.outputs.fitted_values)

# Scale, PCA and neighbors on the seurat genes.
sc.pp.highly_variable_genes(ad, flavor="seurat", n_top_genes=300)
hv = ad[:, ad.var["highly_variable"]].copy()
sc.pp.scale(hv, max_value=10)
rec("scale_mean", hv.var["mean"].to_numpy())
rec("scale_std", hv.var["std"].to_numpy())
rec("scale_first_row", hv.X[0])
rec("scale_col_sums", hv.X.sum(0))
sc.pp.pca(hv, n_comps=20)
rec("pca_variance", hv.uns["pca"]["variance"])
rec("pca_variance_ratio", hv.uns["pca"]["variance_ratio"])
rec("pca_components_top10", hv.varm["PCs"].T[:10])  # 10 x n_hvg, row-major
rec("pca_x_pca", hv.obsm["X_pca"])  # n_cells x 20, row-major (float32)
sc.pp.neighbors(hv, n_neighbors=15)
d = hv.obsp["distances"].tocsr()
d.sort_indices()
rec("nn_dist_indptr", d.indptr)
rec("nn_dist_indices", d.indices)
rec("nn_dist_data", d.data)
c = hv.obsp["connectivities"].tocsr()
c.sort_indices()
rec("nn_conn_indptr", c.indptr)
rec("nn_conn_indices", c.indices)
rec("nn_conn_data", c.data)

with open("pbmc_sub_reference.txt", "w") as f:
    f.write("\n".join(records) + "\n")
print(f"{sub.shape} nnz {x.nnz}; {len(records)} reference records")

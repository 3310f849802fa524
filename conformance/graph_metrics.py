"""Measures of a clustering on a graph that need only numpy and scipy (the GPU machine's
scripts use them without scanpy)."""

import numpy as np
import scipy.sparse as sp


def modularity(graph: sp.csr_matrix, labels: np.ndarray, resolution: float = 1.0) -> float:
    """Newman's modularity with a resolution, the quality leidenalg's RBConfiguration optimises."""
    g = sp.csr_matrix(graph, dtype=np.float64)
    codes = np.unique(labels, return_inverse=True)[1]
    k = np.asarray(g.sum(axis=1)).ravel()
    total = k.sum()
    member = sp.csr_matrix((np.ones(len(codes)), (np.arange(len(codes)), codes)))
    inside = (member.T @ g @ member).diagonal()
    strength = member.T @ k
    return float(((inside - resolution * strength**2 / total)).sum() / total)


def far_cell_ratio(layout: np.ndarray) -> float:
    """How far a layout's farthest cell lies from its median, in units of the 99th percentile of
    the cells' distances to the median (about 1 where no cell is flung out; issue 50)."""
    y = np.asarray(layout, dtype=np.float64)
    d = np.sqrt(((y - np.median(y, axis=0)) ** 2).sum(axis=1))
    return float(d.max() / max(np.percentile(d, 99), 1e-12))


def knn_agreement(ours, theirs) -> tuple[float, np.ndarray, float]:
    """How two neighbors graphs (AnnData objects with `obsp['distances']` and
    `obsp['connectivities']`) agree: the share of the reference's kNN sets found in ours, which
    cells have the same set, and the largest connectivity difference among those cells."""
    od, td = sp.csr_matrix(ours.obsp["distances"]), sp.csr_matrix(theirs.obsp["distances"])
    inter = total = 0
    same_rows = np.zeros(od.shape[0], dtype=bool)
    for i in range(od.shape[0]):
        a = set(od.indices[od.indptr[i]:od.indptr[i + 1]])
        b = set(td.indices[td.indptr[i]:td.indptr[i + 1]])
        inter += len(a & b)
        total += len(b)
        same_rows[i] = a == b
    diff = (sp.csr_matrix(ours.obsp["connectivities"]) - sp.csr_matrix(theirs.obsp["connectivities"])).tocoo()
    mask = same_rows[diff.row] & same_rows[diff.col]
    worst = float(np.abs(diff.data[mask]).max()) if mask.any() else 0.0
    return inter / max(total, 1), same_rows, worst

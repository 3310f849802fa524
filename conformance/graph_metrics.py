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

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

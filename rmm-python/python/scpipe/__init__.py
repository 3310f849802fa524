"""scpipe: scanpy's and rapids-singlecell's workflow on an AnnData, run by scpipe's GPU steps.

    import scanpy as sc
    import scpipe

    adata = sc.read_h5ad("pbmc.h5ad")
    adata.var["mt"] = adata.var_names.str.startswith("MT-")
    scpipe.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True)
    scpipe.pp.filter_cells(adata, min_genes=100)
    scpipe.pp.filter_genes(adata, min_cells=3)
    scpipe.pp.normalize_total(adata)
    scpipe.pp.log1p(adata)
    scpipe.pp.highly_variable_genes(adata, n_top_genes=2000)
    scpipe.pp.pca(adata)
    scpipe.pp.neighbors(adata)
    scpipe.tl.umap(adata)
    scpipe.tl.leiden(adata, flavor="igraph", n_iterations=2)
    scpipe.tl.rank_genes_groups(adata, "leiden", method="wilcoxon")
    sc.pl.umap(adata, color="leiden")

``scpipe.pp`` and ``scpipe.tl`` take scanpy's arguments and write scanpy's slots; ``scpipe.get``
moves matrices to and from the GPU as rapids-singlecell's; ``scpipe.settings`` says where the
steps run. The steps are the ``scpipe`` command's, and on the GPU they allocate from the
resource that ``rmm_core`` sets (``rmm_core.reinitialize(pool_allocator=True)``), the one that
CuPy and PyTorch can share through ``rmm_core.allocators``.
"""

from rmm_core import __version__
from scpipe import get, pp, tl
from scpipe._settings import settings

__all__ = ["get", "pp", "settings", "tl", "__version__"]

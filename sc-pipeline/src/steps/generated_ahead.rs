//! On a run whose X is never held, calculate_qc_metrics' pass over the cells also takes what
//! filter_genes, highly_variable_genes and scale will read, each block carried as far as the
//! run's settings say those steps will see it: the cells filter_cells will keep (decided per
//! cell, from the same counts), every gene, normalize_total to its fixed target, log1p. Each
//! of those steps reads these statistics when its chain is the one they were taken through, and
//! makes its own pass over the cells otherwise (filter_genes removed a gene, so the totals
//! normalize_total divides by differ).
//!
//! Every pass makes each block of cells again (generated on the GPU, or read from the file):
//! one pass instead of four, on the 11.4 M-cell atlas about 2 s each.

use super::generated_blocks::{Chain, GeneratedPass};
use sc_kernels::filter::{
    filter_cells_by_genes, CellFilter, FilterResult, FilterStats, GeneFilter,
};
use sc_kernels::gpu::compact::select_rows;
use sc_kernels::gpu::reduce::{col_moments, ColumnMoments, Transform};
use sc_kernels::gpu::streamed::{for_each_row_block, RowBlocks};
use sc_kernels::hvg::KnownMoments;
use sc_kernels::normalize::NormalizeParams;
use sc_kernels::qc::{QcBlocks, QcMetrics, QcParams};

/// What QC's pass takes ahead, from the settings of the steps after it
/// (`steps::generated_ahead_plan`).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// filter_cells' filter: the cells the blocks keep.
    cells: Option<CellFilter>,
    /// Whether filter_genes runs (it reads the kept cells' counts).
    genes: bool,
    /// normalize_total and log1p, as the chain will hold them.
    values: Chain,
    /// The moments HVG and scale read, by transform.
    transforms: Vec<Transform>,
}

impl Plan {
    /// What QC's pass takes: the cells `cells` keeps (all without), filter_genes' statistics
    /// of their counts where `genes`, and the moments of each of `transforms` after
    /// `normalize` and `log1p` over every gene; `None` where no later step would read any.
    pub fn new(
        cells: Option<CellFilter>,
        genes: bool,
        normalize: Option<NormalizeParams>,
        log1p: bool,
        transforms: impl IntoIterator<Item = Transform>,
    ) -> Option<Plan> {
        let mut distinct: Vec<Transform> = Vec::new();
        for t in transforms {
            if !distinct.contains(&t) {
                distinct.push(t);
            }
        }
        (genes || !distinct.is_empty()).then(|| Plan {
            cells,
            genes,
            values: Chain {
                normalize,
                log1p,
                ..Chain::default()
            },
            transforms: distinct,
        })
    }
}

/// The statistics QC's pass took for later steps.
#[derive(Debug, Clone)]
pub struct Ahead {
    /// What the blocks of `moments` went through: the cells filter_cells keeps, every gene,
    /// normalize_total and log1p.
    chain: Chain,
    /// filter_cells' statistics, over every cell, where QC's counts of genes could not serve
    /// (counts not known to be never negative).
    cells: Option<FilterStats>,
    /// filter_genes' statistics, over the counts of the cells kept.
    genes: Option<FilterStats>,
    moments: Vec<KnownMoments>,
}

impl Ahead {
    /// filter_cells' `filter` on the chain's blocks, when they are the source's counts (these
    /// statistics' blocks before any cell was removed).
    pub fn cell_filter(
        &mut self,
        chain: &Chain,
        filter: CellFilter,
    ) -> Option<sc_kernels::Result<FilterResult>> {
        (chain.is_identity())
            .then(|| self.cells.take())
            .flatten()
            .map(|c| c.cells(filter))
    }

    /// filter_genes' `filter` on the chain's blocks, when they are the counts of the cells these
    /// statistics kept.
    pub fn gene_filter(
        &mut self,
        chain: &Chain,
        filter: GeneFilter,
    ) -> Option<sc_kernels::Result<FilterResult>> {
        let counts = Chain {
            keep_cells: chain.keep_cells.clone(),
            ..Chain::default()
        };
        let same = chain == &counts && chain.keep_cells == self.chain.keep_cells;
        same.then(|| self.genes.take())
            .flatten()
            .map(|g| g.genes(filter))
    }

    /// The moments of `transform` of the chain's blocks, when they are these statistics' blocks
    /// (the highly variable genes selected from them or not).
    pub fn moments(&self, chain: &Chain, transform: Transform) -> Option<KnownMoments> {
        let all_genes = Chain {
            keep_hvg: None,
            ..chain.clone()
        };
        if all_genes != self.chain {
            return None;
        }
        let m = self.moments.iter().find(|m| m.transform == transform)?;
        Some(match &chain.keep_hvg {
            Some(keep) => KnownMoments {
                transform,
                moments: m.moments.select(keep),
            },
            None => m.clone(),
        })
    }
}

/// calculate_qc_metrics over the blocks of `pass` (its source's counts), and what `plan`
/// says to take for later steps in the same pass.
pub fn qc_pass(
    pass: &GeneratedPass<'_>,
    params: &QcParams,
    plan: Option<&Plan>,
) -> sc_kernels::Result<(QcMetrics, Option<Ahead>)> {
    let ctx = &pass.ctx;
    let rows = pass.rows();
    let n_cols = rows.n_cols();
    let mut qc = QcBlocks::new(n_cols, params)?;
    let Some(plan) = plan.filter(|_| pass.chain.is_identity()) else {
        for_each_row_block(ctx, &rows, |block, _| qc.add(ctx, &block).map(|_| ()))?;
        return Ok((qc.finish(), None));
    };
    let mut keep_cells = plan.cells.map(|_| Vec::with_capacity(rows.n_rows()));
    // The rows' statistics, where QC's counts of genes do not decide the cells as filter_cells
    // will (counts that may be negative, or a bound on the counts).
    let by_genes = pass.source.non_negative()
        && matches!(
            plan.cells,
            Some(CellFilter::MinGenes(_) | CellFilter::MaxGenes(_))
        );
    let mut cells = (plan.cells.is_some() && !by_genes).then(FilterStats::of_rows);
    let mut genes = plan.genes.then(|| FilterStats::of_columns(n_cols));
    let mut moments: Vec<KnownMoments> = (plan.transforms.iter())
        .map(|&transform| KnownMoments {
            transform,
            moments: ColumnMoments::zeros(n_cols),
        })
        .collect();
    for_each_row_block(ctx, &rows, |block, _| {
        let added = qc.add(ctx, &block)?;
        let block = match (plan.cells, &mut keep_cells) {
            (Some(filter), Some(kept)) => {
                let keep = match &mut cells {
                    Some(stats) => {
                        stats.add(ctx, &block)?;
                        stats.cells_from(filter, added.start)?
                    }
                    None => kept_cells(filter, &qc.n_genes()[added])?,
                };
                let x = select_rows(ctx, &block, &keep)?;
                kept.extend(keep);
                x
            }
            _ => block,
        };
        if let Some(g) = &mut genes {
            g.add(ctx, &block)?;
        }
        if !moments.is_empty() {
            let x = plan.values.of_kept_cells(ctx, block)?;
            for m in &mut moments {
                m.moments.add(&col_moments(ctx, &x, m.transform, None)?);
            }
        }
        Ok(())
    })?;
    let ahead = Ahead {
        chain: Chain {
            keep_cells,
            ..plan.values.clone()
        },
        cells,
        genes,
        moments,
    };
    Ok((qc.finish(), Some(ahead)))
}

/// Which cells of a block filter_cells will keep, decided as it will decide where the source's
/// counts are never negative: from QC's counts of genes (`n_genes`, the block's).
fn kept_cells(filter: CellFilter, n_genes: &[i32]) -> sc_kernels::Result<Vec<bool>> {
    match filter_cells_by_genes(filter, n_genes) {
        Some(r) => Ok(r?.keep),
        None => Err(sc_kernels::KernelError::Unsupported(format!(
            "{filter:?} from the counts of genes alone"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(n: usize, start: f64) -> ColumnMoments {
        ColumnMoments {
            sums: (0..n).map(|j| start + j as f64).collect(),
            sq: (0..n).map(|j| 10.0 * (start + j as f64)).collect(),
            positive: (0..n).map(|j| j as i64).collect(),
        }
    }

    fn taken() -> Ahead {
        let keep_cells = Some(vec![true, false, true]);
        Ahead {
            chain: Chain {
                keep_cells,
                normalize: Some(sc_kernels::normalize::NormalizeParams {
                    target_sum: Some(1e4),
                    per_cell: false,
                    ..Default::default()
                }),
                log1p: true,
                ..Chain::default()
            },
            cells: Some(FilterStats::of_counted_rows(
                vec![500.0, 20.0, 900.0],
                vec![300, 10, 250],
            )),
            genes: Some(FilterStats::of_columns(4)),
            moments: vec![
                KnownMoments {
                    transform: Transform::Identity,
                    moments: moments(4, 1.0),
                },
                KnownMoments {
                    transform: Transform::Expm1,
                    moments: moments(4, 5.0),
                },
            ],
        }
    }

    #[test]
    fn moments_serve_only_the_chain_they_were_taken_through() {
        let ahead = taken();
        let chain = ahead.chain.clone();
        let m = ahead.moments(&chain, Transform::Expm1).unwrap();
        assert_eq!(m.moments, moments(4, 5.0));
        assert!(ahead.moments(&chain, Transform::Expm1Base(2.0)).is_none());
        // scale after the subset: the highly variable genes' moments.
        let subset = Chain {
            keep_hvg: Some(vec![false, true, false, true]),
            ..chain.clone()
        };
        let m = ahead.moments(&subset, Transform::Identity).unwrap();
        assert_eq!(m.moments.sums, vec![2.0, 4.0]);
        assert_eq!(m.moments.sq, vec![20.0, 40.0]);
        assert_eq!(m.moments.positive, vec![1, 3]);
        // filter_genes removed a gene: the totals normalize_total divides by differ.
        let fewer_genes = Chain {
            keep_genes: Some(vec![true, true, false, true]),
            ..chain.clone()
        };
        assert!(ahead.moments(&fewer_genes, Transform::Identity).is_none());
        // Other cells, no log1p, another target: not these blocks.
        for other in [
            Chain {
                keep_cells: Some(vec![true, true, true]),
                ..chain.clone()
            },
            Chain {
                log1p: false,
                ..chain.clone()
            },
            Chain {
                normalize: None,
                ..chain.clone()
            },
        ] {
            assert!(ahead.moments(&other, Transform::Identity).is_none());
        }
    }

    #[test]
    fn a_plan_takes_each_transform_once_and_only_what_a_step_reads() {
        let p = Plan::new(None, false, None, true, [Transform::Identity; 2]).unwrap();
        assert_eq!(p.transforms, vec![Transform::Identity]);
        assert!(p.values.log1p && p.values.normalize.is_none());
        assert!(Plan::new(Some(CellFilter::MinGenes(200)), false, None, true, []).is_none());
        let genes_only = Plan::new(None, true, None, false, []).unwrap();
        assert!(genes_only.genes && genes_only.transforms.is_empty());
    }

    #[test]
    fn the_cell_filter_reads_the_source_counts_once() {
        let mut ahead = taken();
        let filter = CellFilter::MinGenes(200);
        assert!(ahead.cell_filter(&ahead.chain.clone(), filter).is_none());
        let r = ahead
            .cell_filter(&Chain::default(), filter)
            .unwrap()
            .unwrap();
        assert_eq!(r.keep, vec![true, false, true]);
        assert!(ahead.cell_filter(&Chain::default(), filter).is_none());
        // The flags of the last block added, as the pass decides them.
        let stats = FilterStats::of_counted_rows(vec![1.0; 5], vec![250, 199, 200, 10, 400]);
        assert_eq!(
            stats.cells_from(filter, 2).unwrap(),
            vec![true, false, true]
        );
    }

    #[test]
    fn the_gene_filter_reads_the_counts_of_the_same_cells_once() {
        let mut ahead = taken();
        let filter = GeneFilter::MinCells(1);
        let normalized = ahead.chain.clone();
        assert!(ahead.gene_filter(&normalized, filter).is_none());
        let other_cells = Chain {
            keep_cells: Some(vec![true, true, true]),
            ..Chain::default()
        };
        assert!(ahead.gene_filter(&other_cells, filter).is_none());
        let counts = Chain {
            keep_cells: ahead.chain.keep_cells.clone(),
            ..Chain::default()
        };
        let r = ahead.gene_filter(&counts, filter).unwrap().unwrap();
        assert_eq!(r.keep, vec![false; 4]);
        assert!(ahead.gene_filter(&counts, filter).is_none());
    }
}

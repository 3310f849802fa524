//! The GPU twin of [`super::highly_variable_genes`]: the column passes on the device
//! ([`crate::gpu::reduce::col_moments`] and `hvg.cu`'s clipped pass, batch codes uploaded once),
//! everything else by the CPU's host code through [`ColumnPasses`].

use super::{check_inputs, run, run_across, Batches, ColumnPasses, HvgParams, HvgResult, Moments};
use crate::comm::{Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::{self, warps_for_rows, ColumnMoments, Transform};
use crate::gpu::streamed::{for_each_row_block, HostRows, RowBlocks};
use crate::gpu::{DeviceCsr, DeviceVec, GpuContext};
use crate::stats::add_into;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "hvg",
    source: include_str!("hvg.cu"),
};

/// [`ColumnPasses`] over a device matrix: one kernel per pass, all groups at once (each row
/// accumulates into its batch's slot).
struct GpuPasses<'a> {
    ctx: &'a GpuContext,
    x: &'a DeviceCsr,
    /// Batch code of each row and the number of categories.
    codes: Option<(DeviceVec<u32>, usize)>,
}

impl GpuPasses<'_> {
    fn n_groups(&self) -> usize {
        self.codes.as_ref().map_or(1, |c| c.1)
    }
}

impl ColumnPasses for GpuPasses<'_> {
    fn n_rows(&self) -> usize {
        self.x.n_rows
    }

    fn n_cols(&self) -> usize {
        self.x.n_cols
    }

    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
        let codes = match (&self.codes, per_group) {
            (Some((c, nb)), true) => Some((c, *nb)),
            _ => None,
        };
        let m = reduce::col_moments(self.ctx, self.x, t, codes)?;
        let g = self.x.n_cols;
        let groups = codes.map_or(1, |c| c.1);
        Ok((0..groups)
            .map(|k| Moments {
                sums: m.sums[k * g..(k + 1) * g].to_vec(),
                sq: m.sq[k * g..(k + 1) * g].to_vec(),
                positive: m.positive[k * g..(k + 1) * g].to_vec(),
            })
            .collect())
    }

    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let (ctx, x) = (self.ctx, self.x);
        let len = self.n_groups() * x.n_cols;
        if clip.len() != len {
            return Err(KernelError::Shape(format!(
                "{} clip values for {len} groups x genes",
                clip.len()
            )));
        }
        if len == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let d_clip = ctx.upload(clip)?;
        let sums = ctx.zeros::<f64>(len)?;
        let sq = ctx.zeros::<f64>(len)?;
        let f = ctx.function(SRC, "clipped_moments")?;
        let (n, g) = (x.n_rows as u64, x.n_cols as u64);
        let null: u64 = 0;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr)
            .arg(&x.indices)
            .arg(&x.data)
            .arg(&n)
            .arg(&g);
        match &self.codes {
            Some((c, _)) => l.arg(c),
            None => l.arg(&null),
        };
        l.arg(&d_clip).arg(&sums).arg(&sq);
        ctx.launch(l, warps_for_rows(x.n_rows), "clipped_moments")?;
        Ok((ctx.download(&sums)?, ctx.download(&sq)?))
    }
}

/// `highly_variable_genes` of a device matrix, every flavour, with or without batches; the same
/// result as the CPU function up to the order of floating-point sums. The values are not checked
/// for being finite (the pipeline checks X before uploading it); the shapes of `batches` and
/// `gene_names` and the parameters are.
pub fn highly_variable_genes_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
) -> Result<HvgResult> {
    highly_variable_genes_gpu_across(ctx, x, params, batches, gene_names, &SingleRank)
}

/// [`highly_variable_genes_gpu`] of one rank's cells, the statistics taken over the cells of
/// all ranks of `comm` (see [`crate::hvg::highly_variable_genes_across`]).
pub fn highly_variable_genes_gpu_across(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
    comm: &dyn Communicator,
) -> Result<HvgResult> {
    check_inputs(x.n_rows, x.n_cols, params, batches, gene_names)?;
    let codes = match batches {
        Some(b) => Some((ctx.upload(&b.codes)?, b.categories.len())),
        None => None,
    };
    run_across(
        GpuPasses { ctx, x, codes },
        params,
        batches,
        gene_names,
        comm,
    )
}

/// [`ColumnPasses`] over a host matrix streamed through the device: each pass uploads the row
/// blocks in turn (with their slice of the batch codes), runs [`GpuPasses`] on each and adds up
/// the per-gene sums.
struct StreamedPasses<'a> {
    ctx: &'a GpuContext,
    src: &'a dyn RowBlocks,
    codes: Option<(&'a [u32], usize)>,
    /// A pass over all rows already taken: answered without going over the blocks.
    known: Option<&'a KnownMoments>,
}

impl StreamedPasses<'_> {
    /// Runs `pass` on each block's [`GpuPasses`], adding its outputs into `acc`.
    fn each_block<A>(
        &self,
        mut acc: A,
        pass: impl Fn(&GpuPasses<'_>) -> Result<A>,
        add: impl Fn(&mut A, A),
    ) -> Result<A> {
        for_each_row_block(self.ctx, self.src, |block, rows| {
            let codes = match self.codes {
                Some((c, nb)) => Some((self.ctx.upload(&c[rows])?, nb)),
                None => None,
            };
            let ctx = self.ctx;
            add(
                &mut acc,
                pass(&GpuPasses {
                    ctx,
                    x: &block,
                    codes,
                })?,
            );
            Ok(())
        })?;
        Ok(acc)
    }
}

impl ColumnPasses for StreamedPasses<'_> {
    fn n_rows(&self) -> usize {
        self.src.n_rows()
    }

    fn n_cols(&self) -> usize {
        self.src.n_cols()
    }

    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
        if let Some(k) = self.known.filter(|k| k.transform == t) {
            if !per_group || self.codes.is_none() {
                return Ok(vec![k.moments.clone()]);
            }
        }
        let groups = if per_group {
            self.codes.map_or(1, |c| c.1)
        } else {
            1
        };
        let zeros = vec![Moments::zeros(self.src.n_cols()); groups];
        self.each_block(
            zeros,
            |p| p.moments(t, per_group),
            |acc, part| {
                for (a, b) in acc.iter_mut().zip(part) {
                    a.add(&b);
                }
            },
        )
    }

    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let len = clip.len();
        self.each_block(
            (vec![0.0; len], vec![0.0; len]),
            |p| p.clipped_sums(clip),
            |acc, part| {
                add_into(&mut acc.0, &part.0);
                add_into(&mut acc.1, &part.1);
            },
        )
    }
}

/// [`highly_variable_genes_gpu`] of a host matrix streamed through the device in row blocks of
/// at most `block_bytes`: each column pass goes over the blocks once.
pub fn highly_variable_genes_streamed(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
    block_bytes: usize,
) -> Result<HvgResult> {
    let src = HostRows::new(x, block_bytes);
    highly_variable_genes_blocks(ctx, &src, params, batches, gene_names, None)
}

/// [`highly_variable_genes_gpu`] of a matrix made on the device block by block (`batches`
/// holds a code per row of the whole matrix): each column pass goes over the blocks once, but
/// for the pass `known` already holds (taken with [`single_pass`]'s transform over the same
/// rows and columns, in a pass of the caller's over the blocks).
pub fn highly_variable_genes_blocks(
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
    known: Option<&KnownMoments>,
) -> Result<HvgResult> {
    check_inputs(src.n_rows(), src.n_cols(), params, batches, gene_names)?;
    if let Some(k) = known {
        if k.moments.sums.len() != src.n_cols() {
            return Err(KernelError::Shape(format!(
                "moments of {} columns for a matrix of {}",
                k.moments.sums.len(),
                src.n_cols()
            )));
        }
    }
    let passes = StreamedPasses {
        ctx,
        src,
        codes: batches.map(|b| (&b.codes[..], b.categories.len())),
        known,
    };
    run(&passes, params, batches, gene_names)
}

/// The one column pass `highly_variable_genes` takes for `params` without batches, where its
/// flavour takes one (the dispersion flavours: seurat_v3 takes two, over the counts): the
/// transform of its moments.
pub fn single_pass(params: &HvgParams) -> Option<Transform> {
    match params.flavor {
        super::Flavor::Seurat | super::Flavor::CellRanger => {
            Some(super::dispersion_transform(params))
        }
        _ => None,
    }
}

/// The column moments of every row of a matrix, of `transform(x)`, taken before
/// [`highly_variable_genes_blocks`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownMoments {
    pub transform: Transform,
    pub moments: ColumnMoments,
}

//! Times each kernel on synthetic data of the benchmark's size (release build):
//!
//!     cargo run --release -p sc-kernels --example timings -- [n_cells] [n_genes] [steps]
//!
//! Default: 100,000 cells x 20,000 genes (~100 million non-zeros, as `scpipe generate` makes),
//! 2,000 highly variable genes, PCA on the 100,000 x 2,000 scaled matrix, kNN on 100,000 x 50.
//! `steps` is a comma-separated subset of: sparse,hvg,pca,knn (default all).

use sc_kernels::hvg::{self, Flavor, HvgParams};
use sc_kernels::*;
use std::time::Instant;

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn unif(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Counts with skewed gene popularity: each cell ~1,500-2,500 genes.
fn synthetic(n: usize, g: usize) -> CsrMatrix<f32> {
    use rayon::prelude::*;
    // Gene weights ~ lognormal(0, 1.8) via Box-Muller, cumulative for sampling.
    let mut r = Rng(7);
    let w: Vec<f64> = (0..g)
        .map(|_| {
            let (u1, u2) = (r.unif().max(1e-12), r.unif());
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos() * 1.8).exp()
        })
        .collect();
    let total: f64 = w.iter().sum();
    let mut cum = Vec::with_capacity(g);
    let mut acc = 0.0;
    for v in &w {
        acc += v / total;
        cum.push(acc);
    }
    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let mut r = Rng(1000 + i as u64);
            let k = 1500 + (r.next() % 1000) as usize;
            let mut cols: Vec<u32> = (0..k * 6 / 5)
                .map(|_| cum.partition_point(|&c| c < r.unif()).min(g - 1) as u32)
                .collect();
            cols.sort_unstable();
            let mut out_c = Vec::with_capacity(k);
            let mut out_v = Vec::with_capacity(k);
            for c in cols {
                if out_c.last() == Some(&c) {
                    *out_v.last_mut().unwrap() += 1.0;
                } else if out_c.len() < k {
                    out_c.push(c);
                    out_v.push(1.0 + (r.next() % 3) as f32);
                }
            }
            (out_c, out_v)
        })
        .collect();
    let mut indptr = vec![0u64];
    let mut indices = Vec::new();
    let mut data = Vec::new();
    for (c, v) in rows {
        indices.extend(c);
        data.extend(v);
        indptr.push(indices.len() as u64);
    }
    CsrMatrix::new(n, g, indptr, indices, data).unwrap()
}

fn time<R>(name: &str, f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    println!("{name:<40} {:>8.3} s", t.elapsed().as_secs_f64());
    r
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(100_000, |s| s.parse().unwrap());
    let g: usize = args.get(2).map_or(20_000, |s| s.parse().unwrap());
    let steps = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "sparse,hvg,pca,knn".into());
    println!("{} threads", rayon::current_num_threads());
    let mut x = time("generate (not a step)", || synthetic(n, g));
    println!("{n} x {g}, {} non-zeros", x.nnz());
    let mut hv_mask = None;
    if steps.contains("sparse") || steps.contains("hvg") {
        let mt: Vec<bool> = (0..g).map(|j| j < 13).collect();
        time("calculate_qc_metrics(qc_vars=mt)", || {
            qc::calculate_qc_metrics(
                &x,
                &qc::QcParams {
                    qc_vars: vec![("mt".into(), mt)],
                    ..Default::default()
                },
            )
            .unwrap()
        });
        let c = time("filter_cells(min_genes=200)", || {
            filter::filter_cells(&x, filter::CellFilter::MinGenes(200)).unwrap()
        });
        let gf = time("filter_genes(min_cells=10)", || {
            filter::filter_genes(&x, filter::GeneFilter::MinCells(10)).unwrap()
        });
        x = time("subset cells and genes", || {
            x.select_rows(&c.keep)
                .unwrap()
                .select_cols(&gf.keep)
                .unwrap()
        });
        let counts = if steps.contains("hvg") {
            Some(x.clone())
        } else {
            None
        };
        time("normalize_total(1e4)", || {
            normalize::normalize_total(
                &mut x,
                &normalize::NormalizeParams {
                    target_sum: Some(1e4),
                    ..Default::default()
                },
            )
            .unwrap()
        });
        time("log1p", || log1p::log1p(&mut x, None).unwrap());
        if let Some(counts) = counts {
            for flavor in [Flavor::CellRanger, Flavor::Seurat] {
                let p = HvgParams {
                    flavor,
                    n_top_genes: Some(2000),
                    ..Default::default()
                };
                let r = time(&format!("hvg {} 2000", flavor.name()), || {
                    hvg::highly_variable_genes(&x, &p, None, None).unwrap()
                });
                hv_mask = Some(r.highly_variable);
            }
            let codes: Vec<u32> = (0..x.n_rows as u32).map(|i| i % 4).collect();
            let b = hvg::Batches {
                codes,
                categories: (0..4).map(|i| format!("b{i}")).collect(),
            };
            let p = HvgParams {
                flavor: Flavor::Seurat,
                n_top_genes: Some(2000),
                ..Default::default()
            };
            time("hvg seurat 2000, 4 batches", || {
                hvg::highly_variable_genes(&x, &p, Some(&b), None).unwrap()
            });
            let p = HvgParams {
                flavor: Flavor::SeuratV3,
                n_top_genes: Some(2000),
                ..Default::default()
            };
            time("hvg seurat_v3 2000 (counts)", || {
                hvg::highly_variable_genes(&counts, &p, None, None).unwrap()
            });
        }
    }
    let mask = hv_mask.unwrap_or_else(|| {
        (0..x.n_cols)
            .map(|j| j % (x.n_cols / 2000).max(1) == 0)
            .take(x.n_cols)
            .collect()
    });
    let sub = time("subset to highly variable genes", || {
        x.select_cols(&mask).unwrap()
    });
    let (scaled, _) = time("scale(max_value=10) -> dense f32", || {
        scale::scale_csr_to_dense::<f32, f32>(
            &sub,
            &scale::ScaleParams {
                zero_center: true,
                max_value: Some(10.0),
            },
        )
        .unwrap()
    });
    println!("scaled: {} x {}", scaled.n_rows, scaled.n_cols);
    if steps.contains("pca") {
        time("pca(50) sparse input (log data)", || {
            pca::pca_sparse(&sub, &pca::PcaParams::default()).unwrap()
        });
        let r = time("pca(50) dense input (scaled)", || {
            pca::pca_dense(&scaled, &pca::PcaParams::default()).unwrap()
        });
        if steps.contains("knn") {
            run_knn(&r.x_pca);
        }
    } else if steps.contains("knn") {
        let d: Vec<f32> = {
            let mut r = Rng(5);
            (0..sub.n_rows * 50)
                .map(|_| (r.unif() * 10.0) as f32)
                .collect()
        };
        run_knn(&DenseMatrix::new(sub.n_rows, 50, d).unwrap());
    }
}

fn run_knn(x: &DenseMatrix<f32>) {
    println!("kNN input: {} x {}", x.n_rows, x.n_cols);
    let knn = time("exact kNN (k=15)", || neighbors::knn_exact(x, 15).unwrap());
    time("  smooth_knn_dist (part of the next)", || {
        neighbors::smooth_knn_dist(&knn, 1.0, 1.0)
    });
    time("UMAP connectivities", || {
        neighbors::umap_connectivities(&knn, 1.0, 1.0).unwrap()
    });
    time("distances matrix", || neighbors::distance_matrix(&knn));
}

//! The CPU's kNN scan, shared by the exact kNN and the inverted file: per-query lists of the
//! `kc` best f32 scores `|r|^2 - 2 q.r` (which rank references by distance to q), fed from
//! blocks of matrix products, then the candidates' distances recomputed exactly in f64.

use faer::{Accum, Mat, MatMut, MatRef, Par};

/// `out[(r, q)] = refs[r] . queries[q]` in f32 on one thread (the callers run in parallel):
/// the products the scans rank references by.
pub(crate) fn products_into(out: MatMut<'_, f32>, refs: MatRef<'_, f32>, queries: MatRef<'_, f32>) {
    faer::linalg::matmul::matmul(
        out,
        Accum::Replace,
        refs,
        queries.transpose(),
        1.0,
        Par::Seq,
    );
}

/// [`products_into`] a new `refs x queries` matrix.
pub(crate) fn products(refs: MatRef<'_, f32>, queries: MatRef<'_, f32>) -> Mat<f32> {
    let mut out = Mat::<f32>::zeros(refs.nrows(), queries.nrows());
    products_into(out.as_mut(), refs, queries);
    out
}

/// Per-query candidate lists, sorted by score (a tie keeps the earlier offer), at most `kc`.
pub(crate) struct Candidates {
    pub(crate) lists: Vec<Vec<(f32, u32)>>,
    thr: Vec<f32>,
    kc: usize,
}

impl Candidates {
    pub(crate) fn new(queries: usize, kc: usize) -> Self {
        Candidates {
            lists: vec![Vec::with_capacity(kc + 1); queries],
            thr: vec![f32::INFINITY; queries],
            kc,
        }
    }

    /// Offers the references of a block: `prod[(r, q)]` = reference r . query q, `norms[r]` its
    /// squared norm, `id(r)` its name.
    pub(crate) fn offer(
        &mut self,
        prod: MatRef<'_, f32>,
        norms: &[f32],
        id: impl Fn(usize) -> u32,
    ) {
        let nr = norms.len();
        let kc = self.kc;
        for (q, c) in self.lists.iter_mut().enumerate() {
            let col = prod.col(q).try_as_col_major().unwrap().as_slice();
            let mut t = self.thr[q];
            let mut j = 0;
            while j < nr {
                let end = (j + 16).min(nr);
                // Cheap vectorizable test first; most chunks hold no candidate.
                let mut any = false;
                for jj in j..end {
                    any |= norms[jj] - 2.0 * col[jj] < t;
                }
                if any {
                    for jj in j..end {
                        let dist = norms[jj] - 2.0 * col[jj];
                        if dist < t {
                            let pos = c.partition_point(|e| e.0 <= dist);
                            c.insert(pos, (dist, id(jj)));
                            if c.len() > kc {
                                c.pop();
                            }
                            if c.len() == kc {
                                t = c[kc - 1].0;
                            }
                        }
                    }
                }
                j = end;
            }
            self.thr[q] = t;
        }
    }
}

/// The Euclidean distance of rows `i` and `j` of `xf` (rows of `d` values), in f64.
pub(crate) fn distance(xf: &[f32], d: usize, i: usize, j: usize) -> f64 {
    row_distance(&xf[i * d..(i + 1) * d], &xf[j * d..(j + 1) * d])
}

/// The Euclidean distance of two rows, in f64.
pub(crate) fn row_distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// The best `k` of cell `i`'s candidates `cand` by exact f64 distance (ties: the cell itself,
/// then the smaller index), the cell itself first (scanpy requires it), into `out_idx` and
/// `out_dist` (`k` each). `xf` holds the cells' rows of `d` values.
pub(crate) fn exact_best(
    xf: &[f32],
    d: usize,
    i: usize,
    cand: impl Iterator<Item = u32>,
    out_idx: &mut [u32],
    out_dist: &mut [f32],
) {
    let mut exact: Vec<(f64, bool, u32)> = cand
        .map(|j| (distance(xf, d, i, j as usize), j as usize != i, j))
        .collect();
    if !exact.iter().any(|e| !e.1) {
        exact.push((0.0, false, i as u32));
    }
    exact.sort_by(|a, b| {
        a.0.partial_cmp(&b.0)
            .unwrap()
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
    });
    let self_pos = exact.iter().position(|e| !e.1).unwrap();
    let me = exact.remove(self_pos);
    exact.insert(0, (0.0, false, me.2));
    for (t, e) in exact.iter().take(out_idx.len()).enumerate() {
        out_idx[t] = e.2;
        out_dist[t] = e.0 as f32;
    }
}

//! The grid of the GPU's interpolated repulsion (`tsne.cu`, after Linderman et al. 2019,
//! "FIt-SNE"): where the boxes lie, the Lagrange weights of a cell's box's nodes, the
//! fixed-point scales of the spread charges, and (for the tests) the host's twin of the whole
//! interpolation with the convolution done directly.
//!
//! The embedding's square `[lo, lo + nb h]^2` is cut into `nb x nb` boxes of side `h`, each
//! with `3 x 3` nodes at `(k + 1/2) h / 3`: a uniform grid of `M = 3 nb` nodes a side. As
//! FIt-SNE: at least 50 boxes a side and boxes at most one unit wide; `nb` rounded up to a
//! product of 2, 3, 5 and 7 (the FFT's sizes are `2M = 6 nb`).

/// Interpolation nodes per box and axis (`TSNE_NODES`).
pub const NODES: usize = 3;
/// Boxes a side at least (FIt-SNE's `min_num_intervals`).
const MIN_BOXES: usize = 50;
/// Boxes a side at most: beyond, boxes grow wider than a unit (an embedding more than 2,000
/// units across; the transforms stay at 6,000^2 x 5 doubles, 1.4 GB).
const MAX_BOXES: usize = 1000;
/// The largest |Lagrange weight| product of a node is 1.875^2 < 4.
const WEIGHT_BOUND: f64 = 4.0;

/// Where the boxes lie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    pub lo: f64,
    /// A box's side.
    pub h: f64,
    /// Boxes a side.
    pub nb: usize,
}

impl Grid {
    /// The grid over `[min x, max x, min y, max y]`.
    pub fn for_bounds(b: [f64; 4]) -> Grid {
        let extent = Self::extent(b);
        Self::with_boxes(
            b,
            smooth((extent.ceil() as usize).clamp(MIN_BOXES, MAX_BOXES)),
        )
    }

    /// `nb` boxes a side over `[min x, max x, min y, max y]`.
    pub fn with_boxes(b: [f64; 4], nb: usize) -> Grid {
        Grid {
            lo: b[0].min(b[2]),
            h: Self::extent(b) / nb as f64,
            nb,
        }
    }

    /// The side of the square: all cells in one place still get boxes of a positive side.
    fn extent(b: [f64; 4]) -> f64 {
        let lo = b[0].min(b[2]);
        (b[1].max(b[3]) - lo).max(f64::EPSILON * (1.0 + lo.abs()))
    }

    /// Nodes a side.
    pub fn m(&self) -> usize {
        NODES * self.nb
    }

    /// The spacing of the nodes.
    pub fn spacing(&self) -> f64 {
        self.h / NODES as f64
    }
}

/// The least `v >= n` whose prime factors are 2, 3, 5 and 7.
fn smooth(n: usize) -> usize {
    (n.max(1)..)
        .find(|&v| {
            let mut r = v;
            for p in [2, 3, 5, 7] {
                while r % p == 0 {
                    r /= p;
                }
            }
            r == 1
        })
        .expect("smooth numbers are unbounded")
}

/// A coordinate's box (`0..nb`) and its place `t` in it (`[0, 1]`).
pub fn locate(v: f64, g: &Grid) -> (usize, f64) {
    let u = (v - g.lo) / g.h;
    let b = (u.floor().max(0.0) as usize).min(g.nb - 1);
    (b, u - b as f64)
}

/// The Lagrange weights at `t` of the nodes `(k + 1/2) / 3`.
pub fn lagrange(t: f64) -> [f64; NODES] {
    [
        (t - 0.5) * (t - 5.0 / 6.0) * 4.5,
        (t - 1.0 / 6.0) * (t - 5.0 / 6.0) * -9.0,
        (t - 1.0 / 6.0) * (t - 0.5) * 4.5,
    ]
}

/// Powers of 2 by which the charges `1, x, y, x^2 + y^2` of `n` cells within `bounds` are
/// multiplied before they are summed as 64-bit integers: as fine as can be with no node's sum
/// beyond 2^62.
pub fn fixed_point_scales(n: usize, b: [f64; 4]) -> [f64; 4] {
    let r = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    [1.0, r, r, 2.0 * r * r].map(|c| {
        let bound = WEIGHT_BOUND * n.max(1) as f64 * c.max(1e-30);
        2f64.powi((62.0 - bound.log2()).floor() as i32)
    })
}

/// The host's twin of `tsne.cu`'s interpolated repulsion, with the convolution summed node by
/// node (`O(M^4)`: small grids only): each cell's `sum_j q_ij^2 (y_i - y_j)`, and
/// `sum_{i != j} q_ij`.
#[cfg(test)]
pub fn repulsion(y: &[f64], g: &Grid) -> (Vec<[f64; 2]>, f64) {
    let (n, m) = (y.len() / 2, g.m());
    let nodes_of = |i: usize| {
        let (bx, tx) = locate(y[2 * i], g);
        let (by, ty) = locate(y[2 * i + 1], g);
        let (wx, wy) = (lagrange(tx), lagrange(ty));
        let mut out = Vec::with_capacity(NODES * NODES);
        for (ky, wy) in wy.iter().enumerate() {
            for (kx, wx) in wx.iter().enumerate() {
                out.push(((NODES * by + ky) * m + NODES * bx + kx, wx * wy));
            }
        }
        out
    };
    let mut charges = vec![[0.0; 4]; m * m];
    for i in 0..n {
        let (x0, x1) = (y[2 * i], y[2 * i + 1]);
        for (node, w) in nodes_of(i) {
            for (c, v) in [1.0, x0, x1, x0 * x0 + x1 * x1].iter().enumerate() {
                charges[node][c] += w * v;
            }
        }
    }
    let s = g.spacing();
    let mut potentials = vec![[0.0; 4]; m * m];
    for a in 0..m * m {
        for b in 0..m * m {
            let (dr, dc) = (
                (a / m) as f64 - (b / m) as f64,
                (a % m) as f64 - (b % m) as f64,
            );
            let q = 1.0 / (1.0 + (dr * dr + dc * dc) * s * s);
            for c in 0..4 {
                potentials[a][c] += q * q * charges[b][c];
            }
        }
    }
    let mut z = 0.0;
    let rep = (0..n)
        .map(|i| {
            let mut phi = [0.0; 4];
            for (node, w) in nodes_of(i) {
                for c in 0..4 {
                    phi[c] += w * potentials[node][c];
                }
            }
            let (x0, x1) = (y[2 * i], y[2 * i + 1]);
            z += (1.0 + x0 * x0 + x1 * x1) * phi[0] - 2.0 * (x0 * phi[1] + x1 * phi[2]) + phi[3];
            [x0 * phi[0] - phi[1], x1 * phi[0] - phi[2]]
        })
        .collect();
    (rep, z - n as f64)
}

//! `draw_graph` (scanpy's `tl.draw_graph`, its default layout `'fa'`): ForceAtlas2 (Jacomy et
//! al. 2014) of the neighbors graph, with the settings scanpy gives fa2-modified's
//! `ForceAtlas2`, which follows Gephi's:
//! - each node weighs `1 +` its stored edges (`mass`);
//! - repulsion `scaling_ratio m_i m_j / d` between every two nodes, away from each other,
//!   by Barnes-Hut (`crate::quadtree`, angle `theta`);
//! - gravity `gravity m_i` towards the origin;
//! - attraction `w_ij d` along each edge (edge weight influence 1, no hub dissuasion, no
//!   LinLog);
//! - Gephi's adaptive speed: a global speed from the nodes' swinging (their force's change
//!   since the last iteration) against their traction, and each node's step slowed by its own
//!   swinging ([`adjust_speed`]).
//!
//! The start is scanpy's: `np.random.seed(random_state); np.random.random((n, 2))`
//! ([`numpy_start`]). fa2-modified computes one node at a time; here each iteration's forces
//! are computed for all nodes at once, in parallel, from the positions the iteration starts
//! with (as fa2's are: it moves the nodes only after every force is summed), each node's sum in
//! its own fixed order, and the totals in fixed chunks in a warp's order: the same start gives
//! the same layout bit for bit on any thread count, and on the GPU ([`force_atlas2_gpu`], the
//! same tree and arithmetic). fa2's quadtree is not repeated: the Barnes-Hut tree is a binary
//! radix tree over the nodes' Morton codes ([`tree`]), which a GPU builds in parallel; a cell
//! is taken whole when the diagonal of its points' box is under `theta` times its distance and
//! it does not hold the node (fa2: twice the distance of its farthest node from its centre of
//! mass, at most the diagonal), and a node near another is pushed once by it (fa2's walk from
//! each of two near nodes pushes both, so near pairs push twice). With `theta = 0` every pair
//! is summed exactly, fa2's own `barnesHutOptimize=False` (the tests compare the two).

mod gpu;
#[cfg(test)]
mod tests;
mod tree;

pub use gpu::{device_bytes, force_atlas2_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::eigsh::{lane_sum, ROWS};
use crate::error::{KernelError, Result};
use crate::random::NumpyRandomState;
use crate::stats::chunked_sum;
use rayon::prelude::*;
use tree::Tree;

const STEP: &str = "draw_graph";

/// fa2-modified's parameters, with the values scanpy passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fa2Params {
    /// scanpy's `maxiter` / `iterations` (500).
    pub iterations: usize,
    /// The repulsion's coefficient (`scalingRatio`, 2).
    pub scaling_ratio: f64,
    /// The pull towards the origin (1).
    pub gravity: f64,
    /// Barnes-Hut's angle (`barnesHutTheta`, 1.2); 0: every pair exactly.
    pub theta: f64,
    /// How much swinging the speed tolerates (`jitterTolerance`, 1).
    pub jitter_tolerance: f64,
}

impl Default for Fa2Params {
    fn default() -> Self {
        Fa2Params {
            iterations: 500,
            scaling_ratio: 2.0,
            gravity: 1.0,
            theta: 1.2,
            jitter_tolerance: 1.0,
        }
    }
}

impl Fa2Params {
    fn check(&self) -> Result<()> {
        for (name, v, zero_ok) in [
            ("scaling_ratio", self.scaling_ratio, false),
            ("gravity", self.gravity, true),
            ("theta", self.theta, true),
            ("jitter_tolerance", self.jitter_tolerance, false),
        ] {
            if !(v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0))) {
                let domain = if zero_ok { ">= 0" } else { "> 0" };
                return Err(KernelError::param(
                    name,
                    format!("must be a finite number {domain}, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// scanpy's start: `np.random.seed(seed); np.random.random((n, 2))`, row-major.
pub fn numpy_start(n: usize, seed: u32) -> Vec<f64> {
    let mut r = NumpyRandomState::new(seed);
    (0..2 * n).map(|_| r.random_sample()).collect()
}

/// The layout (`n x 2`, row-major) of `graph` (symmetric, weights >= 0) from `start`.
pub fn force_atlas2(graph: &CsrMatrix<f32>, start: &[f64], params: &Fa2Params) -> Result<Vec<f64>> {
    let mass = prepare(graph, start, params)?;
    let n = mass.len();
    let mut pos = start.to_vec();
    let mut force = vec![0.0; 2 * n];
    let mut old = vec![0.0; 2 * n];
    let mut speed = Speed::default();
    for _ in 0..params.iterations {
        std::mem::swap(&mut force, &mut old);
        forces(graph, &pos, &mass, params, &mut force);
        let totals = chunked_sum(n, ROWS, 2, |rows, acc| {
            let at = |v: &[f64], i: usize| [v[2 * i], v[2 * i + 1]];
            let terms: Vec<[f64; 2]> = rows
                .map(|i| swing_and_traction(at(&old, i), at(&force, i), mass[i]))
                .collect();
            acc[0] += lane_sum(terms.iter().map(|t| t[0]));
            acc[1] += lane_sum(terms.iter().map(|t| t[1]));
        });
        let step = speed.adjust(totals[0], totals[1], n, params.jitter_tolerance);
        pos.par_chunks_mut(2)
            .zip(force.par_chunks(2).zip(old.par_chunks(2)))
            .zip(mass.par_iter())
            .for_each(|((p, (f, o)), &m)| {
                let [swinging, _] = swing_and_traction([o[0], o[1]], [f[0], f[1]], m);
                let factor = step / (1.0 + (step * swinging).sqrt());
                p[0] += f[0] * factor;
                p[1] += f[1] * factor;
            });
    }
    Ok(pos)
}

/// The checks both twins make, then each node's mass (`1 +` its stored non-zero edges).
fn prepare(graph: &CsrMatrix<f32>, start: &[f64], params: &Fa2Params) -> Result<Vec<f64>> {
    crate::graph::check_graph(graph, STEP)?;
    params.check()?;
    let n = graph.n_rows;
    if n >= tree::MAX_NODES {
        return Err(KernelError::Unsupported(format!(
            "{STEP}: {n} nodes; at most {} fit the tree",
            tree::MAX_NODES - 1
        )));
    }
    if start.len() != 2 * n {
        return Err(KernelError::Shape(format!(
            "{STEP}: the start has {} values, expected 2 for each of the graph's {n} nodes",
            start.len()
        )));
    }
    if let Some(i) = start.iter().position(|v| !v.is_finite()) {
        return Err(KernelError::Unsupported(format!(
            "{STEP}: the start's node {} has the non-finite coordinate {}",
            i / 2,
            start[i]
        )));
    }
    Ok((0..n)
        .into_par_iter()
        .map(|i| 1.0 + graph.row(i).1.iter().filter(|&&w| w != 0.0).count() as f64)
        .collect())
}

/// A node's swinging (`m |old - new|`) and traction (`m |old + new| / 2`), Gephi's measures of
/// how much its force changed and how steadily it pulls.
fn swing_and_traction(old: [f64; 2], new: [f64; 2], m: f64) -> [f64; 2] {
    let (d, s) = (
        [old[0] - new[0], old[1] - new[1]],
        [old[0] + new[0], old[1] + new[1]],
    );
    [
        m * (d[0] * d[0] + d[1] * d[1]).sqrt(),
        0.5 * m * (s[0] * s[0] + s[1] * s[1]).sqrt(),
    ]
}

/// Each node's force at `pos` into `force`: repulsion, then gravity, then attraction.
fn forces(
    graph: &CsrMatrix<f32>,
    pos: &[f64],
    mass: &[f64],
    params: &Fa2Params,
    force: &mut [f64],
) {
    let n = mass.len();
    if n < 2 {
        force.fill(0.0);
        gravity_and_attraction(graph, pos, mass, params, force);
        return;
    }
    let tree = Tree::build(pos, mass);
    let theta2 = params.theta * params.theta;
    force
        .par_chunks_mut(2)
        .enumerate()
        .for_each_init(Vec::new, |stack, (i, f)| {
            let (p, mi) = ([pos[2 * i], pos[2 * i + 1]], mass[i]);
            let mut acc = [0.0; 2];
            tree.walk(pos, mass, i, theta2, stack, |y, m| {
                let d = [p[0] - y[0], p[1] - y[1]];
                let d2 = d[0] * d[0] + d[1] * d[1];
                if d2 > 0.0 {
                    let factor = params.scaling_ratio * mi * m / d2;
                    acc[0] += d[0] * factor;
                    acc[1] += d[1] * factor;
                }
            });
            f.copy_from_slice(&acc);
        });
    gravity_and_attraction(graph, pos, mass, params, force);
}

/// Adds gravity (`gravity m_i` towards the origin), then each edge's pull `w_ij d`, to each
/// node's force.
fn gravity_and_attraction(
    graph: &CsrMatrix<f32>,
    pos: &[f64],
    mass: &[f64],
    params: &Fa2Params,
    force: &mut [f64],
) {
    force.par_chunks_mut(2).enumerate().for_each(|(i, acc)| {
        let (p, mi) = ([pos[2 * i], pos[2 * i + 1]], mass[i]);
        let dist = (p[0] * p[0] + p[1] * p[1]).sqrt();
        if dist > 0.0 {
            let factor = mi * params.gravity / dist;
            acc[0] -= p[0] * factor;
            acc[1] -= p[1] * factor;
        }
        let (cols, weights) = graph.row(i);
        for (&j, &w) in cols.iter().zip(weights) {
            let j = j as usize;
            let w = f64::from(w);
            acc[0] -= (p[0] - pos[2 * j]) * w;
            acc[1] -= (p[1] - pos[2 * j + 1]) * w;
        }
    });
}

/// Gephi's adaptive speed, carried from one iteration to the next.
#[derive(Debug, Clone, Copy)]
struct Speed {
    speed: f64,
    efficiency: f64,
}

impl Default for Speed {
    fn default() -> Self {
        Speed {
            speed: 1.0,
            efficiency: 1.0,
        }
    }
}

impl Speed {
    /// Gephi's rule (fa2's `adjustSpeedAndApplyForces`), from the nodes' total `swinging` and
    /// `traction`: the jitter tolerated grows with the nodes' mean traction (between
    /// `sqrt(0.05 sqrt(n))` and 10), the efficiency halves when the nodes swing more than twice
    /// what they pull, falls by 0.7 while they swing more than tolerated and else rises by 1.3
    /// (the speed below 1000); the speed moves towards `jitter efficiency traction / swinging`,
    /// rising at most by half. Returns the iteration's speed.
    fn adjust(&mut self, swinging: f64, traction: f64, n: usize, jitter_tolerance: f64) -> f64 {
        const MIN_EFFICIENCY: f64 = 0.05;
        const MAX_JITTER: f64 = 10.0;
        const MAX_RISE: f64 = 0.5;
        let optimal_jitter = 0.05 * (n as f64).sqrt();
        let min_jitter = optimal_jitter.sqrt();
        let mut jitter = jitter_tolerance
            * min_jitter.max(MAX_JITTER.min(optimal_jitter * traction / (n as f64 * n as f64)));
        if traction != 0.0 && swinging / traction > 2.0 {
            if self.efficiency > MIN_EFFICIENCY {
                self.efficiency *= 0.5;
            }
            jitter = jitter.max(jitter_tolerance);
        }
        let target = if swinging == 0.0 {
            f64::INFINITY
        } else {
            jitter * self.efficiency * traction / swinging
        };
        if swinging > jitter * traction {
            if self.efficiency > MIN_EFFICIENCY {
                self.efficiency *= 0.7;
            }
        } else if self.speed < 1000.0 {
            self.efficiency *= 1.3;
        }
        self.speed += (target - self.speed).min(MAX_RISE * self.speed);
        self.speed
    }
}

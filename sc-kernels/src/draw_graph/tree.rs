//! ForceAtlas2's Barnes-Hut tree, the same on the host and on the GPU (`draw_graph.cu` builds
//! and walks it with this arithmetic, each operation rounded, none fused):
//! - the nodes sorted by the Morton code of their position on a square grid over their
//!   bounding box ([`axis_bits`] a side), ties by index ([`keys`]);
//! - Karras's (2012) binary radix tree over the sorted codes ([`internal_node`]): internal node
//!   `k` covers a range of sorted positions and splits it where the codes' common prefix ends;
//!   its children are internal nodes or leaves (a sorted position with [`LEAF`] set);
//! - each internal node's mass, centre of mass and bounding box from its two children's, in
//!   that order ([`combine`]).
//!
//! So the same positions give the same tree, bit for bit, on any thread count or the GPU, and
//! the walk ([`Tree::walk`]) visits the same cells in the same order.

use rayon::prelude::*;

/// A child that is a leaf: its sorted position with this bit set.
pub(super) const LEAF: u32 = 1 << 31;

/// Nodes the tree holds at most (a sorted position must leave [`LEAF`] free).
pub(super) const MAX_NODES: usize = LEAF as usize;

/// What the walk reads of an internal node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Node {
    pub com: [f64; 2],
    pub mass: f64,
    /// The squared diagonal of its points' bounding box.
    pub diag2: f64,
    pub left: u32,
    pub right: u32,
    /// Its sorted positions, `first..=last`.
    pub first: u32,
    pub last: u32,
}

/// A subtree's points: centre of mass, mass and bounding box.
#[derive(Debug, Clone, Copy)]
pub(super) struct Summary {
    pub com: [f64; 2],
    pub mass: f64,
    pub lo: [f64; 2],
    pub hi: [f64; 2],
}

impl Summary {
    fn point(p: [f64; 2], mass: f64) -> Summary {
        Summary {
            com: p,
            mass,
            lo: p,
            hi: p,
        }
    }
}

/// Two subtrees as one: masses added, the centre of mass `(m_l c_l + m_r c_r) / m`, the boxes'
/// union.
pub(super) fn combine(l: &Summary, r: &Summary) -> Summary {
    let mass = l.mass + r.mass;
    let com = [0, 1].map(|d| (l.mass * l.com[d] + r.mass * r.com[d]) / mass);
    Summary {
        com,
        mass,
        lo: [0, 1].map(|d| l.lo[d].min(r.lo[d])),
        hi: [0, 1].map(|d| l.hi[d].max(r.hi[d])),
    }
}

/// The squared diagonal of a summary's box.
pub(super) fn diag2(s: &Summary) -> f64 {
    let e = [s.hi[0] - s.lo[0], s.hi[1] - s.lo[1]];
    e[0] * e[0] + e[1] * e[1]
}

/// Low bits of a key that hold the node's index: enough for `n - 1`, at least 1.
pub(super) fn index_bits(n: usize) -> u32 {
    (usize::BITS - (n.max(2) - 1).leading_zeros()).max(1)
}

/// Bits of each axis of the grid: the rest of the 64, shared evenly.
pub(super) fn axis_bits(n: usize) -> u32 {
    (64 - index_bits(n)) / 2
}

/// The positions' box: `[lo_x, lo_y, hi_x, hi_y]`.
pub(super) fn bounds(pos: &[f64]) -> [f64; 4] {
    pos.par_chunks(2)
        .fold(
            || {
                [
                    f64::INFINITY,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::NEG_INFINITY,
                ]
            },
            |b, p| {
                [
                    b[0].min(p[0]),
                    b[1].min(p[1]),
                    b[2].max(p[0]),
                    b[3].max(p[1]),
                ]
            },
        )
        .reduce(
            || {
                [
                    f64::INFINITY,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::NEG_INFINITY,
                ]
            },
            |a, b| {
                [
                    a[0].min(b[0]),
                    a[1].min(b[1]),
                    a[2].max(b[2]),
                    a[3].max(b[3]),
                ]
            },
        )
}

/// The grid's cells a unit of length: `(2^axis_bits - 1) / side` of the box's larger side (0
/// when every point is the same).
pub(super) fn grid_scale(b: &[f64; 4], axis_bits: u32) -> f64 {
    let side = (b[2] - b[0]).max(b[3] - b[1]);
    if side > 0.0 {
        ((1u64 << axis_bits) - 1) as f64 / side
    } else {
        0.0
    }
}

/// `v`'s bits spread to the even bits (bit `b` to bit `2b`), for the 32 low bits.
pub(super) fn spread(v: u64) -> u64 {
    let mut x = v & 0xffff_ffff;
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Node `i`'s key: the Morton code of its grid cell (x on the even bits) above its index.
pub(super) fn key(
    p: [f64; 2],
    i: usize,
    b: &[f64; 4],
    scale: f64,
    axis_bits: u32,
    index_bits: u32,
) -> u64 {
    let top = (1u64 << axis_bits) - 1;
    let q = [0, 1].map(|d| (((p[d] - b[d]) * scale) as u64).min(top));
    ((spread(q[0]) | (spread(q[1]) << 1)) << index_bits) | i as u64
}

/// Every node's key, in index order.
pub(super) fn keys(pos: &[f64]) -> Vec<u64> {
    let n = pos.len() / 2;
    let (ab, ib) = (axis_bits(n), index_bits(n));
    let b = bounds(pos);
    let scale = grid_scale(&b, ab);
    pos.par_chunks(2)
        .enumerate()
        .map(|(i, p)| key([p[0], p[1]], i, &b, scale, ab, ib))
        .collect()
}

/// The length of the common prefix of sorted keys `i` and `j` (-1 when `j` is outside).
fn delta(keys: &[u64], i: i64, j: i64) -> i32 {
    if j < 0 || j >= keys.len() as i64 {
        -1
    } else {
        (keys[i as usize] ^ keys[j as usize]).leading_zeros() as i32
    }
}

/// Internal node `k` of the sorted, distinct `keys` (Karras 2012, algorithm 2): the range it
/// covers and its two children, without its summary.
pub(super) fn internal_node(keys: &[u64], k: usize) -> Node {
    let i = k as i64;
    let d: i64 = if delta(keys, i, i + 1) > delta(keys, i, i - 1) {
        1
    } else {
        -1
    };
    // The range's other end: first a bound by doubling, then the end by halving.
    let d_min = delta(keys, i, i - d);
    let mut l_max = 2i64;
    while delta(keys, i, i + l_max * d) > d_min {
        l_max *= 2;
    }
    let mut l = 0i64;
    let mut t = l_max / 2;
    while t >= 1 {
        if delta(keys, i, i + (l + t) * d) > d_min {
            l += t;
        }
        t /= 2;
    }
    let j = i + l * d;
    // The split: the last position sharing more than the range's common prefix with i.
    let d_node = delta(keys, i, j);
    let (mut s, mut t) = (0i64, l);
    loop {
        t = (t + 1) / 2;
        if delta(keys, i, i + (s + t) * d) > d_node {
            s += t;
        }
        if t <= 1 {
            break;
        }
    }
    let split = i + s * d + d.min(0);
    let (first, last) = (i.min(j), i.max(j));
    let child = |c: i64, edge: i64| {
        if c == edge {
            LEAF | c as u32
        } else {
            c as u32
        }
    };
    Node {
        left: child(split, first),
        right: child(split + 1, last),
        first: first as u32,
        last: last as u32,
        ..Node::default()
    }
}

/// The tree of points `pos` (`n x 2`, row-major, `2 <= n <=` [`MAX_NODES`]) of masses `mass`.
pub(super) struct Tree {
    /// The node at each sorted position.
    pub order: Vec<u32>,
    /// Each node's sorted position.
    pub rank: Vec<u32>,
    /// The `n - 1` internal nodes; the root is the first.
    pub nodes: Vec<Node>,
}

impl Tree {
    pub fn build(pos: &[f64], mass: &[f64]) -> Tree {
        let n = mass.len();
        debug_assert!((2..=MAX_NODES).contains(&n));
        let mut keys = keys(pos);
        keys.par_sort_unstable();
        let mask = (1u64 << index_bits(n)) - 1;
        let order: Vec<u32> = keys.iter().map(|k| (k & mask) as u32).collect();
        let mut rank = vec![0u32; n];
        for (s, &i) in order.iter().enumerate() {
            rank[i as usize] = s as u32;
        }
        let nodes = (0..n - 1)
            .into_par_iter()
            .map(|k| internal_node(&keys, k))
            .collect();
        let mut tree = Tree { order, rank, nodes };
        tree.summarize(0, pos, mass);
        tree
    }

    /// Child `c`'s summary, the internal nodes' below it written on the way.
    fn summarize(&mut self, c: u32, pos: &[f64], mass: &[f64]) -> Summary {
        if c & LEAF != 0 {
            let i = self.order[(c & !LEAF) as usize] as usize;
            return Summary::point([pos[2 * i], pos[2 * i + 1]], mass[i]);
        }
        let Node { left, right, .. } = self.nodes[c as usize];
        let s = combine(
            &self.summarize(left, pos, mass),
            &self.summarize(right, pos, mass),
        );
        let node = &mut self.nodes[c as usize];
        (node.com, node.mass, node.diag2) = (s.com, s.mass, diag2(&s));
        s
    }

    /// Walks the tree as seen from node `i`: `visit(y, mass)` for each internal node taken
    /// whole at its centre of mass `y` (it does not hold `i`, and its `diag2 < theta2 d^2`, `d`
    /// the distance from `i`'s position `p` to `y`, `d > 0`), and for each other point of the
    /// leaves reached; left child before right. `stack`: the caller's scratch.
    pub fn walk(
        &self,
        pos: &[f64],
        mass: &[f64],
        i: usize,
        theta2: f64,
        stack: &mut Vec<u32>,
        mut visit: impl FnMut([f64; 2], f64),
    ) {
        let (p, s) = ([pos[2 * i], pos[2 * i + 1]], self.rank[i]);
        stack.clear();
        stack.push(0);
        while let Some(c) = stack.pop() {
            if c & LEAF != 0 {
                let j = self.order[(c & !LEAF) as usize] as usize;
                if j != i {
                    visit([pos[2 * j], pos[2 * j + 1]], mass[j]);
                }
                continue;
            }
            let node = &self.nodes[c as usize];
            if !(node.first..=node.last).contains(&s) {
                let d = [p[0] - node.com[0], p[1] - node.com[1]];
                let d2 = d[0] * d[0] + d[1] * d[1];
                if d2 > 0.0 && node.diag2 < theta2 * d2 {
                    visit(node.com, node.mass);
                    continue;
                }
            }
            stack.push(node.right);
            stack.push(node.left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    fn points(n: usize, seed: u64) -> Vec<f64> {
        let mut g = SplitMix64::new(seed);
        (0..2 * n).map(|_| g.normal() * 5.0).collect()
    }

    /// Every internal node's children tile its range, and each node but the root is the child
    /// of exactly one.
    #[test]
    fn the_nodes_tile_their_ranges() {
        for n in [2, 3, 5, 64, 1000] {
            let pos = points(n, n as u64);
            let tree = Tree::build(&pos, &vec![1.0; n]);
            let mut parents = vec![0usize; 2 * n];
            let span = |c: u32, t: &Tree| {
                if c & LEAF != 0 {
                    ((c & !LEAF), (c & !LEAF))
                } else {
                    let nd = &t.nodes[c as usize];
                    (nd.first, nd.last)
                }
            };
            for nd in &tree.nodes {
                let (l, r) = (span(nd.left, &tree), span(nd.right, &tree));
                assert_eq!((l.0, l.1 + 1, r.1), (nd.first, r.0, nd.last), "n = {n}");
                for c in [nd.left, nd.right] {
                    let slot = if c & LEAF != 0 {
                        n + (c & !LEAF) as usize
                    } else {
                        c as usize
                    };
                    parents[slot] += 1;
                }
            }
            assert_eq!((tree.nodes[0].first, tree.nodes[0].last), (0, n as u32 - 1));
            assert_eq!(parents[0], 0);
            assert!(parents[1..n - 1]
                .iter()
                .chain(&parents[n..])
                .all(|&p| p == 1));
            let total: f64 = tree.nodes[0].mass;
            assert_eq!(total, n as f64);
        }
    }

    #[test]
    fn keys_follow_the_grid_then_the_index() {
        // Points on a 2 x 2 grid's corners and a repeat of the first.
        let pos = [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0];
        let k = keys(&pos);
        let (ab, ib) = (axis_bits(5), index_bits(5));
        assert_eq!((ab, ib), (30, 3));
        let top = (1u64 << ab) - 1;
        let code = |x: u64, y: u64| spread(x) | (spread(y) << 1);
        assert_eq!(k[0], 0);
        assert_eq!(k[1], (code(top, 0) << ib) | 1);
        assert_eq!(k[2], (code(0, top) << ib) | 2);
        assert_eq!(k[3], (code(top, top) << ib) | 3);
        assert_eq!(k[4], 4);
        assert_eq!(spread(0b1011), 0b1000101);
    }

    /// With `theta = 0` the walk visits every other point once; the masses and centres of a
    /// cell taken whole are its points'.
    #[test]
    fn the_walk_sees_every_other_point_once_or_within_cells() {
        let n = 500;
        let pos = points(n, 3);
        let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64).collect();
        let tree = Tree::build(&pos, &mass);
        let mut stack = Vec::new();
        for i in [0, 17, 499] {
            let mut seen = 0usize;
            tree.walk(&pos, &mass, i, 0.0, &mut stack, |_, _| seen += 1);
            assert_eq!(seen, n - 1);
            let (mut m, mut exact, mut near) = (0.0, [0.0; 2], [0.0; 2]);
            for j in (0..n).filter(|&j| j != i) {
                let d = [pos[2 * i] - pos[2 * j], pos[2 * i + 1] - pos[2 * j + 1]];
                let d2 = d[0] * d[0] + d[1] * d[1];
                (0..2).for_each(|a| exact[a] += mass[j] * d[a] / d2);
            }
            tree.walk(&pos, &mass, i, 0.25 * 0.25, &mut stack, |y, w| {
                m += w;
                let d = [pos[2 * i] - y[0], pos[2 * i + 1] - y[1]];
                let d2 = d[0] * d[0] + d[1] * d[1];
                (0..2).for_each(|a| near[a] += w * d[a] / d2);
            });
            assert_eq!(m, mass.iter().sum::<f64>() - mass[i]);
            let scale = exact[0].abs() + exact[1].abs();
            for a in 0..2 {
                assert!(
                    (near[a] - exact[a]).abs() < 0.02 * scale,
                    "{near:?} vs {exact:?}"
                );
            }
        }
    }

    #[test]
    fn identical_points_are_skipped_not_divided_by_zero() {
        let pos = [1.0, 1.0].repeat(20);
        let tree = Tree::build(&pos, &[1.0; 20]);
        let mut seen = 0;
        tree.walk(&pos, &[1.0; 20], 3, 1.44, &mut Vec::new(), |y, m| {
            assert_eq!((y, m), ([1.0, 1.0], 1.0));
            seen += 1;
        });
        assert_eq!(seen, 19);
        assert_eq!(tree.nodes[0].diag2, 0.0);
    }
}

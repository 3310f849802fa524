//! The Barnes-Hut quadtree of a 2-D embedding: each cell's centre of mass and mass (its count
//! of points), so that the push of a far cell on a point is computed once for all its points.
//! t-SNE's repulsion on the host (van der Maaten 2014) walks it.
//!
//! Built by splitting the points' index list into quadrants, recursively; a cell of one point,
//! of identical points, or at the depth limit is a leaf and its points are visited one by one.

/// Depth below which points that still share a cell stay together in one leaf.
const MAX_DEPTH: usize = 48;

#[derive(Debug, Clone)]
struct Cell {
    /// Centre of mass.
    com: [f64; 2],
    mass: f64,
    /// The square's side, squared.
    width2: f64,
    /// Children's indices (`u32::MAX`: none) or, for a leaf, its points' range in `order`.
    children: [u32; 4],
    leaf: Option<(u32, u32)>,
}

/// The tree over `points` (`n x 2`, row-major).
#[derive(Debug, Clone)]
pub struct QuadTree {
    cells: Vec<Cell>,
    order: Vec<u32>,
}

impl QuadTree {
    /// The tree of points that weigh 1 each.
    pub fn build(points: &[f64]) -> QuadTree {
        let n = points.len() / 2;
        let mut order: Vec<u32> = (0..n as u32).collect();
        let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
        for p in points.chunks_exact(2) {
            for d in 0..2 {
                lo[d] = lo[d].min(p[d]);
                hi[d] = hi[d].max(p[d]);
            }
        }
        let side = (hi[0] - lo[0]).max(hi[1] - lo[1]).max(1e-12) * (1.0 + 1e-9);
        let mut tree = QuadTree {
            cells: Vec::with_capacity(2 * n + 1),
            order: Vec::new(),
        };
        if n > 0 {
            let mut scratch = vec![0u32; n];
            tree.split(points, &mut order, &mut scratch, 0, n, lo, side, 0);
        }
        tree.order = order;
        tree
    }

    /// Makes the cell of `order[start..end]` (in the square at `corner` of `side`); returns
    /// its index.
    #[allow(clippy::too_many_arguments)]
    fn split(
        &mut self,
        points: &[f64],
        order: &mut [u32],
        scratch: &mut [u32],
        start: usize,
        end: usize,
        corner: [f64; 2],
        side: f64,
        depth: usize,
    ) -> u32 {
        let at = |i: u32| [points[2 * i as usize], points[2 * i as usize + 1]];
        let (mut com, mut mass) = ([0.0; 2], 0.0);
        for &i in &order[start..end] {
            let p = at(i);
            com[0] += p[0];
            com[1] += p[1];
            mass += 1.0;
        }
        com = [com[0] / mass, com[1] / mass];
        let first = at(order[start]);
        let same = order[start..end].iter().all(|&i| at(i) == first);
        let id = self.cells.len() as u32;
        self.cells.push(Cell {
            com,
            mass,
            width2: side * side,
            children: [u32::MAX; 4],
            leaf: None,
        });
        if end - start == 1 || same || depth >= MAX_DEPTH {
            self.cells[id as usize].leaf = Some((start as u32, end as u32));
            return id;
        }
        let half = side / 2.0;
        let mid = [corner[0] + half, corner[1] + half];
        let quadrant = |i: u32| {
            let p = at(i);
            (p[0] >= mid[0]) as usize + 2 * (p[1] >= mid[1]) as usize
        };
        // Order the cell's points by quadrant (a stable counting sort through the scratch).
        let slice = &mut order[start..end];
        let mut counts = [0usize; 5];
        for &i in slice.iter() {
            counts[quadrant(i) + 1] += 1;
        }
        for q in 0..4 {
            counts[q + 1] += counts[q];
        }
        let sorted = &mut scratch[start..end];
        let mut fill = counts;
        for &i in slice.iter() {
            let q = quadrant(i);
            sorted[fill[q]] = i;
            fill[q] += 1;
        }
        slice.copy_from_slice(sorted);
        for q in 0..4 {
            let (s, e) = (start + counts[q], start + counts[q + 1]);
            if s < e {
                let c = [
                    corner[0] + half * (q % 2) as f64,
                    corner[1] + half * (q / 2) as f64,
                ];
                let child = self.split(points, order, scratch, s, e, c, half, depth + 1);
                self.cells[id as usize].children[q] = child;
            }
        }
        id
    }

    /// Walks the tree as seen from point `i`: `visit(y, mass)` for each cell taken whole, at
    /// its centre of mass (those with `width^2 < theta2 d^2`, `d` the distance from `i` to it),
    /// and for each other point of the leaves reached. `stack`: the caller's scratch (one per
    /// thread, not one per call).
    pub fn walk(
        &self,
        points: &[f64],
        i: usize,
        theta2: f64,
        stack: &mut Vec<u32>,
        mut visit: impl FnMut([f64; 2], f64),
    ) {
        let p = [points[2 * i], points[2 * i + 1]];
        stack.clear();
        stack.push(0);
        while let Some(c) = stack.pop() {
            let cell = &self.cells[c as usize];
            if let Some((s, e)) = cell.leaf {
                for &j in &self.order[s as usize..e as usize] {
                    let j = j as usize;
                    if j != i {
                        visit([points[2 * j], points[2 * j + 1]], 1.0);
                    }
                }
                continue;
            }
            let d = [p[0] - cell.com[0], p[1] - cell.com[1]];
            let d2 = d[0] * d[0] + d[1] * d[1];
            if d2 > 0.0 && cell.width2 < theta2 * d2 {
                visit(cell.com, cell.mass);
            } else {
                // Children in reverse so that they are visited in order.
                stack.extend(cell.children.iter().rev().filter(|&&ch| ch != u32::MAX));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// `sum_j m_j (p_i - y_j) / |p_i - y_j|^2` over what the walk visits.
    fn push(tree: &QuadTree, points: &[f64], i: usize, theta2: f64) -> [f64; 2] {
        let p = [points[2 * i], points[2 * i + 1]];
        let mut f = [0.0; 2];
        tree.walk(points, i, theta2, &mut Vec::new(), |y, m| {
            let d = [p[0] - y[0], p[1] - y[1]];
            let d2 = d[0] * d[0] + d[1] * d[1];
            f[0] += m * d[0] / d2;
            f[1] += m * d[1] / d2;
        });
        f
    }

    #[test]
    fn theta_zero_visits_every_other_point_and_a_small_theta_is_close() {
        let mut g = SplitMix64::new(1);
        let points: Vec<f64> = (0..1000).map(|_| g.normal() * 5.0).collect();
        let tree = QuadTree::build(&points);
        for i in [0, 17, 499] {
            let mut f = [0.0; 2];
            for j in (0..500).filter(|&j| j != i) {
                let d = [
                    points[2 * i] - points[2 * j],
                    points[2 * i + 1] - points[2 * j + 1],
                ];
                let d2 = d[0] * d[0] + d[1] * d[1];
                f[0] += d[0] / d2;
                f[1] += d[1] / d2;
            }
            let scale = f[0].abs() + f[1].abs();
            let exact = push(&tree, &points, i, 0.0);
            assert!((exact[0] - f[0]).abs() < 1e-9 * scale, "{exact:?} vs {f:?}");
            let near = push(&tree, &points, i, 0.25);
            assert!((near[0] - f[0]).abs() < 0.05 * scale, "{near:?} vs {f:?}");
            assert!((near[1] - f[1]).abs() < 0.05 * scale, "{near:?} vs {f:?}");
        }
    }

    #[test]
    fn a_cell_weighs_its_points_and_sits_at_their_centre_of_mass() {
        // Two points far from the third: taken whole, at their centre, weighing 2.
        let points = [0.0, 0.0, 1.0, 0.0, 100.0, 0.0];
        let tree = QuadTree::build(&points);
        let mut seen = Vec::new();
        tree.walk(&points, 2, 0.25, &mut Vec::new(), |y, m| seen.push((y, m)));
        assert_eq!(seen, vec![([0.5, 0.0], 2.0)]);
    }

    #[test]
    fn identical_points_share_a_leaf() {
        let points = [1.0, 1.0].repeat(20);
        let tree = QuadTree::build(&points);
        let mut seen = 0;
        tree.walk(&points, 3, 0.25, &mut Vec::new(), |y, m| {
            assert_eq!((y, m), ([1.0, 1.0], 1.0));
            seen += 1;
        });
        assert_eq!(seen, 19);
    }
}

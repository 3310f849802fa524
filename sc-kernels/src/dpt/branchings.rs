//! `dpt`'s branchings: scanpy's `tl.dpt(n_branchings > 0)` in its `haghverdi16` flavour
//! (Haghverdi et al. 2016). The cells start as one segment with two tips (the cell farthest
//! from the root, then the cell farthest from it). Each branching picks the segment whose third
//! tip (the cell farthest from both tips) scores highest against the tips' own distance, and
//! splits it from each of its three tips in turn: the cells ordered by distance from one tip,
//! the branch is the prefix up to where the Kendall tau of the distances to the other two tips
//! gains most over that of the rest. Cells in more than one branch form a fourth, undecided
//! segment; the trunk (the one left at the parent's position) is the undecided segment, or else
//! the branch closest to the other two.
//!
//! Only rows of the DPT distance matrix are needed (those of tips and of their closest cells),
//! each computed once in scanpy's f32 order. The Kendall sums are `O(m^2)` in a segment's `m`
//! cells, as scanpy's, on every core. Ties in scanpy's orderings (numpy's unstable argsort)
//! break here by cell index.

use super::distance_row;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// scanpy's parameters of the branchings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BranchingParams {
    pub n_branchings: usize,
    /// Segments of at most this many cells (a share of all cells when below 1) are not split.
    pub min_group_size: f64,
    /// Moves a split found past 95% of a segment back (scanpy's `allow_kendall_tau_shift`).
    pub allow_kendall_tau_shift: bool,
}

/// The segments found, as scanpy writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Branchings {
    /// Each cell's segment (`obs['dpt_groups']`); a cell that no branch kept stays in 0, as in
    /// scanpy.
    pub groups: Vec<u32>,
    /// Each segment's two tips (`uns['dpt_grouptips']`), the earlier in pseudotime first when
    /// there is a root.
    pub tips: Vec<[usize; 2]>,
    /// The cells by segment, then pseudotime (`obs['dpt_order_indices']`).
    pub order: Vec<usize>,
    /// Positions in `order` where the segment number goes up by one (`uns['dpt_changepoints']`).
    pub changepoints: Vec<usize>,
}

/// The shortest segment the Kendall split takes (scanpy's `min_length` on both sides).
const MIN_LENGTH: usize = 5;

/// Rows of the DPT distance matrix, each computed when first asked for.
struct Distances<'a> {
    basis: &'a DenseMatrix<f32>,
    evals: &'a [f32],
    component: &'a [u32],
    rows: HashMap<usize, Arc<Vec<f32>>>,
}

impl Distances<'_> {
    fn row(&mut self, i: usize) -> Arc<Vec<f32>> {
        let (basis, evals, component) = (self.basis, self.evals, self.component);
        self.rows
            .entry(i)
            .or_insert_with(|| Arc::new(distance_row(basis, evals, i, component)))
            .clone()
    }

    /// Row `i` (a global cell) at the cells of `seg`.
    fn restricted(&mut self, i: usize, seg: &[usize]) -> Vec<f32> {
        let row = self.row(i);
        seg.iter().map(|&c| row[c]).collect()
    }

    fn at(&mut self, i: usize, j: usize) -> f32 {
        self.row(i)[j]
    }
}

/// Detects up to `params.n_branchings` branchings over the diffusion components `basis`
/// (`evals` their eigenvalues, `component` each cell's connected component), from `root` and
/// its `pseudotime` (scanpy starts from cell 0 without a root, and orders by segment only).
pub fn branchings(
    basis: &DenseMatrix<f32>,
    evals: &[f32],
    component: &[u32],
    root: Option<(usize, &[f32])>,
    params: &BranchingParams,
) -> Result<Branchings> {
    let n = basis.n_rows;
    if evals.len() != basis.n_cols || component.len() != n {
        return Err(KernelError::Shape(format!(
            "dpt: {} eigenvalues and {} component labels for {n} cells x {} components",
            evals.len(),
            component.len(),
            basis.n_cols
        )));
    }
    if let Some((r, t)) = root {
        if r >= n || t.len() != n {
            return Err(KernelError::Shape(format!(
                "dpt: root {r} and {} pseudotimes for {n} cells",
                t.len()
            )));
        }
    }
    if !(params.min_group_size >= 0.0 && params.min_group_size.is_finite()) {
        return Err(KernelError::param(
            "min_group_size",
            format!("must be >= 0, got {}", params.min_group_size),
        ));
    }
    let min_group_size = if params.min_group_size >= 1.0 {
        params.min_group_size
    } else {
        (params.min_group_size * n as f64).trunc()
    };
    let mut d = Distances {
        basis,
        evals,
        component,
        rows: HashMap::new(),
    };
    let tip0 = argmax(&d.row(root.map_or(0, |r| r.0)));
    let tip1 = argmax(&d.row(tip0));
    let mut segs: Vec<Vec<usize>> = vec![(0..n).collect()];
    let mut tips: Vec<[usize; 2]> = vec![[tip0, tip1]];
    let mut undecided = vec![true];
    for _ in 0..params.n_branchings {
        let Some((iseg, tips3)) = select_segment(&mut d, &segs, &tips, &undecided, min_group_size)?
        else {
            break;
        };
        split(
            &mut d,
            &mut segs,
            &mut tips,
            &mut undecided,
            iseg,
            tips3,
            params,
        )?;
    }
    let mut groups = vec![0u32; n];
    for (k, seg) in segs.iter().enumerate() {
        for &c in seg {
            groups[c] = k as u32;
        }
    }
    if let Some((_, t)) = root {
        for tip in tips.iter_mut() {
            if t[tip[1]] < t[tip[0]] {
                tip.swap(0, 1);
            }
        }
    }
    let (order, changepoints) = order_cells(&groups, &segs, root.map(|r| r.1));
    Ok(Branchings {
        groups,
        tips,
        order,
        changepoints,
    })
}

/// The segment to split next and its three tips (positions in it), or none when every
/// candidate scores 0 (too small, or no finite distance).
fn select_segment(
    d: &mut Distances<'_>,
    segs: &[Vec<usize>],
    tips: &[[usize; 2]],
    undecided: &[bool],
    min_group_size: f64,
) -> Result<Option<(usize, [usize; 3])>> {
    let mut scores = vec![(0.0f64, [0usize; 3]); segs.len()];
    for (iseg, seg) in segs.iter().enumerate() {
        // An undecided segment near another's second tip looks for a fourth tip.
        let mut third_maximizer = false;
        if undecided[iseg] {
            for (jseg, other) in tips.iter().enumerate() {
                if jseg == iseg {
                    continue;
                }
                for itip in 0..2 {
                    let (t, u) = (tips[iseg][itip], tips[iseg][1 - itip]);
                    if d.at(other[1], t) < 0.5 * d.at(u, t) {
                        third_maximizer = true;
                    }
                }
            }
        }
        let position = |tip: usize| {
            seg.binary_search(&tip).map_err(|_| {
                KernelError::Unsupported(format!(
                    "dpt: tip cell {tip} is not in its segment {iseg} (scanpy fails here too)"
                ))
            })
        };
        let mut t = [position(tips[iseg][0])?, position(tips[iseg][1])?];
        let mut dseg: Vec<f32> = d.restricted(seg[t[0]], seg);
        add(&mut dseg, &d.restricted(seg[t[1]], seg));
        if !dseg.iter().any(|v| v.is_finite()) {
            continue;
        }
        let third = argmax(&dseg);
        if third_maximizer {
            let r3 = d.restricted(seg[third], seg);
            add(&mut dseg, &r3);
            let fourth = argmax(&dseg);
            if fourth != t[0] && fourth != third {
                t[1] = fourth;
                subtract(&mut dseg, &d.restricted(seg[t[1]], seg));
            } else {
                subtract(&mut dseg, &r3);
            }
        }
        let tips3 = [t[0], t[1], third];
        let mut score = f64::from(dseg[tips3[2]] / d.at(seg[tips3[0]], seg[tips3[1]]));
        if seg.len() as f64 <= min_group_size {
            score = 0.0;
        }
        scores[iseg] = (score, tips3);
    }
    let iseg = argmax(&scores.iter().map(|s| s.0).collect::<Vec<_>>());
    Ok((scores[iseg].0 != 0.0).then_some((iseg, scores[iseg].1)))
}

/// Splits segment `iseg` from its three tips `tips3` (positions in it): the trunk stays at
/// `iseg`, the other new segments go last.
#[allow(clippy::too_many_arguments)]
fn split(
    d: &mut Distances<'_>,
    segs: &mut Vec<Vec<usize>>,
    tips: &mut Vec<[usize; 2]>,
    undecided: &mut Vec<bool>,
    iseg: usize,
    tips3: [usize; 3],
    params: &BranchingParams,
) -> Result<()> {
    let seg = segs[iseg].clone();
    let m = seg.len();
    let rows: Vec<Vec<f32>> = tips3.iter().map(|&t| d.restricted(seg[t], &seg)).collect();
    // One branch per tip: the cells nearer it than the split, by distance from it.
    let mut count = vec![0u8; m];
    let mut prefixes = Vec::with_capacity(3);
    for p in [[0, 1, 2], [1, 2, 0], [2, 0, 1]] {
        let by_distance = argsort(&rows[p[0]]);
        let a: Vec<f32> = by_distance.iter().map(|&c| rows[p[1]][c]).collect();
        let b: Vec<f32> = by_distance.iter().map(|&c| rows[p[2]][c]).collect();
        let imax = kendall_tau_split(&a, &b)?;
        let end = if params.allow_kendall_tau_shift && imax as f64 > 0.95 * m as f64 {
            (0.95 * imax as f64) as usize
        } else {
            imax + 1
        };
        for &c in &by_distance[..end] {
            count[c] += 1;
        }
        prefixes.push(by_distance[..end].to_vec());
    }
    let mut branches: Vec<Vec<usize>> = prefixes
        .iter()
        .map(|prefix| {
            let mut b: Vec<usize> = prefix.iter().copied().filter(|&c| count[c] == 1).collect();
            b.sort_unstable();
            b
        })
        .collect();
    let mut branch_tips = Vec::with_capacity(4);
    for (k, branch) in branches.iter().enumerate() {
        if branch.is_empty() {
            return Err(KernelError::Unsupported(format!(
                "dpt: splitting segment {iseg} ({m} cells) leaves a branch with no cells of its \
                 own (scanpy fails there too): ask for fewer branchings"
            )));
        }
        let second = branch[argmax(&pick(&rows[k], branch))];
        branch_tips.push([tips3[k], second]);
    }
    let undecided_cells: Vec<usize> = (0..m).filter(|&c| count[c] > 1).collect();
    let trunk = if !undecided_cells.is_empty() {
        let first = d.restricted(seg[undecided_cells[0]], &seg);
        let tip0 = undecided_cells[argmax(&pick(&first, &undecided_cells))];
        let from0 = d.restricted(seg[tip0], &seg);
        let tip1 = undecided_cells[argmax(&pick(&from0, &undecided_cells))];
        branches.push(undecided_cells);
        branch_tips.push([tip0, tip1]);
        3
    } else {
        // The branch whose closest cells to the other two are nearest them.
        let c = |from: usize, to: usize| branches[to][argmin(&pick(&rows[from], &branches[to]))];
        let (c01, c10, c02, c20, c12, c21) = (c(0, 1), c(1, 0), c(0, 2), c(2, 0), c(1, 2), c(2, 1));
        let mut dist = |a: usize, b: usize| d.at(seg[a], seg[b]);
        let added = [
            f64::from(dist(c10, c01) + dist(c20, c02)),
            f64::from(dist(c01, c10) + dist(c21, c12)),
            f64::from(dist(c12, c21) + dist(c02, c20)),
        ];
        argmin(&added)
    };
    let global = |cells: &[usize]| cells.iter().map(|&c| seg[c]).collect::<Vec<_>>();
    let n_new = branches.len();
    segs[iseg] = global(&branches[trunk]);
    tips[iseg] = [seg[branch_tips[trunk][0]], seg[branch_tips[trunk][1]]];
    for k in (0..n_new).filter(|&k| k != trunk) {
        segs.push(global(&branches[k]));
        tips.push([seg[branch_tips[k][0]], seg[branch_tips[k][1]]]);
    }
    if n_new == 4 {
        undecided[iseg] = true;
    }
    undecided.extend(std::iter::repeat_n(false, n_new - 1));
    Ok(())
}

/// The split position of scanpy's `kendall_tau_split`: the `i` maximising the Kendall tau of
/// `a[..=i]` against `b[..=i]` minus that of the rest, tracked by scanpy's updates from
/// scipy's tau-b of the first five and of the others.
fn kendall_tau_split(a: &[f32], b: &[f32]) -> Result<usize> {
    let n = a.len();
    if n < 2 * MIN_LENGTH + 2 {
        return Err(KernelError::Unsupported(format!(
            "dpt: a segment of {n} cells is too small to split (at least {} needed; scanpy \
             fails there too): raise min_group_size or ask for fewer branchings",
            2 * MIN_LENGTH + 2
        )));
    }
    // Each split's concordance differences, before and from it.
    let diffs: Vec<(i64, i64)> = (MIN_LENGTH..n - MIN_LENGTH - 1)
        .into_par_iter()
        .map(|i| {
            let both = |j: usize| sign(a[j], a[i]) * sign(b[j], b[i]);
            ((0..i).map(both).sum(), (i..n).map(both).sum())
        })
        .collect();
    let mut pos = tau_b(&a[..MIN_LENGTH], &b[..MIN_LENGTH]);
    let mut neg = tau_b(&a[MIN_LENGTH..], &b[MIN_LENGTH..]);
    let corr: Vec<f64> = diffs
        .iter()
        .zip(MIN_LENGTH..)
        .map(|(&(dp, dn), i)| {
            let (before, after) = (i as f64, (n - i) as f64);
            pos += 2.0 / (before + 1.0) * (dp as f64 / before - pos);
            neg += 2.0 / (after - 2.0) * (-(dn as f64) / (after - 1.0) + neg);
            pos - neg
        })
        .collect();
    Ok(MIN_LENGTH + argmax(&corr))
}

/// scipy's `kendalltau(x, y)` (tau-b): concordant minus discordant pairs over the square roots
/// of the pairs untied in each; NaN when either is all ties.
fn tau_b(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len();
    let (cmd, xtie, ytie) = (0..n)
        .into_par_iter()
        .map(|j| {
            let mut s = (0i64, 0i64, 0i64);
            for k in j + 1..n {
                let (dx, dy) = (sign(x[j], x[k]), sign(y[j], y[k]));
                s.0 += dx * dy;
                s.1 += (x[j] == x[k]) as i64;
                s.2 += (y[j] == y[k]) as i64;
            }
            s
        })
        .reduce(|| (0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
    let tot = (n * (n - 1) / 2) as i64;
    if xtie == tot || ytie == tot {
        return f64::NAN;
    }
    let tau = cmd as f64 / ((tot - xtie) as f64).sqrt() / ((tot - ytie) as f64).sqrt();
    tau.clamp(-1.0, 1.0)
}

/// numpy's comparison signs: 1, -1, or 0 for ties (and NaN).
fn sign(x: f32, y: f32) -> i64 {
    (x > y) as i64 - (x < y) as i64
}

/// Cells by segment, then (with a root) each segment's cells by pseudotime, ties by index;
/// where the segment number goes up by one.
fn order_cells(
    groups: &[u32],
    segs: &[Vec<usize>],
    pseudotime: Option<&[f32]>,
) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&c| groups[c]);
    if let Some(t) = pseudotime {
        // Each segment's cells fill the places its cells hold, in pseudotime order (a cell no
        // segment kept keeps its place, as in scanpy).
        let mut place = vec![usize::MAX; groups.len()];
        for (p, &c) in order.iter().enumerate() {
            place[c] = p;
        }
        for seg in segs {
            let mut places: Vec<usize> = seg.iter().map(|&c| place[c]).collect();
            places.sort_unstable();
            let mut cells: Vec<usize> = places.iter().map(|&p| order[p]).collect();
            cells.sort_by(|&x, &y| t[x].partial_cmp(&t[y]).unwrap_or(std::cmp::Ordering::Equal));
            for (p, c) in places.into_iter().zip(cells) {
                order[p] = c;
            }
        }
    }
    let changepoints = (1..order.len())
        .filter(|&p| groups[order[p]] == groups[order[p - 1]] + 1)
        .collect();
    (order, changepoints)
}

/// `v` at the positions `at`.
fn pick(v: &[f32], at: &[usize]) -> Vec<f32> {
    at.iter().map(|&i| v[i]).collect()
}

/// `a += b`, in f32 as numpy's in-place sums.
fn add(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(x, &y)| *x += y);
}

/// `a -= b`.
fn subtract(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(x, &y)| *x -= y);
}

/// Positions sorted by value (NaN last), ties by position.
fn argsort(v: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| {
        v[i].partial_cmp(&v[j])
            .unwrap_or_else(|| v[i].is_nan().cmp(&v[j].is_nan()))
    });
    idx
}

/// numpy's `argmax`: the first largest, or the first NaN.
fn argmax<T: Copy + PartialOrd>(v: &[T]) -> usize {
    first_extreme(v, |x, best| x > best)
}

/// numpy's `argmin`: the first smallest, or the first NaN.
fn argmin<T: Copy + PartialOrd>(v: &[T]) -> usize {
    first_extreme(v, |x, best| x < best)
}

fn first_extreme<T: Copy + PartialOrd>(v: &[T], better: impl Fn(T, T) -> bool) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        #[allow(clippy::eq_op)]
        if x != x {
            return i;
        }
        if better(x, v[best]) {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// scipy's tau-b on small cases worked by hand: a perfect order, its reverse, and ties.
    #[test]
    fn tau_b_is_scipys() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(tau_b(&x, &x), 1.0);
        assert_eq!(tau_b(&x, &[4.0, 3.0, 2.0, 1.0]), -1.0);
        // x ties one pair, y none: (5 - 0) concordant minus discordant over sqrt(5) sqrt(6).
        let t = tau_b(&[1.0, 1.0, 2.0, 3.0], &[1.0, 2.0, 3.0, 4.0]);
        assert!((t - 5.0 / (5f64.sqrt() * 6f64.sqrt())).abs() < 1e-15, "{t}");
        assert!(tau_b(&[2.0; 4], &x).is_nan());
    }

    /// A Y: three arms of 40 cells from a centre; rooted at the end of arm 0, one branching
    /// puts each arm's far half in a segment of its own, tips at the arms' ends.
    #[test]
    fn one_branching_separates_the_arms_of_a_y() {
        let arms = [(1.0f32, 0.0f32), (-0.5, 0.866), (-0.5, -0.866)];
        let per_arm = 40;
        let mut data = Vec::new();
        for (dx, dy) in arms {
            for s in 0..per_arm {
                let r = 0.05 + s as f32 * 0.025;
                // Component 0 stationary (constant), then the plane.
                data.extend([0.1, dx * r + 0.001 * (s % 3) as f32, dy * r]);
            }
        }
        let n = 3 * per_arm;
        let basis = DenseMatrix::new(n, 3, data).unwrap();
        let evals = [1.0, 0.9, 0.9];
        let component = vec![0u32; n];
        let root = per_arm - 1;
        let t = super::super::pseudotime(&basis, &evals, root, &component).unwrap();
        let params = BranchingParams {
            n_branchings: 1,
            min_group_size: 0.01,
            allow_kendall_tau_shift: true,
        };
        let b = branchings(&basis, &evals, &component, Some((root, &t)), &params).unwrap();
        assert!(b.tips.len() >= 3, "{:?}", b.tips);
        let ends: Vec<usize> = (0..3).map(|a| a * per_arm + per_arm - 1).collect();
        let groups: Vec<u32> = ends.iter().map(|&c| b.groups[c]).collect();
        assert!(groups[0] != groups[1] && groups[1] != groups[2] && groups[0] != groups[2]);
        for (a, &end) in ends.iter().enumerate() {
            // The far half of each arm is with its end.
            for s in per_arm / 2..per_arm {
                assert_eq!(b.groups[a * per_arm + s], b.groups[end], "arm {a} cell {s}");
            }
            assert!(b.tips.iter().flatten().any(|&c| c == end), "arm {a}'s end");
        }
        // The order runs through segments in turn, each by pseudotime; o is a permutation.
        let mut seen = vec![false; n];
        for w in b.order.windows(2) {
            assert!(b.groups[w[0]] <= b.groups[w[1]]);
        }
        b.order.iter().for_each(|&c| seen[c] = true);
        assert!(seen.iter().all(|&s| s));
        // The same twice, on any thread count.
        let again = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(|| branchings(&basis, &evals, &component, Some((root, &t)), &params).unwrap());
        assert_eq!(b, again);
    }

    #[test]
    fn a_segment_too_small_or_a_bad_parameter_is_named() {
        let basis = DenseMatrix::new(8, 2, (0..16).map(|v| v as f32).collect()).unwrap();
        let component = vec![0u32; 8];
        let mut params = BranchingParams {
            n_branchings: 1,
            min_group_size: 0.0,
            allow_kendall_tau_shift: true,
        };
        let e = branchings(&basis, &[1.0, 0.5], &component, None, &params).unwrap_err();
        assert!(e.to_string().contains("too small to split"), "{e}");
        params.min_group_size = -1.0;
        let e = branchings(&basis, &[1.0, 0.5], &component, None, &params).unwrap_err();
        assert!(e.to_string().contains("min_group_size"), "{e}");
    }
}

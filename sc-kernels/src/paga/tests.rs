use super::*;
use crate::graph::tests::graph;

#[test]
fn counts_and_connectivities_are_scanpys_v1_2() {
    // Two triangles (groups 0 and 1) joined by one edge 2-3, and a lone pair (group 2).
    let g = graph(
        8,
        &[
            (0, 1, 1.0),
            (0, 2, 1.0),
            (1, 2, 1.0),
            (3, 4, 1.0),
            (3, 5, 1.0),
            (4, 5, 1.0),
            (2, 3, 1.0),
            (6, 7, 1.0),
        ],
    );
    let groups = [0, 0, 0, 1, 1, 1, 2, 2];
    let c = group_edge_counts(&g, &groups, 3).unwrap();
    assert_eq!(c, vec![6, 1, 0, 1, 6, 0, 0, 0, 2]);
    let conn = connectivities(&c, &[3, 3, 2]);
    // es = 7, 7, 2; expected between 0 and 1: (7 * 3 + 7 * 3) / 7 = 6; both ways 2: 1/3.
    assert!((conn[1] - 2.0 / 6.0).abs() < 1e-15 && (conn[3] - 2.0 / 6.0).abs() < 1e-15);
    assert_eq!((conn[0], conn[2], conn[5], conn[8]), (0.0, 0.0, 0.0, 0.0));
}

#[test]
fn bad_labels_are_named() {
    let g = graph(3, &[(0, 1, 1.0)]);
    assert!(group_edge_counts(&g, &[0, 0], 1).is_err());
    let e = group_edge_counts(&g, &[0, 3, 0], 2).unwrap_err();
    assert!(e.to_string().contains("group 3 of 2"), "{e}");
}

#[test]
fn the_tree_is_scipys_spanning_tree_of_the_inverse() {
    // scipy.sparse.csgraph.minimum_spanning_tree(1 / conn) keeps (0, 1), (1, 3), (0, 2): the
    // tie between (0, 2) and (2, 3) at 0.5 goes to the first in row-major order; group 4 has
    // no edge and stays apart.
    let g = 5;
    let mut conn = vec![0.0; g * g];
    for (i, j, w) in [
        (0, 1, 1.0),
        (1, 3, 0.9),
        (0, 2, 0.5),
        (2, 3, 0.5),
        (0, 3, 0.2),
    ] {
        conn[i * g + j] = w;
        conn[j * g + i] = w;
    }
    let tree = spanning_tree(&conn, g);
    let kept: Vec<(usize, usize, f64)> = (0..g * g)
        .filter(|&k| tree[k] != 0.0)
        .map(|k| (k / g, k % g, tree[k]))
        .collect();
    assert_eq!(kept, vec![(0, 1, 1.0), (0, 2, 0.5), (1, 3, 0.9)]);
    assert!(spanning_tree(&[], 0).is_empty());
}

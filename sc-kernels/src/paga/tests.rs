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

//! The plan's checks of its BP partition against the data's shape.

use super::*;

/// A plan's BP partition is checked before any shard uses it: points, blocks and clusters
/// must fit the data's shape.
#[test]
fn a_bp_partition_that_does_not_fit_is_refused() {
    let shape = [4, 2, 5];
    let ok = read_bp_blocks(vec![0, 1, 1, 0], &[0, 2, 3], &[1, 4, 0], shape).unwrap();
    assert_eq!(ok.clusters, vec![vec![1, 4], vec![0]]);
    let cases = [
        (vec![0, 1, 1], &[0, 2, 3], &[1, 4, 0], "assign 4 points"),
        (vec![0, 2, 1, 0], &[0, 2, 3], &[1, 4, 0], "assign 4 points"),
        (vec![0, 1, 1, 0], &[0, 2, 4], &[1, 4, 0], "do not fit"),
        (vec![0, 1, 1, 0], &[0, 2, 3], &[4, 1, 0], "not a sorted set"),
        (vec![0, 1, 1, 0], &[0, 2, 3], &[1, 5, 0], "not a sorted set"),
    ];
    for (assign, offsets, labels, want) in cases {
        let err = read_bp_blocks(assign, offsets, labels, shape).unwrap_err();
        assert!(err.contains(want), "{err}");
    }
}

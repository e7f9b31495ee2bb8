//! The PPDSparse solver against the reference dual coordinate descent, degenerate problems and
//! determinism.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use xmc::data::{self, Dataset, SparseMatrix, SynthParams};
use xmc::linear::{self, LinearColumn, Loss, Method, SolverParams};

fn bibtex() -> Dataset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Bibtex/train.txt.gz");
    let mut ds = data::read_xc_file(&path).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    ds
}

fn synthetic() -> Dataset {
    let mut ds = data::generate(&SynthParams {
        n: 2000,
        d: 3000,
        l: 200,
        seed: 11,
        ..SynthParams::DEFAULT
    });
    data::l2_normalize_rows(&mut ds.features);
    ds
}

/// The positives of labels `labels` of `ds`, as sorted row lists.
fn positives(ds: &Dataset, labels: &[u32]) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); labels.len()];
    for i in 0..ds.n_points() {
        for &l in ds.label_row(i) {
            if let Some(k) = labels.iter().position(|&x| x == l) {
                out[k].push(i as u32);
            }
        }
    }
    out
}

fn objectives(
    x: &SparseMatrix,
    pos: &[Vec<u32>],
    cols: &[LinearColumn],
    p: &SolverParams,
) -> Vec<f64> {
    pos.iter()
        .zip(cols)
        .map(|(pos, col)| linear::primal_objective(x, pos, col, p))
        .collect()
}

/// PPDSparse's primal objective is within 1% of the reference's, and its reported gap is below
/// the tolerance, for every column.
fn compare(ds: &Dataset, labels: &[u32], loss: Loss, l1: f32) {
    compare_columns(ds, &positives(ds, labels), labels, loss, l1);
}

/// As [`compare`], for explicit positive sets (`names` label the columns in messages).
fn compare_columns(ds: &Dataset, pos: &[Vec<u32>], names: &[u32], loss: Loss, l1: f32) {
    let pos = pos.to_vec();
    let labels = names;
    let base = SolverParams {
        loss,
        l1,
        prune: 0.0,
        tol: 0.001,
        max_iter: 1000,
        ..SolverParams::DEFAULT
    };
    let ppd = linear::train_columns(&ds.features, &pos, &base).unwrap();
    let reference = SolverParams {
        method: Method::Reference,
        ..base
    };
    let refc = linear::train_columns(&ds.features, &pos, &reference).unwrap();
    let fp = objectives(&ds.features, &pos, &ppd, &base);
    let fr = objectives(&ds.features, &pos, &refc, &base);
    for (k, ((a, b), col)) in fp.iter().zip(&fr).zip(&ppd).enumerate() {
        assert!(
            (a - b).abs() <= 0.01 * b.abs(),
            "{loss:?} l1={l1} label {}: PPDSparse {a} vs reference {b}",
            labels[k]
        );
        assert!(
            col.stats.converged,
            "{loss:?} label {}: {:?}",
            labels[k], col.stats
        );
        assert!(col.stats.gap <= f64::from(base.tol), "{:?}", col.stats);
        assert!(col.values.iter().all(|v| v.is_finite()) && col.bias.is_finite());
    }
}

const BIBTEX_LABELS: [u32; 6] = [0, 3, 17, 42, 100, 158];

#[test]
fn squared_hinge_matches_reference() {
    compare(&bibtex(), &BIBTEX_LABELS, Loss::SquaredHinge, 0.0);
    compare(&synthetic(), &[0, 1, 50, 199], Loss::SquaredHinge, 0.01);
}

/// Columns whose positives are a large share of the rows, as at a label tree's internal nodes,
/// take PPDSparse's dense start (every sample active); they must still match the reference.
#[test]
fn dense_positive_columns_match_reference() {
    let ds = bibtex();
    // The points with any label below 40 (about half of Bibtex), and those with any label below
    // 100, as two "child" columns.
    let dense: Vec<Vec<u32>> = [40u32, 100]
        .iter()
        .map(|&cut| {
            (0..ds.n_points() as u32)
                .filter(|&i| ds.label_row(i as usize).iter().any(|&l| l < cut))
                .collect()
        })
        .collect();
    for col in &dense {
        assert!(col.len() * 4 >= ds.n_points(), "{} positives", col.len());
    }
    for loss in [Loss::SquaredHinge, Loss::Hinge, Loss::Logistic] {
        compare_columns(&ds, &dense, &[40, 100], loss, 0.0);
    }
    compare_columns(&ds, &dense, &[40, 100], Loss::SquaredHinge, 0.01);
}

#[test]
fn hinge_matches_reference() {
    compare(&bibtex(), &BIBTEX_LABELS, Loss::Hinge, 0.0);
    compare(&synthetic(), &[0, 7, 150], Loss::Hinge, 0.01);
}

#[test]
fn logistic_matches_reference() {
    compare(&bibtex(), &BIBTEX_LABELS, Loss::Logistic, 0.0);
    compare(&synthetic(), &[2, 90], Loss::Logistic, 0.01);
}

#[test]
fn same_seed_gives_bit_identical_weights_on_any_thread_count() {
    let ds = synthetic();
    let labels: Vec<u32> = (0..40).collect();
    let pos = positives(&ds, &labels);
    let p = SolverParams {
        seed: 5,
        ..SolverParams::DEFAULT
    };
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| linear::train_columns(&ds.features, &pos, &p).unwrap())
    };
    let bits = |cols: &[LinearColumn]| -> Vec<(Vec<u32>, Vec<u32>, u32)> {
        cols.iter()
            .map(|c| {
                (
                    c.indices.clone(),
                    c.values.iter().map(|v| v.to_bits()).collect(),
                    c.bias.to_bits(),
                )
            })
            .collect()
    };
    let a = bits(&run(2));
    assert_eq!(a, bits(&run(2)));
    assert_eq!(a, bits(&run(1)));
}

fn tiny(rows: &[&[(u32, f32)]], d: usize) -> SparseMatrix {
    let mut indptr = vec![0];
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for r in rows {
        for &(j, v) in *r {
            idx.push(j);
            val.push(v);
        }
        indptr.push(idx.len());
    }
    SparseMatrix::new((rows.len(), d), indptr, idx, val)
}

fn check_finite(cols: &[LinearColumn]) {
    for c in cols {
        assert!(c.bias.is_finite());
        assert!(c.values.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn a_label_with_no_positives_gets_a_negative_bias() {
    let ds = synthetic();
    let cols = linear::train_columns(&ds.features, &[vec![]], &SolverParams::DEFAULT).unwrap();
    check_finite(&cols);
    assert!(cols[0].bias < 0.0, "{:?}", cols[0]);
    for loss in [Loss::Hinge, Loss::Logistic] {
        let p = SolverParams {
            loss,
            ..SolverParams::DEFAULT
        };
        check_finite(&linear::train_columns(&ds.features, &[vec![]], &p).unwrap());
    }
}

#[test]
fn labels_with_no_positives_share_the_first_ones_solution_wherever_they_are_trained() {
    let ds = synthetic();
    let p = SolverParams::DEFAULT;
    let pos = positives(&ds, &[3]);
    let all = vec![pos[0].clone(), vec![], vec![], vec![]];
    let cols = linear::train_columns(&ds.features, &all, &p).unwrap();
    assert_eq!(cols[1], cols[2]);
    assert_eq!(cols[1], cols[3]);
    assert!(cols[1].bias < 0.0, "{:?}", cols[1]);
    // Over the rows of the whole problem, columns numbered as in it: the same weights, whether
    // a call holds all of them or only some (as a shard does).
    let rows: Vec<u32> = (0..ds.n_points() as u32).collect();
    let of_rows = |from: usize, to: usize| {
        let number = |j: usize| (from + j) as u64;
        linear::train_columns_of_rows(&ds.features, &rows, &all[from..to], &p, number, 1).unwrap()
    };
    let whole = of_rows(0, 4);
    assert_eq!(whole[1], whole[2]);
    assert_eq!(whole[1], whole[3]);
    // The first empty column is trained as it would be on its own number.
    assert_eq!(of_rows(1, 2)[0], whole[1]);
    assert_eq!(of_rows(2, 4), whole[2..]);
    assert_eq!(of_rows(0, 1)[0], whole[0]);
}

/// Each column's positives among the selected rows `rows`, as positions in `rows`.
fn positions_in(rows: &[u32], all: &[Vec<u32>]) -> Vec<Vec<u32>> {
    all.iter()
        .map(|col| {
            col.iter()
                .filter_map(|r| rows.binary_search(r).ok().map(|k| k as u32))
                .collect()
        })
        .collect()
}

#[test]
fn training_on_selected_rows_is_training_on_those_rows_alone() {
    let ds = synthetic();
    let p = SolverParams::DEFAULT;
    let rows: Vec<u32> = (0..ds.n_points() as u32).filter(|i| i % 3 != 1).collect();
    let pos = positions_in(&rows, &positives(&ds, &[0, 5, 9]));
    let cols =
        linear::train_columns_of_rows(&ds.features, &rows, &pos, &p, |j| j as u64, 0).unwrap();
    // The same rows copied out, over the same feature ids.
    let (mut indptr, mut indices, mut data) = (vec![0usize], Vec::new(), Vec::new());
    for &r in &rows {
        let (idx, val) = data::row_slices(&ds.features, r as usize);
        indices.extend_from_slice(idx);
        data.extend_from_slice(val);
        indptr.push(indices.len());
    }
    let x = SparseMatrix::new((rows.len(), ds.features.cols()), indptr, indices, data);
    let alone = linear::train_columns(&x, &pos, &p).unwrap();
    // Renumbering the features keeps their order, so every step is the same arithmetic.
    assert_eq!(cols, alone);
    let bad = linear::train_columns_of_rows(&ds.features, &[3, 2], &[], &p, |j| j as u64, 0);
    assert!(matches!(bad, Err(linear::SolverError::BadSelection { .. })));
}

#[test]
fn training_on_rows_of_a_packed_store_is_training_on_them_copied_out() {
    let ds = synthetic();
    let p = SolverParams::DEFAULT;
    let n = ds.n_points() as u32;
    let store = linear::PackedRows::of(ds.features.clone()).unwrap();
    assert_eq!(
        (store.rows(), store.cols()),
        (ds.n_points(), ds.features.cols())
    );
    let all = positives(&ds, &[0, 5, 9]);
    // Most of the rows (borrowed from the store) and a few of them (copied over their own
    // columns): either way the columns `train_columns_of_rows` trains on the CSR matrix.
    for rows in [
        (0..n).filter(|i| i % 3 != 1).collect::<Vec<u32>>(),
        (0..n).filter(|i| i % 17 == 4).collect(),
    ] {
        let pos = positions_in(&rows, &all);
        let number = |j: usize| 3 + j as u64;
        let csr = linear::train_columns_of_rows(&ds.features, &rows, &pos, &p, number, 1).unwrap();
        let packed = linear::train_columns_of_packed(&store, &rows, &pos, &p, number, 1).unwrap();
        assert_eq!(packed, csr, "{} of {n} rows", rows.len());
    }
    // A CSC matrix packs to the same rows.
    let from_csc = linear::PackedRows::of(ds.features.to_csc()).unwrap();
    let rows: Vec<u32> = (0..n).collect();
    let pos = positions_in(&rows, &all);
    assert_eq!(
        linear::train_columns_of_packed(&from_csc, &rows, &pos, &p, |j| j as u64, 0).unwrap(),
        linear::train_columns_of_packed(&store, &rows, &pos, &p, |j| j as u64, 0).unwrap()
    );
    let bad = linear::train_columns_of_packed(&store, &[n], &[], &p, |j| j as u64, 0);
    assert!(matches!(bad, Err(linear::SolverError::BadSelection { .. })));
    let mut nan = ds.features.clone();
    nan.data_mut()[0] = f32::NAN;
    assert!(matches!(
        linear::PackedRows::of(nan),
        Err(linear::SolverError::NonFinite { row: 0 })
    ));
}

#[test]
fn a_label_on_every_point_gets_a_positive_bias() {
    let ds = synthetic();
    let all: Vec<u32> = (0..ds.n_points() as u32).collect();
    let cols = linear::train_columns(&ds.features, &[all], &SolverParams::DEFAULT).unwrap();
    check_finite(&cols);
    assert!(cols[0].bias > 0.0, "{:?}", cols[0]);
}

#[test]
fn an_empty_row_is_fine() {
    // Row 1 has no features at all; it still counts as a (negative) example.
    let x = tiny(&[&[(0, 1.0)], &[], &[(1, 1.0)], &[(0, 0.5), (1, 0.5)]], 3);
    let cols = linear::train_columns(&x, &[vec![0, 3], vec![1]], &SolverParams::DEFAULT).unwrap();
    check_finite(&cols);
    // Feature 2 never occurs, so no column may weight it.
    assert!(cols.iter().all(|c| !c.indices.contains(&2)));
    // Label 1's only positive is the empty row, which only the bias scores: the bias rises to
    // score it positive, and the weights fall below zero so that the three other rows, its
    // negatives, still score below zero.
    let c = &cols[1];
    assert!(c.bias > 0.0, "{c:?}");
    assert!(c.values.iter().all(|w| *w <= 0.0), "{c:?}");
    let score = |row: &[(u32, f32)]| {
        let w = |j: u32| {
            c.indices
                .iter()
                .position(|&i| i == j)
                .map_or(0.0, |at| c.values[at])
        };
        c.bias + row.iter().map(|&(j, v)| w(j) * v).sum::<f32>()
    };
    for row in [&[(0, 1.0)][..], &[(1, 1.0)], &[(0, 0.5), (1, 0.5)]] {
        assert!(score(row) < 0.0, "{row:?}: {c:?}");
    }
    // No rows at all: nothing to fit, a zero model.
    let none = tiny(&[], 4);
    let cols = linear::train_columns(&none, &[vec![]], &SolverParams::DEFAULT).unwrap();
    assert_eq!(cols[0].bias, 0.0);
    assert!(cols[0].indices.is_empty());
}

#[test]
fn all_zero_features_leave_only_biases() {
    // Every row is empty (an all-zero feature matrix), and explicit zeros add nothing.
    let empty = tiny(&[&[], &[(1, 0.0)], &[]], 4);
    let cols = linear::train_columns(
        &empty,
        &[vec![0], vec![], vec![0, 1, 2]],
        &SolverParams::DEFAULT,
    )
    .unwrap();
    check_finite(&cols);
    assert!(cols.iter().all(|c| c.values.iter().all(|w| *w == 0.0)));
    // The biases still order the labels by their base rates.
    assert!(
        cols[2].bias > cols[0].bias && cols[0].bias > cols[1].bias,
        "{cols:?}"
    );
}

#[test]
fn duplicate_rows_with_conflicting_labels_are_well_defined() {
    let r: &[(u32, f32)] = &[(0, 1.0), (2, 1.0)];
    let x = tiny(&[r, r, r, r, &[(1, 1.0)]], 3);
    for loss in [Loss::SquaredHinge, Loss::Hinge, Loss::Logistic] {
        let p = SolverParams {
            loss,
            prune: 0.0,
            tol: 1e-5,
            max_iter: 1000,
            ..SolverParams::DEFAULT
        };
        let cols = linear::train_columns(&x, &[vec![0, 1], vec![2, 3]], &p).unwrap();
        check_finite(&cols);
        // The two columns see the same conflicting rows; their scores on them agree.
        let score = |c: &LinearColumn| -> f32 {
            c.bias
                + c.indices
                    .iter()
                    .zip(&c.values)
                    .filter(|(j, _)| **j != 1)
                    .map(|(_, w)| w)
                    .sum::<f32>()
        };
        assert!(
            (score(&cols[0]) - score(&cols[1])).abs() < 0.05,
            "{loss:?}: {cols:?}"
        );
    }
}

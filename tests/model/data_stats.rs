//! `DataStats` on the vendored data sets must reproduce the figures of the data set README.

use std::path::PathBuf;

use xmc::data::{DataStats, read_xc_file};

fn stats(name: &str, split: &str) -> DataStats {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .join(format!("{split}.txt.gz"));
    DataStats::of(&read_xc_file(&path).expect("vendored data reads"))
}

/// (split, N, avg features/pt, avg labels/pt, labels seen, points without labels, top-1% share %).
type Row = (&'static str, usize, f64, f64, usize, usize, f64);

fn check(name: &str, d: usize, l: usize, top: usize, rows: [Row; 2]) {
    for (split, n, fpp, lpp, seen, unlabelled, share) in rows {
        let s = stats(name, split);
        assert_eq!(
            (s.n, s.d, s.l, s.top1pct_labels),
            (n, d, l, top),
            "{name} {split}"
        );
        assert!(
            (s.avg_features_per_point - fpp).abs() < 0.005,
            "{name} {split}"
        );
        assert!(
            (s.avg_labels_per_point - lpp).abs() < 0.0005,
            "{name} {split}"
        );
        assert_eq!((s.labels_seen, s.points_without_labels), (seen, unlabelled));
        assert!(
            (100.0 * s.top1pct_label_share - share).abs() < 0.005,
            "{name} {split}"
        );
    }
}

/// (name, D, L, top-1% label count, per-split rows), from the data set README.
const README: [(&str, usize, usize, usize, [Row; 2]); 2] = [
    (
        "Bibtex",
        1836,
        159,
        2,
        [
            ("train", 4880, 68.49, 2.380, 159, 0, 8.76),
            ("test", 2515, 68.98, 2.444, 159, 0, 8.88),
        ],
    ),
    (
        "Corel5k",
        499,
        374,
        4,
        [
            ("train", 4500, 8.18, 3.522, 371, 0, 21.52),
            ("test", 500, 9.11, 3.526, 263, 0, 22.01),
        ],
    ),
];

#[test]
fn vendored_data_matches_readme() {
    for (name, d, l, top, rows) in README {
        check(name, d, l, top, rows);
    }
    // README: Bibtex has 111.71 average points per label over train + test.
    let all = stats("Bibtex", "train").avg_points_per_label
        + stats("Bibtex", "test").avg_points_per_label;
    assert!((all - 111.71).abs() < 0.005);
}

#[test]
fn stats_serialize_to_json() {
    let s = stats("Corel5k", "test");
    let json = serde_json::to_value(&s).expect("serializes");
    assert_eq!(json["n"], 500);
    assert_eq!(json["labels_seen"], 263);
}

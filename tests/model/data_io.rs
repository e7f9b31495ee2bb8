//! Integration tests of the XC reader: vendored real data, every malformed-input error, and a
//! no-panic property over random bytes.

use std::io::Write;
use std::path::PathBuf;

use proptest::prelude::*;
use xmc::data::{DataError, Dataset, LineProblem, read_xc, read_xc_file};

fn vendored(name: &str, split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .join(format!("{split}.txt.gz"))
}

fn read(text: &str) -> Result<Dataset, DataError> {
    read_xc(text.as_bytes(), "train.txt")
}

fn line_error(text: &str) -> (usize, LineProblem, String) {
    match read(text) {
        Err(e @ DataError::Line { .. }) => {
            let msg = e.to_string();
            match e {
                DataError::Line { line, problem, .. } => (line, problem, msg),
                _ => unreachable!(),
            }
        }
        other => panic!("expected a line error, got {other:?}"),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("encode");
    enc.finish().expect("finish")
}

#[test]
fn vendored_bibtex_and_corel5k_match_their_headers() {
    for (name, split, n, d, l) in [
        ("Bibtex", "train", 4880, 1836, 159),
        ("Bibtex", "test", 2515, 1836, 159),
        ("Corel5k", "train", 4500, 499, 374),
        ("Corel5k", "test", 500, 499, 374),
    ] {
        let ds = read_xc_file(&vendored(name, split)).expect("vendored data reads");
        assert_eq!((ds.n_points(), ds.n_features(), ds.n_labels()), (n, d, l));
        assert!(ds.features.data().iter().all(|&v| v == 1.0));
        for i in 0..ds.n_points() {
            let (idx, _) = ds.feature_row(i);
            assert!(idx.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

#[test]
fn bibtex_label_and_feature_totals() {
    // README: 68.49 features/point and 2.380 labels/point on the training split.
    let ds = read_xc_file(&vendored("Bibtex", "train")).expect("reads");
    let n = ds.n_points() as f64;
    assert!((ds.features.nnz() as f64 / n - 68.49).abs() < 0.005);
    assert!((ds.labels.nnz() as f64 / n - 2.380).abs() < 0.0005);
}

#[test]
fn gzip_is_detected_by_magic_not_extension() {
    let text = "2 4 3\n0,1 0:1 3:2.5\n2 1:1\n";
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data.txt");
    std::fs::write(&path, gzip(text.as_bytes())).expect("write");
    let from_gz = read_xc_file(&path).expect("gzip reads");
    assert_eq!(from_gz, read(text).expect("plain reads"));
}

#[test]
fn bad_feature_token_value() {
    let (line, problem, msg) = line_error("2 20 3\n0 1:1\n1 12:x\n");
    assert_eq!(line, 3);
    assert_eq!(problem, LineProblem::BadFeatureToken("12:x".into()));
    assert_eq!(msg, "train.txt line 3: bad feature token \"12:x\"");
}

#[test]
fn bad_feature_token_missing_id() {
    let (line, problem, _) = line_error("0 :3\n");
    assert_eq!(line, 1);
    assert_eq!(problem, LineProblem::BadFeatureToken(":3".into()));
}

#[test]
fn bad_feature_token_missing_value() {
    let (line, problem, _) = line_error("1 2 1\n0 12:\n");
    assert_eq!(line, 2);
    assert_eq!(problem, LineProblem::BadFeatureToken("12:".into()));
}

#[test]
fn bad_label_token() {
    let (line, problem, _) = line_error("1 5 5\n1,x,3 2:1\n");
    assert_eq!(line, 2);
    assert_eq!(problem, LineProblem::BadLabelToken("x".into()));
    let (_, problem, _) = line_error("1,,3 2:1\n");
    assert_eq!(problem, LineProblem::BadLabelToken("1,,3".into()));
}

#[test]
fn feature_id_at_header_bound() {
    let (line, problem, _) = line_error("2 5 3\n0 4:1\n0 5:1\n");
    assert_eq!(line, 3);
    assert_eq!(problem, LineProblem::FeatureOutOfRange { id: 5, d: 5 });
}

#[test]
fn label_id_at_header_bound() {
    let (line, problem, _) = line_error("1 5 3\n0,3 4:1\n");
    assert_eq!(line, 2);
    assert_eq!(problem, LineProblem::LabelOutOfRange { id: 3, l: 3 });
}

#[test]
fn nan_and_infinite_values() {
    for token in ["1:nan", "1:NaN", "1:inf", "1:-inf", "1:1e40"] {
        let (line, problem, _) = line_error(&format!("0 0:1\n0 {token}\n"));
        assert_eq!(line, 2);
        assert_eq!(problem, LineProblem::NonFiniteValue(token.into()));
    }
}

fn count_mismatch(text: &str) -> (usize, usize) {
    match read(text) {
        Err(DataError::CountMismatch {
            expected, found, ..
        }) => (expected, found),
        other => panic!("expected a count mismatch, got {other:?}"),
    }
}

#[test]
fn header_count_larger_than_lines() {
    assert_eq!(count_mismatch("3 5 3\n0 1:1\n1 2:1\n"), (3, 2));
}

#[test]
fn header_count_smaller_than_lines() {
    assert_eq!(count_mismatch("1 5 3\n0 1:1\n1 2:1\n"), (1, 2));
}

#[test]
fn truncated_gzip() {
    let text = "0 1:1 2:0.5\n".repeat(2000);
    let full = gzip(text.as_bytes());
    let cut = &full[..full.len() / 2];
    match read_xc(cut, "train.txt.gz") {
        Err(DataError::Io { file, .. }) => assert_eq!(file, "train.txt.gz"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn empty_file() {
    assert!(matches!(read(""), Err(DataError::Empty { .. })));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("empty.txt");
    std::fs::write(&path, b"").expect("write");
    match read_xc_file(&path) {
        Err(e @ DataError::Empty { .. }) => assert!(e.to_string().contains("empty.txt")),
        other => panic!("expected an empty-file error, got {other:?}"),
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let err = read_xc_file(std::path::Path::new("/nonexistent/xmc/x.txt")).expect_err("missing");
    assert!(matches!(err, DataError::Io { .. }));
}

#[test]
fn line_numbers_are_exact_across_chunks() {
    // Far more than one parallel sub-chunk (64 KiB) of valid lines before the bad one.
    let mut text = "0,1 3:1 7:0.25\n".repeat(40_000);
    text.push_str("0 3:oops\n");
    text.push_str(&"1 2:1\n".repeat(10));
    let (line, problem, _) = line_error(&text);
    assert_eq!(line, 40_001);
    assert_eq!(problem, LineProblem::BadFeatureToken("3:oops".into()));
}

#[test]
fn points_without_labels_and_empty_lines() {
    let ds = read("3 4 2\n 1:1\n\n1 3:2\n").expect("valid");
    assert_eq!(ds.n_points(), 3);
    assert!(ds.label_row(0).is_empty());
    assert!(ds.label_row(1).is_empty() && ds.feature_row(1).0.is_empty());
    assert_eq!(ds.label_row(2), &[1]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_xc(&bytes[..], "random");
    }

    #[test]
    fn random_xc_like_text_never_panics(
        text in "[0-9 ,:.\\-eEnaifx\n\r\t]{0,400}"
    ) {
        let result = read_xc(text.as_bytes(), "random");
        if let Ok(ds) = result {
            prop_assert_eq!(ds.features.rows(), ds.labels.rows());
        }
    }
}

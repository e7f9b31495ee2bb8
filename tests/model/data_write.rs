//! Round trips through the XC writer: read → write → read gives identical matrices.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;
use xmc::data::{Dataset, SparseMatrix, read_xc, read_xc_file, write_xc, write_xc_file};

fn vendored(name: &str, split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .join(format!("{split}.txt.gz"))
}

fn round_trip(ds: &Dataset) -> Dataset {
    let mut text = Vec::new();
    write_xc(ds, &mut text).expect("write to memory");
    read_xc(&text[..], "round-trip").expect("written text reads back")
}

#[test]
fn vendored_data_round_trips_in_memory_and_through_gzip_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["Bibtex", "Corel5k"] {
        let ds = read_xc_file(&vendored(name, "test")).expect("vendored reads");
        assert_eq!(round_trip(&ds), ds);
        for file in ["out.txt", "out.txt.gz"] {
            let path = dir.path().join(file);
            write_xc_file(&ds, &path).expect("write file");
            assert_eq!(read_xc_file(&path).expect("read file"), ds);
        }
        let raw = std::fs::read(dir.path().join("out.txt.gz")).expect("read bytes");
        assert_eq!(raw[..2], [0x1f, 0x8b]);
    }
}

fn csr(rows: &[BTreeMap<u32, f32>], cols: usize) -> SparseMatrix {
    let mut indptr = vec![0];
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for row in rows {
        idx.extend(row.keys().copied());
        val.extend(row.values().copied());
        indptr.push(idx.len());
    }
    SparseMatrix::new((rows.len(), cols), indptr, idx, val)
}

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(1.0f32),
        any::<f32>().prop_filter("finite, non-zero", |v| v.is_finite() && *v != 0.0),
        (1u32..1000).prop_map(|k| k as f32 / 1000.0),
    ]
}

fn dataset() -> impl Strategy<Value = Dataset> {
    let row = (
        proptest::collection::btree_map(0u32..40, Just(1.0f32), 0..5),
        proptest::collection::btree_map(0u32..60, value(), 0..8),
    );
    proptest::collection::vec(row, 0..30).prop_map(|rows| {
        let (labels, features): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
        Dataset {
            features: csr(&features, 60),
            labels: csr(&labels, 40),
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn synthetic_data_round_trips(ds in dataset()) {
        prop_assert_eq!(round_trip(&ds), ds);
    }
}

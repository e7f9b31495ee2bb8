//! Golden container files, one per format version, pin the byte layout.
//!
//! `container-v1.xmcb` was written by the version-1 writer and `container-v2.xmcb` by the
//! version-2 writer, from the same sections; `container-v3.xmcb` by the version-3 writer, from
//! those sections and one each of the dtypes version 3 added (`u8`, `u16`), and
//! `container-v4.xmcb` by the version-4 writer from the same (version 4 changed what a model
//! stores, not the container). Reading each must keep working for as long as this xmc claims to
//! read its version. The writer must reproduce the file of the version it writes byte for byte;
//! once the format moves on, keep the read test and retire only the byte comparison (as version
//! 1's was when version 2 came, version 2's when version 3 came, and version 3's when 4 came).
//! To regenerate the current version's file after a deliberate change (which breaks every
//! deployed model, so think twice), run with `XMC_BLESS_GOLDEN=1`.

// Helpers outside #[test] functions unwrap too; a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use xmc::bundle::{Bundle, BundleWriter, Dtype, FORMAT_VERSION, OpenOptions};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Meta {
    name: String,
    lambda: f64,
    labels: Vec<String>,
    stats: BTreeMap<String, u64>,
}

fn golden_path(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/golden/container-v{version}.xmcb"))
}

fn meta() -> Meta {
    Meta {
        name: "golden".into(),
        lambda: 0.5,
        labels: vec!["cat".into(), "dog".into(), "ému".into()],
        stats: BTreeMap::from([("n".into(), 3), ("d".into(), 1 << 33)]),
    }
}

const IDS: [u32; 7] = [0, 1, 2, 3, 0xdead_beef, u32::MAX, 42];
const WIDE: [u64; 3] = [0, u64::MAX, 0x0102_0304_0506_0708];
const WEIGHTS: [f32; 5] = [0.0, -1.5, 3.25, f32::MAX, f32::MIN_POSITIVE];
const RAW: &[u8] = b"\x00\x01binary\xff";
const NARROW: [u8; 3] = [0, 7, 255];
const HALF: [u16; 4] = [0, 1, 0x0102, u16::MAX];

/// The sections of the version-3 and version-4 files, as the current writer writes them.
fn golden_bytes() -> Vec<u8> {
    let mut w = BundleWriter::new();
    w.add_json("meta", &meta()).unwrap();
    w.add_u32("tree.0.ids", &IDS).unwrap();
    w.add_u32("empty", &[]).unwrap();
    w.add_u64("wide", &WIDE).unwrap();
    w.add_f32("tree.0.weights", &WEIGHTS).unwrap();
    w.add_bytes("raw", RAW).unwrap();
    w.add_u8("tree.0.narrow", NARROW[..].into()).unwrap();
    w.add_u16("tree.0.half", HALF[..].into()).unwrap();
    w.to_bytes().unwrap()
}

/// Opens the golden file of `version` and checks every section's placement and contents.
fn check_golden(version: u32) {
    let options = OpenOptions {
        verify_checksums: true,
        prefault: false,
        yield_between_steps: false,
    };
    let bundle = Bundle::open(golden_path(version), &options).unwrap();
    assert_eq!(bundle.format_version(), version);
    assert!(bundle.file_len() < 4096);
    let listing: Vec<(&str, Dtype, u64, u64)> = bundle
        .sections()
        .iter()
        .map(|s| (s.name.as_str(), s.dtype, s.offset, s.byte_len))
        .collect();
    // Version 3's two more table entries move every section down by 128 bytes.
    let at = if version >= 3 { 128 } else { 0 };
    let mut expected = vec![
        ("meta", Dtype::Json, 448 + at, 91),
        ("tree.0.ids", Dtype::U32, 576 + at, 28),
        ("empty", Dtype::U32, 640 + at, 0),
        ("wide", Dtype::U64, 640 + at, 24),
        ("tree.0.weights", Dtype::F32, 704 + at, 20),
        ("raw", Dtype::Bytes, 768 + at, 9),
    ];
    if version >= 3 {
        expected.extend([
            ("tree.0.narrow", Dtype::U8, 960, 3),
            ("tree.0.half", Dtype::U16, 1024, 8),
        ]);
        assert_eq!(&*bundle.u8s("tree.0.narrow").unwrap(), &NARROW);
        assert_eq!(&*bundle.u16s("tree.0.half").unwrap(), &HALF);
    }
    assert_eq!(listing, expected);
    assert_eq!(bundle.file_len(), if version >= 3 { 1104 } else { 848 });
    assert_eq!(bundle.json::<Meta>("meta").unwrap(), meta());
    assert_eq!(&*bundle.u32s("tree.0.ids").unwrap(), &IDS);
    assert!(bundle.u32s("empty").unwrap().is_empty());
    assert_eq!(&*bundle.u64s("wide").unwrap(), &WIDE);
    let weights: Vec<u32> = bundle
        .f32s("tree.0.weights")
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(weights, WEIGHTS.map(f32::to_bits));
    assert_eq!(&*bundle.bytes("raw").unwrap(), RAW);
}

#[test]
fn golden_v1_opens_with_exact_contents() {
    check_golden(1);
}

#[test]
fn golden_v2_opens_with_exact_contents() {
    check_golden(2);
}

#[test]
fn golden_v3_opens_with_exact_contents() {
    check_golden(3);
}

#[test]
fn golden_v4_opens_with_exact_contents() {
    if std::env::var_os("XMC_BLESS_GOLDEN").is_some() && FORMAT_VERSION == 4 {
        std::fs::write(golden_path(4), golden_bytes()).unwrap();
    }
    check_golden(4);
}

#[test]
fn golden_header_bytes_are_as_documented() {
    for (version, sections) in [(1u32, 6u32), (2, 6), (3, 8), (4, 8)] {
        let bytes = std::fs::read(golden_path(version)).unwrap();
        assert_eq!(&bytes[0..8], b"XMCB\0\r\n\x1a");
        assert_eq!(&bytes[8..12], &[4, 3, 2, 1]);
        assert_eq!(&bytes[12..16], &version.to_le_bytes());
        assert_eq!(&bytes[16..20], &sections.to_le_bytes());
        assert_eq!(&bytes[24..32], &(bytes.len() as u64).to_le_bytes());
        assert_eq!(&bytes[bytes.len() - 8..], b"\x1a\n\r\0BCMX");
    }
}

#[test]
fn versions_of_one_layout_differ_only_in_the_version_and_its_checksums() {
    for (old, new) in [(1, 2), (3, 4)] {
        let (a, b) = (
            std::fs::read(golden_path(old)).unwrap(),
            std::fs::read(golden_path(new)).unwrap(),
        );
        assert_eq!(a.len(), b.len());
        let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        // The version field, then bytes of the header CRC (60..64) and of the footer's CRC of
        // header and table (len-16..len-12).
        let n = a.len();
        assert!(
            differ
                .iter()
                .all(|&i| i == 12 || (60..64).contains(&i) || (n - 16..n - 12).contains(&i)),
            "v{old} against v{new}: {differ:?}"
        );
        assert!(differ.contains(&12));
    }
}

#[test]
fn current_writer_reproduces_golden_v4() {
    assert_eq!(
        FORMAT_VERSION, 4,
        "add the new version's golden file and test"
    );
    let on_disk = std::fs::read(golden_path(4)).unwrap();
    assert!(
        on_disk == golden_bytes(),
        "the v4 writer no longer reproduces container-v4.xmcb"
    );
}

//! Whatever goes into a bundle comes back out unchanged, zero-copy, and the bytes are
//! deterministic.

// Helpers outside #[test] functions unwrap too; a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use xmc::bundle::{Bundle, BundleWriter, Dtype, FORMAT_VERSION, OpenOptions, Section};

/// One section's content, of any dtype.
#[derive(Clone, Debug)]
enum Content {
    Bytes(Vec<u8>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    Json(BTreeMap<String, i64>),
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Content::Bytes),
        prop::collection::vec(any::<u32>(), 0..100).prop_map(Content::U32),
        prop::collection::vec(any::<u64>(), 0..50).prop_map(Content::U64),
        prop::collection::vec(any::<f32>(), 0..100).prop_map(Content::F32),
        prop::collection::btree_map("[a-z]{1,6}", any::<i64>(), 0..5).prop_map(Content::Json),
    ]
}

fn sections() -> impl Strategy<Value = BTreeMap<String, Content>> {
    prop::collection::btree_map("[!-~]{1,32}", content(), 0..8)
}

fn write(sections: &BTreeMap<String, Content>) -> Vec<u8> {
    let mut w = BundleWriter::new();
    for (name, c) in sections {
        match c {
            Content::Bytes(v) => w.add_bytes(name, v),
            Content::U32(v) => w.add_u32(name, v),
            Content::U64(v) => w.add_u64(name, v),
            Content::F32(v) => w.add_f32(name, v),
            Content::Json(v) => w.add_json(name, v),
        }
        .unwrap();
    }
    w.to_bytes().unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check_contents(bundle: &Bundle, sections: &BTreeMap<String, Content>) {
    let names: Vec<&str> = bundle.section_names().collect();
    let expected: Vec<&str> = sections.keys().map(String::as_str).collect();
    assert_eq!(names, expected);
    for (name, c) in sections {
        match c {
            Content::Bytes(v) => assert_eq!(&*bundle.bytes(name).unwrap(), &v[..]),
            Content::U32(v) => assert_eq!(&*bundle.u32s(name).unwrap(), &v[..]),
            Content::U64(v) => assert_eq!(&*bundle.u64s(name).unwrap(), &v[..]),
            Content::F32(v) => assert_eq!(bits(&bundle.f32s(name).unwrap()), bits(v)),
            Content::Json(v) => {
                assert_eq!(&bundle.json::<BTreeMap<String, i64>>(name).unwrap(), v)
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_sections_round_trip(sections in sections()) {
        let bytes = write(&sections);
        prop_assert_eq!(bytes.len() % 64, 16);
        let bundle = Bundle::from_bytes(&bytes).unwrap();
        bundle.verify_checksums().unwrap();
        prop_assert_eq!(bundle.file_len(), bytes.len() as u64);
        check_contents(&bundle, &sections);
        for info in bundle.sections() {
            prop_assert_eq!(info.offset % 64, 0);
        }
        prop_assert_eq!(write(&sections), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(bundle) = Bundle::from_bytes(&bytes) {
            let _ = bundle.verify_checksums();
        }
    }
}

#[test]
fn same_sections_give_same_bytes() {
    let ids: Vec<u32> = (0..1000).rev().collect();
    let make = || {
        let mut w = BundleWriter::new();
        w.add_u32("ids", &ids).unwrap();
        w.add_json("meta", &BTreeMap::from([("b", 2), ("a", 1)]))
            .unwrap();
        w.to_bytes().unwrap()
    };
    assert_eq!(make(), make());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.xmcb");
    let mut w = BundleWriter::new();
    w.add_u32("ids", &ids).unwrap();
    w.add_json("meta", &BTreeMap::from([("a", 1), ("b", 2)]))
        .unwrap();
    w.write_atomic(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), make());
}

fn open_verified_prefaulted(path: &std::path::Path) -> Bundle {
    let options = OpenOptions {
        verify_checksums: true,
        prefault: true,
        yield_between_steps: false,
    };
    Bundle::open(path, &options).unwrap()
}

#[test]
fn mapped_sections_outlive_the_bundle_and_are_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.xmcb");
    let weights: Vec<f32> = (0..1000).map(|i| i as f32 / 7.0).collect();
    let mut w = BundleWriter::new();
    w.add_bytes("odd", b"abc")
        .unwrap()
        .add_f32("weights", &weights)
        .unwrap();
    w.write_atomic(&path).unwrap();

    let bundle = open_verified_prefaulted(&path);
    let section: Section<f32> = bundle.f32s("weights").unwrap();
    drop(bundle);
    assert_eq!(bits(&section), bits(&weights));
    assert_eq!(section.as_ptr() as usize % 64, 0);
    let shared = section.clone();
    let sum = std::thread::spawn(move || shared.iter().sum::<f32>())
        .join()
        .unwrap();
    assert_eq!(sum, weights.iter().sum::<f32>());
}

/// The resident size, in bytes, of this process's mapping of `path` (`Rss` in
/// `/proc/self/smaps`).
#[cfg(target_os = "linux")]
fn mapped_rss(path: &std::path::Path) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let name = path.to_str()?;
    let mut lines = smaps.lines().skip_while(|l| !l.ends_with(name)).skip(1);
    let rss = lines.find(|l| l.starts_with("Rss:"))?;
    let kb: u64 = rss.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(target_os = "linux")]
#[test]
fn prefaulting_maps_every_page_and_a_plain_open_does_not() {
    let dir = tempfile::tempdir().unwrap();
    // Several prefault steps (1 MiB each) and a partial last one.
    let weights: Vec<f32> = (0..700_000).map(|i| (i % 983) as f32).collect();
    let open = |name: &str, prefault: bool, yield_between_steps: bool| {
        let path = dir.path().join(name);
        let mut w = BundleWriter::new();
        w.add_f32("weights", &weights).unwrap();
        w.write_atomic(&path).unwrap();
        let options = OpenOptions {
            verify_checksums: yield_between_steps,
            prefault,
            yield_between_steps,
        };
        let bundle = Bundle::open(&path, &options).unwrap();
        let rss = mapped_rss(&path).expect("the bundle is mapped");
        (bundle, rss)
    };
    let (plain, plain_rss) = open("plain.xmcb", false, false);
    let (warm, warm_rss) = open("warm.xmcb", true, false);
    let len = warm.file_len();
    assert!(
        warm_rss >= len - 4095,
        "prefaulted: {warm_rss} of {len} bytes resident"
    );
    // The same, in steps that yield the CPU, with the checksums checked in pieces.
    let (stepped, stepped_rss) = open("stepped.xmcb", true, true);
    assert!(stepped.yields_between_steps() && !warm.yields_between_steps());
    assert!(
        stepped_rss >= len - 4095,
        "prefaulted in yielding steps: {stepped_rss} of {len} bytes resident"
    );
    assert_eq!(bits(&stepped.f32s("weights").unwrap()), bits(&weights));
    assert!(
        plain_rss < len / 2,
        "plain open: {plain_rss} of {len} bytes resident"
    );
    assert_eq!(bits(&warm.f32s("weights").unwrap()), bits(&weights));
    drop(plain);
}

#[test]
fn released_pages_read_back_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.xmcb");
    // Several release steps (1 MiB each) and a partial last one.
    let weights: Vec<f32> = (0..700_000).map(|i| (i % 977) as f32 * 0.5).collect();
    let mut w = BundleWriter::new();
    w.add_f32("weights", &weights).unwrap();
    w.write_atomic(&path).unwrap();
    let bundle = open_verified_prefaulted(&path);
    let section: Section<f32> = bundle.f32s("weights").unwrap();
    bundle.release_pages();
    assert_eq!(bits(&section), bits(&weights));
    bundle.verify_checksums().unwrap();
    // A copied bundle has no pages to release; the call changes nothing.
    let copied = Bundle::from_bytes(&std::fs::read(&path).unwrap()).unwrap();
    copied.release_pages();
    assert_eq!(bits(&copied.f32s("weights").unwrap()), bits(&weights));
}

#[test]
fn section_info_reports_sizes_for_inspect() {
    let mut w = BundleWriter::new();
    w.add_u64("counts", &[1, 2, 3]).unwrap();
    let bundle = Bundle::from_bytes(&w.to_bytes().unwrap()).unwrap();
    let info = bundle.section("counts").unwrap();
    assert_eq!(
        (info.dtype, info.byte_len, info.elem_count()),
        (Dtype::U64, 24, 3)
    );
    assert_eq!(bundle.format_version(), FORMAT_VERSION);
    assert_eq!(bundle.file_len(), 64 + 64 + 64 + 16);
}

#[test]
fn empty_bundle_and_empty_sections_round_trip() {
    let bytes = BundleWriter::new().to_bytes().unwrap();
    assert_eq!(bytes.len(), 80);
    assert_eq!(Bundle::from_bytes(&bytes).unwrap().sections().len(), 0);
    let mut w = BundleWriter::new();
    w.add_u32("none", &[])
        .unwrap()
        .add_f32("also_none", &[])
        .unwrap();
    let bundle = Bundle::from_bytes(&w.to_bytes().unwrap()).unwrap();
    bundle.verify_checksums().unwrap();
    assert!(bundle.u32s("none").unwrap().is_empty());
}

/// Sections that later versions added read as empty from a bundle without them, whatever their
/// type, and a section of that name with another type is still refused.
#[test]
fn optional_sections_read_empty_when_absent_and_keep_their_dtype() {
    let mut w = BundleWriter::new();
    w.add_u32("ids", &[1, 2]).unwrap();
    w.add_f32("weights", &[0.5]).unwrap();
    let bundle = Bundle::from_bytes(&w.to_bytes().unwrap()).unwrap();
    assert!(bundle.u32s_or_empty("absent").unwrap().is_empty());
    assert!(bundle.f32s_or_empty("absent").unwrap().is_empty());
    assert_eq!(&*bundle.u32s_or_empty("ids").unwrap(), &[1, 2]);
    assert_eq!(&*bundle.f32s_or_empty("weights").unwrap(), &[0.5]);
    assert!(matches!(
        bundle.u32s_or_empty("weights"),
        Err(xmc::bundle::FormatError::WrongDtype { .. })
    ));
    assert!(matches!(
        bundle.f32s_or_empty("ids"),
        Err(xmc::bundle::FormatError::WrongDtype { .. })
    ));
}

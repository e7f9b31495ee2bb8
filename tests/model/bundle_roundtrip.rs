//! Whatever goes into a bundle comes back out unchanged, zero-copy, and the bytes are
//! deterministic.

// Helpers outside #[test] functions unwrap too; a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::common;

use common::layout::{ENTRY, count, entry_at, get_u64, put_u64, reseal};
use proptest::prelude::*;
use xmc::bundle::{Bundle, BundleWriter, Dtype, FORMAT_VERSION, FormatError, OpenOptions, Section};
use xmc::config::TrainConfig;
use xmc::model::{Model, ModelError, PredictOptions, Prediction, QueryError};
use xmc::text::TextScratch;
use xmc::text::corpus::fit_and_vectorize;
use xmc::train::{self, Quiet, TrainInputs};

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

/// A way to damage a valid bundle. Indexes are taken modulo the bundle's length or section count,
/// and every edit but `Flip` and `Truncate` is resealed (the container checksums recomputed, as
/// the writer would), so that it reaches the structural and section checks behind them.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR one byte anywhere with a non-zero mask.
    Flip { at: usize, mask: u8 },
    /// XOR one byte of the header or the section table with a non-zero mask, resealed.
    FlipStructure { at: usize, mask: u8 },
    /// XOR one byte of a section's contents with a non-zero mask; with `fix_crc` its CRC in the
    /// table is recomputed too, so the edit reaches the checks of whoever reads the section.
    FlipSection {
        i: usize,
        at: usize,
        mask: u8,
        fix_crc: bool,
    },
    /// Keep a strict prefix.
    Truncate { len: usize },
    /// Swap two table entries whole: the same sections, listed in another order.
    SwapEntries { i: usize, j: usize },
    /// Swap where two entries point (offset, length and CRC), keeping their names and dtypes.
    SwapSections { i: usize, j: usize },
    /// Rewrite an entry's offset (`length` false) or length: anything, or near its own.
    Rewrite {
        i: usize,
        length: bool,
        to: u64,
        near: i64,
        anywhere: bool,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let i = any::<usize>();
    prop_oneof![
        1 => (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        1 => (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::FlipStructure { at, mask }),
        3 => (i, any::<usize>(), 1..=255u8, any::<bool>()).prop_map(
            |(i, at, mask, fix_crc)| Mutation::FlipSection { i, at, mask, fix_crc }
        ),
        1 => any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        1 => (i, any::<usize>()).prop_map(|(i, j)| Mutation::SwapEntries { i, j }),
        1 => (i, any::<usize>()).prop_map(|(i, j)| Mutation::SwapSections { i, j }),
        2 => (i, any::<bool>(), any::<u64>(), -600..600i64, any::<bool>()).prop_map(
            |(i, length, to, near, anywhere)| Mutation::Rewrite { i, length, to, near, anywhere }
        ),
    ]
}

/// What a reader must make of a damaged bundle.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Refused: by the open, or at the latest by `verify_checksums`.
    Refused,
    /// The same sections, each with its own contents (a reordered table).
    Same,
    /// Anything but a panic (an edit that may leave a valid bundle, such as a renamed section,
    /// or sections swapped whole with their checksums).
    NoPanic,
}

/// Applies `m` to the valid bundle `b`; `None` when it does not apply (a swap needs two
/// sections).
fn mutate(b: &[u8], m: &Mutation) -> Option<(Vec<u8>, Expect)> {
    let mut c = b.to_vec();
    let n = count(b);
    let table_end = entry_at(n);
    let field = |i: usize, at: usize| entry_at(i % n) + at;
    let expect = match *m {
        Mutation::Flip { at, mask } => {
            c[at % b.len()] ^= mask;
            return Some((c, Expect::Refused));
        }
        Mutation::Truncate { len } => {
            c.truncate(len % b.len());
            return Some((c, Expect::Refused));
        }
        Mutation::FlipSection {
            i,
            at,
            mask,
            fix_crc,
        } => {
            if n == 0 {
                return None;
            }
            let (offset, len) = (get_u64(b, field(i, 40)), get_u64(b, field(i, 48)));
            if len == 0 {
                return None;
            }
            let data = offset as usize..(offset + len) as usize;
            c[data.start + at % data.len()] ^= mask;
            if !fix_crc {
                return Some((c, Expect::Refused));
            }
            let crc = crc32fast::hash(&c[data]);
            c[field(i, 36)..field(i, 40)].copy_from_slice(&crc.to_le_bytes());
            Expect::NoPanic
        }
        Mutation::FlipStructure { at, mask } => {
            c[at % table_end] ^= mask;
            Expect::NoPanic
        }
        Mutation::SwapEntries { i, j } | Mutation::SwapSections { i, j } => {
            let (i, j) = (i % n.max(1), j % n.max(1));
            if i == j {
                return None;
            }
            // The whole entry, or its CRC, offset and length (bytes 36..56).
            let span = match m {
                Mutation::SwapEntries { .. } => 0..ENTRY,
                _ => 36..56,
            };
            for k in span {
                c.swap(entry_at(i) + k, entry_at(j) + k);
            }
            match m {
                Mutation::SwapEntries { .. } => Expect::Same,
                _ => Expect::NoPanic,
            }
        }
        Mutation::Rewrite {
            i,
            length,
            to,
            near,
            anywhere,
        } => {
            if n == 0 {
                return None;
            }
            let at = field(i, if length { 48 } else { 40 });
            let old = get_u64(b, at);
            let new = if anywhere {
                to
            } else {
                old.wrapping_add_signed(near)
            };
            put_u64(&mut c, at, new);
            // A section that holds bytes fills its slot to the next 64-byte boundary, and the
            // slots tile the data area: moved anywhere else it overlaps another section, leaves
            // the data area or is misaligned. Another length changes what its CRC covers.
            let len = get_u64(b, field(i, 48));
            if new == old || (len == 0 && !length) {
                Expect::NoPanic
            } else {
                Expect::Refused
            }
        }
    };
    reseal(&mut c);
    Some((c, expect))
}

/// Opens `b` and checks every section's CRC, reading each section as its dtype.
fn open_checked(b: &[u8]) -> Result<Bundle, FormatError> {
    let bundle = Bundle::from_bytes(b)?;
    bundle.verify_checksums()?;
    Ok(bundle)
}

/// Reads every section of an opened bundle as its dtype (and only as that), which must not panic.
fn read_all(bundle: &Bundle) {
    for info in bundle.sections() {
        let name = info.name.as_str();
        let read = match info.dtype {
            Dtype::Bytes => bundle.bytes(name).map(drop),
            Dtype::U8 => bundle.u8s(name).map(drop),
            Dtype::U16 => bundle.u16s(name).map(drop),
            Dtype::U32 => bundle.u32s(name).map(drop),
            Dtype::U64 => bundle.u64s(name).map(drop),
            Dtype::F32 => bundle.f32s(name).map(drop),
            Dtype::Json => bundle.json::<serde_json::Value>(name).map(drop),
        };
        assert!(
            info.dtype == Dtype::Json || read.is_ok(),
            "{name}: {read:?}"
        );
        assert_eq!(
            bundle.u32s(name).is_ok(),
            info.dtype == Dtype::U32,
            "{name}"
        );
    }
}

/// The same sections by name, with the same dtypes and bytes, in any table order (`a` and `b`
/// open and pass their checksums).
fn same_sections(a: &[u8], b: &[u8]) {
    let by_name = |x: &[u8]| {
        let bundle = open_checked(x).unwrap();
        bundle
            .sections()
            .iter()
            .map(|s| {
                let at = s.offset as usize..(s.offset + s.byte_len) as usize;
                (s.name.clone(), (s.dtype, s.crc32, x[at].to_vec()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(by_name(a), by_name(b));
}

/// The golden containers of every format version.
fn golden_containers() -> Vec<Vec<u8>> {
    (1..=FORMAT_VERSION)
        .map(|v| std::fs::read(golden(&format!("container-v{v}.xmcb"))).unwrap())
        .collect()
}

fn golden(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden")
        .join(name)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Damaged valid bundles, random or golden, are refused or read without a panic; a bundle
    /// whose table lists the same sections in another order reads the same.
    #[test]
    fn mutated_bundles_are_refused_or_read_without_panic(
        sections in sections(),
        golden_pick in any::<prop::sample::Index>(),
        use_golden in any::<bool>(),
        m in mutation(),
    ) {
        let goldens = golden_containers();
        let valid = if use_golden { goldens[golden_pick.index(goldens.len())].clone() } else { write(&sections) };
        let Some((bytes, expect)) = mutate(&valid, &m) else { return Ok(()) };
        let checked = open_checked(&bytes);
        match expect {
            Expect::Refused => prop_assert!(checked.is_err(), "{m:?} passed: {:?}", checked.map(|b| b.sections().to_vec())),
            Expect::Same => same_sections(&bytes, &valid),
            Expect::NoPanic => {}
        }
        if let Ok(bundle) = Bundle::from_bytes(&bytes) {
            read_all(&bundle);
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

/// Valid models to damage: the golden models of every format version (entries, rows, packed
/// rows), and models trained here on the same tiny set with the sections those lack (BP blocks,
/// DEFRAG with FIAT and REFRAG, an ensemble with OVA scorers, label names, a text vectorizer).
static MODELS: LazyLock<Vec<(String, Vec<u8>)>> = LazyLock::new(|| {
    let mut out: Vec<(String, Vec<u8>)> = [
        "model-v1",
        "model-v2",
        "model-v3",
        "model-v3-bf16",
        "model-v4",
        "model-v4-bf16",
    ]
    .iter()
    .map(|n| {
        (
            n.to_string(),
            std::fs::read(golden(&format!("{n}.xmcb"))).unwrap(),
        )
    })
    .collect();
    let mut tiny = xmc::data::read_xc_file(&golden("tiny.txt")).unwrap();
    xmc::data::l2_normalize_rows(&mut tiny.features);
    let names: Vec<String> = (0..tiny.n_labels()).map(|l| format!("label {l}")).collect();
    for overrides in [
        &[
            "max_leaf=2",
            "bp=on",
            "bp_q=2",
            "bp_lambda=0.5",
            "block_model=flat",
        ][..],
        &["max_leaf=2", "defrag=xy", "d0=2", "fiat=on", "refrag=on"],
        &["max_leaf=2", "trees=2", "rerank_model=ova"],
    ] {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let cfg = TrainConfig::load(None, &overrides).unwrap();
        let inputs = TrainInputs {
            label_names: Some(names.clone()),
            ..TrainInputs::default()
        };
        let t = train::train(&tiny, &cfg, inputs, &Quiet).unwrap();
        out.push((overrides.join(" "), t.to_bytes().unwrap()));
    }
    // A text model, from the tf-idf reference corpus with two made-up labels a document.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.jsonl");
    let corpus = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tfidf/corpus.txt"),
    )
    .unwrap();
    let lines: Vec<String> = corpus
        .lines()
        .enumerate()
        .map(|(i, text)| {
            serde_json::json!({"text": text, "labels": [format!("l{}", i % 3), "all"]}).to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let cfg = TrainConfig::load(None, &["max_leaf=2".into()]).unwrap();
    let text = fit_and_vectorize(&path, &cfg.text).unwrap();
    let mut ds = text.corpus.dataset.clone();
    xmc::data::l2_normalize_rows(&mut ds.features);
    let inputs = TrainInputs {
        label_names: Some(text.labels.names().to_vec()),
        text: Some(text.fitted.clone()),
        ..TrainInputs::default()
    };
    let t = train::train(&ds, &cfg, inputs, &Quiet).unwrap();
    out.push(("text".into(), t.to_bytes().unwrap()));
    out
});

/// The full open, as `Model::open` with checksums: every CRC, then every stored index and name.
fn open_full(b: &[u8]) -> Result<Model, ModelError> {
    Model::from_bundle(open_checked(b)?)
}

/// The answers of `model` to a few queries: all its features, ids past them, non-finite values,
/// with the stages on and off; a text query through its vectorizer. Errors are answers too.
fn answers(model: &Model) -> Vec<Result<Prediction, QueryError>> {
    let d = model.meta().n_features as u32;
    let all: Vec<u32> = (0..d).collect();
    let ones = vec![1.0; all.len()];
    let past = [d.saturating_sub(1), d, u32::MAX];
    let odd = [f32::NAN, 1e30, -0.5];
    let mut out = Vec::new();
    for opts in [
        PredictOptions::default(),
        PredictOptions {
            k: 1,
            beam: Some(1),
            rerank: Some(false),
            block_candidates: Some(2),
            ..PredictOptions::default()
        },
    ] {
        out.push(model.predict(&all, &ones, &opts));
        out.push(model.predict(&all[..all.len() / 2], &ones[..all.len() / 2], &opts));
        out.push(model.predict(&past, &[0.5; 3], &opts));
        out.push(model.predict(&all[..3.min(all.len())], &odd[..3.min(all.len())], &opts));
    }
    if let Some(text) = model.text() {
        let (mut scratch, mut idx, mut val) = (TextScratch::default(), Vec::new(), Vec::new());
        text.vectorize(
            "a fast text editor for the desktop",
            &mut scratch,
            &mut idx,
            &mut val,
        );
        out.push(model.predict(&idx, &val, &PredictOptions::default()));
    }
    let _ = model.label_names().map(|n| n.len());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Damaged valid models go through both opens. The full open refuses what the container
    /// must refuse, and reads a reordered table as the same model; the structural open answers
    /// whatever it accepts without a panic, and its `verify()` agrees with the full open.
    #[test]
    fn mutated_models_are_refused_or_answer_without_panic(
        pick in any::<prop::sample::Index>(),
        m in mutation(),
    ) {
        let (name, valid) = &MODELS[pick.index(MODELS.len())];
        let Some((bytes, expect)) = mutate(valid, &m) else { return Ok(()) };
        let full = open_full(&bytes);
        match expect {
            Expect::Refused => prop_assert!(full.is_err(), "{name}: {m:?} opened"),
            Expect::Same => {
                let (got, want) = (full.as_ref().unwrap(), open_full(valid).unwrap());
                prop_assert_eq!(answers(got), answers(&want), "{}: {:?}", name, m);
            }
            Expect::NoPanic => {}
        }
        if let Ok(model) = &full {
            answers(model);
        }
        if let Ok(bundle) = Bundle::from_bytes(&bytes) {
            if let Ok(model) = Model::from_bundle_structure(bundle) {
                answers(&model);
                prop_assert_eq!(
                    model.verify().is_ok(),
                    full.is_ok(),
                    "{}: {:?}: verify() and the full open disagree ({:?})",
                    name,
                    m,
                    full.as_ref().err()
                );
            }
        }
    }
}

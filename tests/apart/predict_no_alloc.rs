//! The request path allocates nothing per query once its scratch space is warm.
//!
//! A counting global allocator tallies allocations made by this thread only, so the test harness's
//! other threads do not disturb the count. A global allocator needs `unsafe`; this test file is
//! the one place outside `bundle/` that has it.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use xmc::bundle::Bundle;
use xmc::config::TrainConfig;
use xmc::data;
use xmc::model::{Model, PredictOptions, Prediction, Scratch};
use xmc::train::{self, Quiet, TrainInputs};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: the allocator forwards every call to `System` unchanged and only bumps a thread-local
// counter besides, so it keeps `System`'s guarantees and adds no invariant of its own.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator, whose contract the caller upholds.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: as for `dealloc` and `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn warm_predictions_do_not_allocate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Corel5k");
    let mut ds = data::read_xc_file(&dir.join("train.txt.gz")).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    let test = data::read_xc_file(&dir.join("test.txt.gz")).unwrap();
    // The DEFRAG members agglomerate, impute and rerank per query, all from the same scratch.
    let defrag = "defrag=xy,refrag=on,fiat=on";
    for trees in ["trees=1", "trees=3", defrag, "trees=2,defrag=x,refrag=on"] {
        let mut sets: Vec<String> = trees.split(',').map(str::to_string).collect();
        sets.push("max_leaf=40".into());
        let cfg = TrainConfig::load(None, &sets).unwrap();
        let trained = train::train(&ds, &cfg, TrainInputs::default(), &Quiet).unwrap();
        let model =
            Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap()).unwrap();
        for early_stop in [true, false] {
            let opts = PredictOptions {
                k: 5,
                early_stop,
                ..PredictOptions::default()
            };
            let mut scratch = Scratch::default();
            let mut out = Prediction::default();
            // Warm up on every query once, so every buffer reaches its largest size.
            for i in 0..test.n_points() {
                let (idx, val) = test.feature_row(i);
                model
                    .predict_into(idx, val, &opts, &mut scratch, &mut out)
                    .unwrap();
            }
            let before = allocs();
            for i in 0..test.n_points() {
                let (idx, val) = test.feature_row(i);
                model
                    .predict_into(idx, val, &opts, &mut scratch, &mut out)
                    .unwrap();
            }
            assert_eq!(
                allocs() - before,
                0,
                "{trees}, early_stop {early_stop}: allocations in steady state"
            );
            assert_eq!(out.labels.len(), 5);
        }
    }
}

#[test]
fn warm_text_queries_do_not_allocate() {
    // The shipped text model, queried as the server queries it: vectorize with the bundle's own
    // vectorizer, then predict, both from warm scratch space.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = Model::open(
        &root.join("models/default.xmcb"),
        &xmc::bundle::OpenOptions::default(),
    )
    .unwrap();
    let view = model.text().expect("the default model speaks text");
    let file = std::fs::File::open(root.join("tests/data/debian-tags-text/test.jsonl.gz")).unwrap();
    let texts: Vec<String> =
        std::io::BufRead::lines(std::io::BufReader::new(flate2::read::GzDecoder::new(file)))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(&l.unwrap()).unwrap();
                v["text"].as_str().unwrap().to_string()
            })
            .collect();
    assert!(texts.len() > 100);
    assert!(
        texts.iter().any(|t| !t.is_ascii()),
        "the sample has non-ASCII text"
    );
    let opts = PredictOptions {
        k: 5,
        ..PredictOptions::default()
    };
    let (mut text_scratch, mut idx, mut val) = (xmc::text::TextScratch::default(), vec![], vec![]);
    let mut scratch = Scratch::default();
    let mut out = Prediction::default();
    let mut run = |texts: &[String]| {
        let mut known = 0;
        for t in texts {
            known += view
                .vectorize(t, &mut text_scratch, &mut idx, &mut val)
                .known_terms;
            model
                .predict_into(&idx, &val, &opts, &mut scratch, &mut out)
                .unwrap();
        }
        known
    };
    let warm = run(&texts);
    let before = allocs();
    let again = run(&texts);
    assert_eq!(allocs() - before, 0, "allocations in steady state");
    assert_eq!(warm, again);
    assert!(again > 0);
    assert_eq!(out.labels.len(), 5);
}

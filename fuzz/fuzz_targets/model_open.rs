//! Any bytes given to `Model::from_bundle` or `Model::from_bundle_structure` give a model or an
//! error, never a panic, and a model that opens answers any query without panicking or looping:
//! what the request path indexes with is checked once, at open, down to the weight entries for a
//! full open; a structural open leaves the entries to the bounded scoring loops.
//!
//! Seed it with the golden models (`tests/data/golden/model-v*.xmcb`: v1's nodes store entries,
//! v2's and v3's rows, v3-bf16's packed entries; see the README of this folder): random bytes almost never make a
//! valid model's JSON metadata, while mutations of a real model reach the tree and chunk checks.
//! As in `bundle_open`, each input is also tried with its container checksums recomputed, so
//! mutated sections get past the header and table CRCs.

#![no_main]

use libfuzzer_sys::fuzz_target;

mod reseal;
use reseal::reseal;
use xmc::bundle::Bundle;
use xmc::model::{Model, PredictOptions};

fuzz_target!(|data: &[u8]| {
    exercise(data);
    if let Some(resealed) = reseal(data) {
        exercise(&resealed);
    }
});

fn exercise(data: &[u8]) {
    // Both opens: the full validation, and the O(nodes + labels) structural one, whose models
    // must answer without panicking or looping whatever their weight entries hold.
    for full in [true, false] {
        let Ok(bundle) = Bundle::from_bytes(data) else {
            return;
        };
        let opened = if full {
            Model::from_bundle(bundle)
        } else {
            Model::from_bundle_structure(bundle)
        };
        if let Ok(model) = opened {
            query(&model, data);
        }
    }
}

fn query(model: &Model, data: &[u8]) {
    let _ = model.label_names();
    let d = model.meta().n_features as u32;
    // A few queries made from the input's tail: ids in and out of range, any values (NaN too).
    let tail = &data[data.len().saturating_sub(48)..];
    let idx: Vec<u32> = tail
        .chunks(4)
        .map(|c| {
            c.iter()
                .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)))
        })
        .map(|x| if d > 0 && x % 4 != 0 { x % d } else { x })
        .collect();
    let val: Vec<f32> = tail
        .chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            f32::from_le_bytes(b)
        })
        .collect();
    for k in [1, 5, 1000] {
        for beam in [None, Some(1), Some(64)] {
            let options = PredictOptions {
                k,
                beam,
                ..PredictOptions::default()
            };
            let _ = model.predict(&idx, &val, &options);
            let _ = model.predict(&idx[..idx.len() / 2], &vec![1.0; idx.len() / 2], &options);
        }
    }
}

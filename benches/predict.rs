//! Per-query prediction cost on real data, one thread.
//!
//! Trains a T = 1 label tree on a data set (`debian-deps` under `XMC_DATASETS`; or set
//! `XMC_BENCH_DATA` to another directory holding `train.txt.gz` and `test.txt.gz`), or opens the
//! bundle in `XMC_BENCH_MODEL`, then prints:
//!
//! 1. per-query latency of `Model::predict_into` (k = 5, the model's beam) over the test split, one
//!    query at a time on this thread: mean, p50, p99, max, in µs;
//! 2. the ways of scoring a node's chunk against a query, on the same (query, node) pairs:
//!    `score_scan` (walk the chunk, look each feature up in a dense copy of the query),
//!    `score_search` (merge the sorted query into the chunk with binary searches), `score_hash`
//!    (look each query feature up in the node's hash table), `score_rank` (look it up in the
//!    node's rank index), and the adaptive `score` the predictor uses (scan for small chunks,
//!    else the node's index), in ns per node. Hash and rank run on copies of the tree's chunks
//!    rebuilt with every node on that index, so both see every sampled node;
//! 3. the two weight layouts: the early-stopping search (k = 5) over the tree as stored (rows
//!    for the nodes where they are smaller) and over a copy with every node on entries,
//!    alternating query by query, so that both see the same machine; per-query mean, p50 and
//!    p99 in µs, and each layout's weight bytes;
//! 4. `predict_into` (k = 5) on cold caches: after a 16 MB or a 64 MB sweep before each query,
//!    over the first 2000 test points; with `XMC_BENCH_COMPARE` set to a second bundle, the two
//!    alternate query by query (an A/B of two bundle layouts in one run).
//!
//! Run with `cargo bench --bench predict`. It prints figures and asserts nothing about time.

mod common;

use std::time::Instant;
use xmc::bundle::{Bundle, OpenOptions};
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions, Prediction, Scratch};
use xmc::train::{self, Quiet, TrainInputs};
use xmc::tree::chunk::{Chunks, IndexChoice, OutSlice, RowChoice};
use xmc::tree::view::{SearchLimits, SearchScratch, TreeArrays};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
}

fn main() -> anyhow::Result<()> {
    let Some(dir) = common::data_dir("predict", "debian-deps") else {
        return Ok(());
    };
    let mut test: Dataset = data::read_xc_file(&dir.join("test.txt.gz"))?;
    data::l2_normalize_rows(&mut test.features);
    let model = match std::env::var("XMC_BENCH_MODEL") {
        Ok(path) => Model::open(path.as_ref(), &OpenOptions::default())?,
        Err(_) => {
            let mut ds = data::read_xc_file(&dir.join("train.txt.gz"))?;
            data::l2_normalize_rows(&mut ds.features);
            let cfg = TrainConfig::load(None, &[])?;
            let start = Instant::now();
            let trained = train::train(&ds, &cfg, TrainInputs::default(), &Quiet)?;
            println!(
                "trained a T=1 tree on {} in {:.1} s",
                dir.display(),
                start.elapsed().as_secs_f64()
            );
            Model::from_bundle(Bundle::from_bytes(&trained.to_bytes()?)?)?
        }
    };

    // 1. End-to-end per-query latency, for top-5 and top-1 queries, with the early-stopping
    // search (the default) and with the level-wise beam search.
    for (k, early_stop) in [(5, true), (5, false), (1, true), (1, false)] {
        let opts = PredictOptions {
            k,
            early_stop,
            ..PredictOptions::default()
        };
        let mut scratch = Scratch::default();
        let mut out = Prediction::default();
        for i in 0..test.n_points().min(200) {
            let (idx, val) = test.feature_row(i);
            model.predict_into(idx, val, &opts, &mut scratch, &mut out)?;
        }
        let mut times = Vec::with_capacity(test.n_points());
        let mut nodes = 0u64;
        for i in 0..test.n_points() {
            let (idx, val) = test.feature_row(i);
            let start = Instant::now();
            model.predict_into(idx, val, &opts, &mut scratch, &mut out)?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
            nodes += u64::from(out.nodes_evaluated);
        }
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "predict_into, k={k}, {}, beam {}: {} queries, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs, {:.1} nodes/query",
            if early_stop {
                "early stop"
            } else {
                "level-wise"
            },
            model.meta().beam,
            times.len(),
            mean,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times[times.len() - 1],
            nodes as f64 / times.len() as f64
        );
    }

    // 2. Chunk scoring strategies on the same (query, node) pairs: every query against a fixed
    // pseudo-random sample of nodes (internal nodes and leaves alike).
    let tree = &model.trees()[0];
    let arrays = tree.borrowed();
    let n_nodes = arrays.n_nodes();
    let sample: Vec<usize> = (0..64u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) as usize % n_nodes)
        .collect();
    let queries: Vec<(Vec<u32>, Vec<f32>)> = (0..test.n_points().min(2000))
        .map(|i| {
            let (idx, val) = test.feature_row(i);
            (idx.to_vec(), val.to_vec())
        })
        .collect();
    let n_outputs: Vec<usize> = (0..n_nodes).map(|i| arrays.outputs(i).len()).collect();
    let all_hash = arrays.chunks.rebuilt(&n_outputs, IndexChoice::Hash)?;
    let all_rank = arrays.chunks.rebuilt(&n_outputs, IndexChoice::Rank)?;
    let mut dense = vec![0f32; model.meta().n_features];
    let mut acc = vec![0f32; 1 << 12];
    let mut sink = 0f32;
    let mut run = |mode: usize| {
        let start = Instant::now();
        let mut pairs = 0u64;
        for (idx, val) in &queries {
            for (&i, &v) in idx.iter().zip(val) {
                dense[i as usize] = v;
            }
            for &node in &sample {
                let outs = arrays.outputs(node).len();
                let a = &mut acc[..outs];
                a.fill(0.0);
                match mode {
                    0 => arrays.chunks.score_scan(node, &dense, a),
                    1 => arrays.chunks.score_search(node, idx, val, a),
                    2 => all_hash.score_hash(node, idx, val, a),
                    3 => all_rank.score_rank(node, idx, val, a),
                    _ => arrays.chunks.score(node, idx, val, &dense, a),
                }
                sink += a.first().copied().unwrap_or(0.0);
                pairs += 1;
            }
            for &i in idx {
                dense[i as usize] = 0.0;
            }
        }
        start.elapsed().as_secs_f64() * 1e9 / pairs as f64
    };
    let (scan, search, hash, rank, adaptive) = (run(0), run(1), run(2), run(3), run(4));
    println!(
        "chunk scoring over {} queries x {} nodes: scan {:.0} ns/node, binary search {:.0} ns/node, hash {:.0} ns/node, rank {:.0} ns/node, adaptive (scan or the node's index) {:.0} ns/node (checksum {sink:.3})",
        queries.len(),
        sample.len(),
        scan,
        search,
        hash,
        rank,
        adaptive
    );

    // 3. Rows against entries: the same search over the stored layout and over all entries.
    // The entries' outputs at the narrowest width, as a bundle would store them.
    let all_entries =
        arrays
            .chunks
            .rebuilt_as(&n_outputs, IndexChoice::Smaller, RowChoice::Entries)?;
    let entries = TreeArrays {
        node_info: arrays.node_info,
        out_start: arrays.out_start,
        out_ids: arrays.out_ids,
        out_bias: arrays.out_bias,
        chunks: all_entries.narrowed(),
    };
    let entries = entries.borrowed();
    let weight_bytes = |c: &Chunks<&[u32], &[f32], OutSlice<'_>>| {
        let rows = c.row_weight.len() + c.row_packed.len();
        4 * (c.entry_start.len() + c.entry_weight.len() + c.entry_packed.len() + rows)
            + c.entry_out.byte_len()
    };
    let row_nodes = (0..n_nodes).filter(|&i| arrays.chunks.has_rows(i)).count();
    let limits = SearchLimits {
        k: 5,
        keep: 0,
        beam: model.meta().beam,
        deadline: None,
    };
    let loss = model.meta().loss;
    let mut scratch = SearchScratch::default();
    let (mut t_rows, mut t_entries) = (Vec::new(), Vec::new());
    for round in 0..2 {
        for (idx, val) in &queries {
            for (&i, &v) in idx.iter().zip(val) {
                dense[i as usize] = v;
            }
            for (layout, times) in [(&arrays, &mut t_rows), (&entries, &mut t_entries)] {
                let start = Instant::now();
                layout.early_stop_search(idx, val, &dense, loss, &limits, &mut scratch);
                if round > 0 {
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
                sink += scratch.candidates.first().map_or(0.0, |c| c.score);
            }
            for &i in idx {
                dense[i as usize] = 0.0;
            }
        }
    }
    for (name, times, bytes) in [
        (
            "stored (rows where smaller)",
            &mut t_rows,
            weight_bytes(&arrays.chunks),
        ),
        ("all entries", &mut t_entries, weight_bytes(&entries.chunks)),
    ] {
        times.sort_by(f64::total_cmp);
        println!(
            "search over {name}: {} queries, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs; weights {:.1} MB",
            times.len(),
            times.iter().sum::<f64>() / times.len() as f64,
            percentile(times, 0.5),
            percentile(times, 0.99),
            bytes as f64 / 1e6
        );
    }
    println!("{row_nodes} of {n_nodes} nodes store rows (checksum {sink:.3})");

    // 4. Cold caches: a server's other work (HTTP, JSON, the load generator) evicts the model
    // between two requests, and `predict_into` in a loop (1.) never sees that. Here a sweep over
    // a buffer of 16 or 64 MB (written, one byte per cache line) runs before each query. With
    // `XMC_BENCH_COMPARE` naming a second bundle, the two models alternate query by query.
    let other = match std::env::var("XMC_BENCH_COMPARE") {
        Ok(path) => Some(Model::open(path.as_ref(), &OpenOptions::default())?),
        Err(_) => None,
    };
    let mut models = vec![("model", &model)];
    if let Some(other) = &other {
        models.push(("compared", other));
    }
    let opts = PredictOptions {
        k: 5,
        ..PredictOptions::default()
    };
    let mut scratch = Scratch::default();
    let mut out = Prediction::default();
    for evict_mb in [16usize, 64] {
        let mut sweep = vec![0u8; evict_mb << 20];
        let mut times = vec![Vec::new(); models.len()];
        for i in 0..test.n_points().min(2000) {
            let (idx, val) = test.feature_row(i);
            for ((_, m), t) in models.iter().zip(&mut times) {
                let mut x = 0u8;
                for b in sweep.iter_mut().step_by(64) {
                    *b = b.wrapping_add(1);
                    x ^= *b;
                }
                std::hint::black_box(x);
                let start = Instant::now();
                m.predict_into(idx, val, &opts, &mut scratch, &mut out)?;
                t.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        for ((name, m), t) in models.iter().zip(&mut times) {
            t.sort_by(f64::total_cmp);
            println!(
                "predict_into after a {evict_mb} MB sweep, {name} ({}, {:.1} MB): {} queries, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
                m.meta().name,
                m.bundle().file_len() as f64 / 1e6,
                t.len(),
                t.iter().sum::<f64>() / t.len() as f64,
                percentile(t, 0.5),
                percentile(t, 0.99),
            );
        }
    }
    Ok(())
}

//! The flat model's scorers against one label tree, per query, one thread, in process.
//!
//! Opens a flat model (`XMC_BENCH_FLAT`) and a T = 1 tree (`XMC_BENCH_TREE`), bundles trained on
//! the same data, or trains both with the defaults (`model = "flat"`, and the default tree) on
//! `train.txt.gz` of the data set (`XMC_BENCH_SET`, default `citeulike-t`, under
//! `XMC_DATASETS`; or `XMC_BENCH_DATA`, a directory). The queries are its test split
//! (`test.txt.gz`, or `test.jsonl.gz` through the models' text vectorizer), the first
//! `XMC_BENCH_QUERIES` of them (default all). Each query runs, in rotating order, through:
//!
//! - `scan`: the flat model scored by the pass over every label (`Model::set_flat_scan`);
//! - `post`: the flat model's default scorer (`Model::set_flat_unpruned`): the query's postings
//!   and the bias order, or for a query with many postings the scan with its selection pass;
//! - `blk S:L`: the flat model scored through a block index of `2^S` labels a block, block
//!   records for features of at least `L` entries, one per shape in `XMC_BENCH_SHAPES`
//!   (comma-separated `S:L`, default `6:64`, `none` for none), built in memory
//!   (`Model::build_flat_blocks`);
//! - `tree`: the label tree (k = 5, its beam, the early-stopping search).
//!
//! over `XMC_BENCH_PASSES` passes (default 3) after one unmeasured pass. It prints, per scorer,
//! the labels scored, the weight entries (postings) read, the block records read and the blocks
//! scored per query, and the mean, p50 and p99 latency of `Model::predict_into` in µs, then on
//! how many queries each flat scorer's labels and score bits differ from the scan's.
//!
//! **BP.** With `XMC_BENCH_BP=MODEL.xmcb` (a BP model with flat blocks, `block_model = "flat"`)
//! it runs that model on the set's test split with its flat blocks searched by the scan and by
//! the selection pass (`Model::set_flat_scan`), interleaved, and prints both latencies and on
//! how many queries the answers differ.
//!
//! **Scaling.** With `XMC_BENCH_SCALE` (comma-separated directories, each holding `flat.xmcb`,
//! `tree.xmcb` and a test split, e.g. synthetic sets from `xmc data synth` at growing label
//! counts) it runs the scan, `post` and the tree on each set in turn, prints a table of every
//! scorer's work and latency by label count, and with `XMC_BENCH_PLOT=FILE.png` draws them
//! against the label count.
//!
//! Run with `cargo bench --bench flat`. It prints figures and asserts nothing about time.

mod common;

use std::time::Instant;
use xmc::bundle::OpenOptions;
use xmc::cli::train::load_for_model;
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions, Prediction, Scratch};
use xmc::train::{self, Quiet, TrainInputs};
use xmc::tree::view::{SearchLimits, SearchScratch};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
}

fn env_usize(name: &str) -> anyhow::Result<Option<usize>> {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .map_err(|_| anyhow::anyhow!("{name}: not a count: {v:?}"))
        })
        .transpose()
}

/// The bundle in `var`, or a model trained on `train` with `sets` and written to a temporary
/// file; returns its path.
fn bundle_path(
    var: &str,
    train: &dyn Fn() -> anyhow::Result<Dataset>,
    sets: &[&str],
) -> anyhow::Result<std::path::PathBuf> {
    if let Ok(path) = std::env::var(var) {
        return Ok(path.into());
    }
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let cfg = TrainConfig::load(None, &sets)?;
    let start = Instant::now();
    let trained = train::train(&train()?, &cfg, TrainInputs::default(), &Quiet)?;
    println!("trained {sets:?} in {:.1} s", start.elapsed().as_secs_f64());
    let path =
        std::env::temp_dir().join(format!("xmc-bench-flat-{}-{var}.xmcb", std::process::id()));
    std::fs::write(&path, trained.to_bytes()?)?;
    Ok(path)
}

/// The block shapes to compare: `XMC_BENCH_SHAPES` (`S:L,...`), or none (the stored index).
fn shapes() -> anyhow::Result<Vec<(u32, u32)>> {
    let Ok(v) = std::env::var("XMC_BENCH_SHAPES") else {
        return Ok(Vec::new());
    };
    v.split(',')
        .map(|p| {
            let (a, b) = p
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("XMC_BENCH_SHAPES: not S:L: {p:?}"))?;
            Ok((a.trim().parse()?, b.trim().parse()?))
        })
        .collect()
}

/// Per-query work of one scorer, summed.
#[derive(Default, Clone, Copy)]
struct Work {
    labels: u64,
    postings: u64,
    records: u64,
    blocks: u64,
}

fn main() -> anyhow::Result<()> {
    if let Ok(dirs) = std::env::var("XMC_BENCH_SCALE") {
        return scale(&dirs);
    }
    let set = std::env::var("XMC_BENCH_SET").unwrap_or_else(|_| "citeulike-t".into());
    let Some(dir) = common::data_dir("flat", &set) else {
        return Ok(());
    };
    let train = || -> anyhow::Result<Dataset> {
        let mut ds = data::read_xc_file(&dir.join("train.txt.gz"))?;
        data::l2_normalize_rows(&mut ds.features);
        Ok(ds)
    };
    let open = |p: &std::path::Path| Model::open(p, &OpenOptions::default());
    if let Some(bp) = std::env::var_os("XMC_BENCH_BP") {
        return bp_blocks(open(bp.as_ref())?, &dir);
    }
    let flat_path = bundle_path("XMC_BENCH_FLAT", &train, &["model=flat"])?;
    let mut flat = open(&flat_path)?;
    let tree = open(&bundle_path("XMC_BENCH_TREE", &train, &[])?)?;
    // One copy of the flat model per block shape (a memory map each).
    let mut blk: Vec<(String, Model)> = Vec::new();
    let none = std::env::var("XMC_BENCH_SHAPES").is_ok_and(|v| v == "none");
    let mut shapes = if none { Vec::new() } else { shapes()? };
    if shapes.is_empty() && !none {
        shapes.push((
            xmc::tree::flat::DEFAULT_SHIFT,
            xmc::tree::flat::DEFAULT_LONG,
        ));
    }
    for &(s, l) in &shapes {
        let mut m = open(&flat_path)?;
        let start = Instant::now();
        let bytes = m.build_flat_blocks(s, l);
        println!(
            "blk {s}:{l}: index {:.1} MB, built in {:.2} s",
            bytes as f64 / 1e6,
            start.elapsed().as_secs_f64()
        );
        blk.push((format!("blk {s}:{l}"), m));
    }
    let test = test_split(&dir, &flat)?;
    let n = env_usize("XMC_BENCH_QUERIES")?
        .unwrap_or(usize::MAX)
        .min(test.n_points());
    let passes = env_usize("XMC_BENCH_PASSES")?.unwrap_or(3).max(1);
    println!(
        "{set}: {n} queries, {} labels, flat model {} MB, tree {} MB, {passes} passes",
        flat.meta().n_labels,
        flat.bundle().file_len() / 1_000_000,
        tree.bundle().file_len() / 1_000_000,
    );
    compare(&mut flat, &tree, &blk, &test, n, passes)?;
    if std::env::var_os("XMC_BENCH_PERMUTE").is_some() {
        arrays_level(&flat, &tree, &blk, &test, n, passes)?;
    }
    Ok(())
}

/// The test split of the data set in `dir` (`test.txt.gz`, or `test.jsonl.gz` through the
/// model's text vectorizer).
fn test_split(dir: &std::path::Path, model: &Model) -> anyhow::Result<Dataset> {
    let test_path = ["test.txt.gz", "test.jsonl.gz"]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .ok_or_else(|| anyhow::anyhow!("{} has no test split", dir.display()))?;
    load_for_model(&test_path, None, model, false)
}

/// One scorer's figures: per query, the labels scored and the postings read (none counted
/// for the tree), and the latency in µs.
struct Row {
    name: String,
    labels: f64,
    postings: Option<f64>,
    mean: f64,
    p50: f64,
    p99: f64,
}

/// Runs the first `n` queries of `test` through the scan, the default flat scorer, the block
/// scorers of `blk` and the tree, interleaved, and prints and returns each scorer's figures
/// (the tree last).
fn compare(
    flat: &mut Model,
    tree: &Model,
    blk: &[(String, Model)],
    test: &Dataset,
    n: usize,
    passes: usize,
) -> anyhow::Result<Vec<Row>> {
    // The work of each flat scorer per query, counted outside the timed runs: the scan reads
    // the postings and scores every label.
    let ftree = &flat.trees()[0];
    let order = flat.flat_order(0);
    let mut s = SearchScratch::default();
    let limits = SearchLimits {
        k: 5,
        keep: 0,
        beam: usize::MAX,
        deadline: None,
    };
    let loss = flat.meta().loss;
    let n_scorers = 3 + blk.len();
    let mut work = vec![Work::default(); n_scorers];
    for i in 0..n {
        let (idx, val) = test.feature_row(i);
        let all = ftree.chunks.count_postings(0, idx, val) as u64;
        work[0].postings += all;
        work[0].labels += flat.meta().n_labels as u64;
        let st = ftree.flat_search(order, idx, val, &[], loss, &limits, &mut s);
        work[1].postings += u64::from(st.postings);
        work[1].labels += u64::from(st.outputs_evaluated);
        for (j, (_, m)) in blk.iter().enumerate() {
            let Some(b) = m.flat_blocks(0) else { continue };
            let st = ftree.flat_prune(b, order, idx, val, &[], loss, &limits, &mut s);
            let ps = s.prune_stats();
            let w = &mut work[2 + j];
            w.postings += u64::from(st.postings);
            w.labels += u64::from(st.outputs_evaluated);
            w.records += u64::from(ps.records);
            w.blocks += u64::from(ps.blocks);
        }
    }

    let opts = PredictOptions::default();
    let mut names = vec!["scan".to_string(), "post".to_string()];
    names.extend(blk.iter().map(|(name, _)| name.clone()));
    names.push("tree".into());
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); n_scorers];
    let mut scratch = Scratch::default();
    let mut out: Vec<Prediction> = vec![Prediction::default(); n_scorers];
    let mut differ = vec![0usize; n_scorers];
    flat.set_flat_unpruned(true);
    for pass in 0..=passes {
        for i in 0..n {
            let (idx, val) = test.feature_row(i);
            for r in 0..n_scorers {
                let which = (i + r) % n_scorers;
                let m = match which {
                    0 | 1 => {
                        flat.set_flat_scan(which == 0);
                        &*flat
                    }
                    w if w == n_scorers - 1 => tree,
                    w => &blk[w - 2].1,
                };
                let start = Instant::now();
                m.predict_into(idx, val, &opts, &mut scratch, &mut out[which])?;
                let t = start.elapsed().as_secs_f64() * 1e6;
                if pass > 0 {
                    times[which].push(t);
                }
            }
            if pass == 0 {
                work[n_scorers - 1].labels += u64::from(out[n_scorers - 1].outputs_evaluated);
                let bits =
                    |p: &Prediction| p.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                for w in 1..n_scorers - 1 {
                    if out[0].labels != out[w].labels || bits(&out[0]) != bits(&out[w]) {
                        differ[w] += 1;
                    }
                }
            }
        }
    }
    println!(
        "scorer        labels/query  postings/query  records/query  blocks/query  mean_us  p50_us  p99_us"
    );
    let mut rows = Vec::with_capacity(n_scorers);
    for (w, name) in names.iter().enumerate() {
        let t = &mut times[w];
        t.sort_by(f64::total_cmp);
        let per = |v: u64| v as f64 / n as f64;
        let k = work[w];
        // The tree's labels are the classifiers it evaluated; its entries are not counted.
        let is_tree = w == n_scorers - 1;
        let dash = |v: u64| {
            if is_tree {
                "-".to_string()
            } else {
                format!("{:.0}", per(v))
            }
        };
        let row = Row {
            name: name.clone(),
            labels: per(k.labels),
            postings: (!is_tree).then(|| per(k.postings)),
            mean: mean_of(t),
            p50: percentile(t, 0.5),
            p99: percentile(t, 0.99),
        };
        println!(
            "{name:12}  {:>12.0}  {:>14}  {:>13}  {:>12}  {:7.1}  {:6.1}  {:6.1}",
            row.labels,
            dash(k.postings),
            dash(k.records),
            dash(k.blocks),
            row.mean,
            row.p50,
            row.p99,
        );
        rows.push(row);
    }
    let tree_t = &times[n_scorers - 1];
    for w in 1..n_scorers - 1 {
        println!(
            "{} / tree: mean {:.2}x, p99 {:.2}x; / scan: mean {:.2}x; answers differ from the scan's on {} of {n} queries",
            names[w],
            mean_of(&times[w]) / mean_of(tree_t),
            percentile(&times[w], 0.99) / percentile(tree_t, 0.99),
            mean_of(&times[w]) / mean_of(&times[0]),
            differ[w],
        );
    }
    Ok(rows)
}

/// With `XMC_BENCH_PERMUTE`: the scorers called on the tree arrays directly (no model around
/// them), interleaved, with the flat model's outputs also put in the label tree's leaf order
/// (`TreeArrays::flat_permuted`), so that labels the tree clusters together share blocks.
fn arrays_level(
    flat: &Model,
    tree: &Model,
    blk: &[(String, Model)],
    test: &Dataset,
    n: usize,
    passes: usize,
) -> anyhow::Result<()> {
    let ftree = &flat.trees()[0];
    let ttree = &tree.trees()[0];
    // The tree's labels in leaf order, as positions of the flat model's outputs.
    let pos: std::collections::HashMap<u32, u32> = ftree
        .out_ids
        .iter()
        .enumerate()
        .map(|(i, &l)| (l, i as u32))
        .collect();
    let mut perm: Vec<u32> = Vec::new();
    let mut seen = vec![false; ftree.out_ids.len()];
    for node in 0..ttree.n_nodes() {
        if ttree.is_leaf(node) {
            for l in ttree.outputs(node) {
                if let Some(&p) = pos.get(l) {
                    if !std::mem::replace(&mut seen[p as usize], true) {
                        perm.push(p);
                    }
                }
            }
        }
    }
    perm.extend((0..seen.len() as u32).filter(|&p| !seen[p as usize]));
    let permuted = ftree
        .flat_permuted(&perm)
        .ok_or_else(|| anyhow::anyhow!("the flat model cannot be permuted"))?;
    let mut names = vec!["scan@a".to_string()];
    let mut indexes = Vec::new();
    for (name, m) in blk {
        let Some(b) = m.flat_blocks(0) else { continue };
        let (shift, long) = (b.shape[0], b.shape[1]);
        let pb = permuted
            .flat_blocks(shift, long)
            .ok_or_else(|| anyhow::anyhow!("no block index for the permuted model"))?;
        println!(
            "perm {shift}:{long}: index {:.1} MB",
            pb.byte_len() as f64 / 1e6
        );
        names.push(format!("{name}@a"));
        names.push(format!("perm {shift}:{long}@a"));
        indexes.push((b, pb));
    }
    names.push("tree@a".into());
    let s_n = names.len();
    let flat_limits = SearchLimits {
        k: 5,
        keep: 0,
        beam: usize::MAX,
        deadline: None,
    };
    let tree_limits = SearchLimits {
        k: 5,
        keep: 0,
        beam: tree.meta().beam,
        deadline: None,
    };
    let (floss, tloss) = (flat.meta().loss, tree.meta().loss);
    let mut dense = vec![0f32; flat.meta().n_features.max(tree.meta().n_features)];
    let mut s = SearchScratch::default();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); s_n];
    let mut work = vec![Work::default(); s_n];
    let mut differ = vec![0usize; s_n];
    let mut want = Vec::new();
    let ranked = |s: &SearchScratch| {
        let mut c = s.candidates.clone();
        c.sort_by(xmc::tree::view::Candidate::ranking);
        c.iter()
            .map(|c| (c.label, c.score.to_bits()))
            .collect::<Vec<_>>()
    };
    for pass in 0..=passes {
        for i in 0..n {
            let (idx, val) = test.feature_row(i);
            for r in 0..s_n {
                let which = (i + r) % s_n;
                let start = Instant::now();
                for (&j, &v) in idx.iter().zip(val) {
                    if let Some(d) = dense.get_mut(j as usize) {
                        *d = v;
                    }
                }
                let st = if which == 0 {
                    ftree.early_stop_search(idx, val, &dense, floss, &flat_limits, &mut s)
                } else if which == s_n - 1 {
                    ttree.early_stop_search(idx, val, &dense, tloss, &tree_limits, &mut s)
                } else {
                    let (b, pb) = &indexes[(which - 1) / 2];
                    if which % 2 == 1 {
                        ftree.flat_prune(b, &[], idx, val, &dense, floss, &flat_limits, &mut s)
                    } else {
                        permuted.flat_prune(pb, &[], idx, val, &dense, floss, &flat_limits, &mut s)
                    }
                };
                for &j in idx {
                    if let Some(d) = dense.get_mut(j as usize) {
                        *d = 0.0;
                    }
                }
                let t = start.elapsed().as_secs_f64() * 1e6;
                if pass > 0 {
                    times[which].push(t);
                } else {
                    let ps = s.prune_stats();
                    let w = &mut work[which];
                    w.labels += u64::from(st.outputs_evaluated);
                    if which != 0 && which != s_n - 1 {
                        w.postings += u64::from(st.postings);
                        w.records += u64::from(ps.records);
                        w.blocks += u64::from(ps.blocks);
                    }
                }
                if pass == 0 && which == 0 {
                    want = ranked(&s);
                }
            }
            if pass == 0 {
                // Compare every flat scorer with the scan, each run again after it.
                for w in 1..s_n - 1 {
                    let (b, pb) = &indexes[(w - 1) / 2];
                    if w % 2 == 1 {
                        ftree.flat_prune(b, &[], idx, val, &dense, floss, &flat_limits, &mut s);
                    } else {
                        permuted.flat_prune(pb, &[], idx, val, &dense, floss, &flat_limits, &mut s);
                    }
                    if ranked(&s) != want {
                        differ[w] += 1;
                    }
                }
            }
        }
    }
    println!(
        "arrays level (no model around the scorers; the flat scorers' labels are the scan's):"
    );
    println!(
        "scorer          labels/query  postings/query  records/query  blocks/query  mean_us  p50_us  p99_us"
    );
    for (w, name) in names.iter().enumerate() {
        let t = &mut times[w];
        t.sort_by(f64::total_cmp);
        let per = |v: u64| format!("{:.0}", v as f64 / n as f64);
        let k = work[w];
        println!(
            "{name:14}  {:>12}  {:>14}  {:>13}  {:>12}  {:7.1}  {:6.1}  {:6.1}",
            per(k.labels),
            per(k.postings),
            per(k.records),
            per(k.blocks),
            mean_of(t),
            percentile(t, 0.5),
            percentile(t, 0.99),
        );
    }
    let tree_t = &times[s_n - 1];
    for w in 1..s_n - 1 {
        println!(
            "{} / tree@a: mean {:.2}x, p99 {:.2}x; answers differ from the scan's on {} of {n} queries",
            names[w],
            mean_of(&times[w]) / mean_of(tree_t),
            percentile(&times[w], 0.99) / percentile(tree_t, 0.99),
            differ[w],
        );
    }
    Ok(())
}

fn mean_of(t: &[f64]) -> f64 {
    t.iter().sum::<f64>() / t.len() as f64
}

/// With `XMC_BENCH_SCALE`: the scan, the default flat scorer and the tree on each data set of
/// the list (comma-separated directories, each holding `flat.xmcb`, `tree.xmcb` and a test
/// split), one set after the other in this process, then a table of the figures by label count
/// and, with `XMC_BENCH_PLOT` (a path), a PNG of them against the label count.
fn scale(dirs: &str) -> anyhow::Result<()> {
    let passes = env_usize("XMC_BENCH_PASSES")?.unwrap_or(3).max(1);
    let mut points: Vec<(usize, Vec<Row>)> = Vec::new();
    for dir in dirs.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let dir = std::path::Path::new(dir);
        let open = |f: &str| {
            let p = dir.join(f);
            Model::open(&p, &OpenOptions::default())
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        };
        let (mut flat, tree) = (open("flat.xmcb")?, open("tree.xmcb")?);
        let test = test_split(dir, &flat)?;
        let n = env_usize("XMC_BENCH_QUERIES")?
            .unwrap_or(usize::MAX)
            .min(test.n_points());
        let l = flat.meta().n_labels;
        println!(
            "{}: {n} queries, {l} labels, flat model {} MB, tree {} MB, {passes} passes",
            dir.display(),
            flat.bundle().file_len() / 1_000_000,
            tree.bundle().file_len() / 1_000_000,
        );
        let rows = compare(&mut flat, &tree, &[], &test, n, passes)?;
        points.push((l, rows));
    }
    points.sort_by_key(|p| p.0);
    println!();
    println!(
        "| labels | scorer | labels scored / query | postings / query | mean µs | p50 µs | p99 µs | mean / tree | p99 / tree |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (l, rows) in &points {
        let Some(tree) = rows.last() else { continue };
        for r in rows {
            println!(
                "| {l} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.2}× | {:.2}× |",
                r.name,
                r.labels,
                r.postings.map_or("–".into(), |p| format!("{p:.0}")),
                r.mean,
                r.p50,
                r.p99,
                r.mean / tree.mean,
                r.p99 / tree.p99,
            );
        }
    }
    if let Some(path) = std::env::var_os("XMC_BENCH_PLOT") {
        let path = std::path::PathBuf::from(path);
        std::fs::write(&path, png(&scale_svg(&points)?)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Two panels against the label count, both axes logarithmic: each scorer's mean and p99
/// latency (left), and the labels scored and postings read per query (right).
fn scale_svg(points: &[(usize, Vec<Row>)]) -> anyhow::Result<String> {
    use plotters::prelude::*;
    let x = |l: usize| (l.max(1) as f64).log10();
    // Every series: (scorer index, name, points as (log10 L, log10 y)).
    let series = |pick: &dyn Fn(&Row) -> Option<f64>, suffix: &str| {
        let names: Vec<String> = points
            .first()
            .map(|(_, rows)| rows.iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default();
        names
            .into_iter()
            .enumerate()
            .filter_map(|(w, name)| {
                let pts: Vec<(f64, f64)> = points
                    .iter()
                    .filter_map(|(l, rows)| {
                        let r = rows.iter().find(|r| r.name == name)?;
                        pick(r).filter(|v| *v > 0.0).map(|v| (x(*l), v.log10()))
                    })
                    .collect();
                (!pts.is_empty()).then(|| (w, format!("{name} {suffix}"), pts))
            })
            .collect::<Vec<_>>()
    };
    // Per panel, two kinds of series: the first drawn solid, the second lighter.
    let latency = [
        series(&|r| Some(r.mean), "mean"),
        series(&|r| Some(r.p99), "p99"),
    ];
    let work = [
        series(&|r| Some(r.labels), "labels scored"),
        series(&|r| r.postings, "postings read"),
    ];
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1280, 560)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing the scaling plot: {e}");
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let root = root
            .titled(
                "flat scan, flat scorer and one tree against the label count (synthetic, one thread)",
                ("sans-serif", 20),
            )
            .map_err(|x| e(&x))?;
        let (left, right) = root.split_horizontally(640);
        for (area, caption, y_desc, series) in [
            (&left, "latency per query", "µs per query", &latency),
            (&right, "work per query", "per query", &work),
        ] {
            let all = series.iter().flatten().flat_map(|s| s.2.iter());
            let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
            for &(px, py) in all {
                (x0, x1, y0, y1) = (x0.min(px), x1.max(px), y0.min(py), y1.max(py));
            }
            if x0 > x1 {
                (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
            }
            let unlog = |v: &f64| {
                let y = 10f64.powf(*v);
                if y >= 100.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.2}")
                }
            };
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 16))
                .margin(14)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d((x0 - 0.15)..(x1 + 0.15), (y0 - 0.2)..(y1 + 0.2))
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .x_desc("labels (L)")
                .y_desc(y_desc)
                .x_label_formatter(&unlog)
                .y_label_formatter(&unlog)
                .draw()
                .map_err(|x| e(&x))?;
            // One colour per scorer: scan, post, tree.
            const PALETTE: [RGBColor; 4] = [
                RGBColor(214, 39, 40),
                RGBColor(31, 119, 180),
                RGBColor(44, 160, 44),
                RGBColor(127, 127, 127),
            ];
            for (kind, group) in series.iter().enumerate() {
                for (w, name, pts) in group {
                    let base = PALETTE[w % PALETTE.len()];
                    let c = if kind == 0 {
                        base.to_rgba()
                    } else {
                        base.mix(0.45)
                    };
                    let width = if kind == 0 { 3 } else { 2 };
                    chart
                        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(width)))
                        .map_err(|x| e(&x))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width))
                        });
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                        .map_err(|x| e(&x))?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(out)
}

/// Renders SVG text to PNG bytes with resvg, with the system's fonts (`sans-serif` mapped to
/// DejaVu Sans where it is installed; without fonts the PNG is drawn without its text).
fn png(svg: &str) -> anyhow::Result<Vec<u8>> {
    let mut fonts = resvg::usvg::fontdb::Database::new();
    fonts.load_system_fonts();
    if fonts
        .faces()
        .any(|f| f.families.iter().any(|(n, _)| n == "DejaVu Sans"))
    {
        fonts.set_sans_serif_family("DejaVu Sans");
    }
    let opt = resvg::usvg::Options {
        fontdb: std::sync::Arc::new(fonts),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &opt)?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| anyhow::anyhow!("cannot allocate a {size:?} PNG"))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    Ok(pixmap.encode_png()?)
}

/// With `XMC_BENCH_BP`: the BP model's flat blocks searched by the scan and by the selection
/// pass, interleaved per query.
fn bp_blocks(mut model: Model, dir: &std::path::Path) -> anyhow::Result<()> {
    let test = test_split(dir, &model)?;
    let n = env_usize("XMC_BENCH_QUERIES")?
        .unwrap_or(usize::MAX)
        .min(test.n_points());
    let passes = env_usize("XMC_BENCH_PASSES")?.unwrap_or(3).max(1);
    println!(
        "BP model, {} blocks, {n} queries of {}, {passes} passes",
        model.bp().map_or(0, |b| b.blocks.len()),
        dir.display()
    );
    let opts = PredictOptions::default();
    let mut scratch = Scratch::default();
    let mut out = [Prediction::default(), Prediction::default()];
    let mut times: [Vec<f64>; 2] = Default::default();
    let mut labels = [0u64; 2];
    let mut differ = 0;
    for pass in 0..=passes {
        for i in 0..n {
            let (idx, val) = test.feature_row(i);
            for r in 0..2 {
                let which = (i + r) % 2;
                model.set_flat_scan(which == 0);
                let start = Instant::now();
                model.predict_into(idx, val, &opts, &mut scratch, &mut out[which])?;
                let t = start.elapsed().as_secs_f64() * 1e6;
                if pass > 0 {
                    times[which].push(t);
                } else {
                    labels[which] += u64::from(out[which].outputs_evaluated);
                }
            }
            let bits = |p: &Prediction| p.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
            if pass == 0 && (out[0].labels != out[1].labels || bits(&out[0]) != bits(&out[1])) {
                differ += 1;
            }
        }
    }
    println!("blocks by          labels ranked/query  mean_us  p50_us  p99_us");
    for (w, name) in ["scan", "selection pass"].iter().enumerate() {
        let t = &mut times[w];
        t.sort_by(f64::total_cmp);
        println!(
            "{name:16}  {:>19.0}  {:7.1}  {:6.1}  {:6.1}",
            labels[w] as f64 / n as f64,
            mean_of(t),
            percentile(t, 0.5),
            percentile(t, 0.99),
        );
    }
    println!(
        "selection pass / scan: mean {:.2}x, p99 {:.2}x; answers differ on {differ} of {n} queries",
        mean_of(&times[1]) / mean_of(&times[0]),
        percentile(&times[1], 0.99) / percentile(&times[0], 0.99),
    );
    Ok(())
}

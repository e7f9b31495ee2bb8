//! PPDSparse against the reference dual coordinate descent on flat one-vs-all, on real data.
//!
//! Data: `XMC_BENCH_DATA` (a directory with `train.txt.gz` and `test.txt.gz`), by default
//! `debian-deps` under `XMC_DATASETS`, the largest set there. `XMC_BENCH_STRIDE` (default 8) picks
//! every s-th label for the head-to-head runs: the reference solver is slow enough per label
//! that all of debian-deps' labels would take it about an hour on 2 cores
//! (docs/decisions/0018-solver-and-trainer-costs.md).
//! The subset keeps head and tail labels in their natural proportion. P@1 on the subset ranks
//! only its labels. `XMC_BENCH_STRIDE=1` runs the head-to-head on every label.
//!
//! `XMC_BENCH_THREADS` (default 2) is the thread count of the head-to-head and all-label runs.
//! The thread scaling runs PPDSparse on every `XMC_BENCH_SCALING_STRIDE`-th label (default: the
//! head-to-head stride) on 1, 2 and, when more are asked for, `XMC_BENCH_THREADS` threads.
//!
//! Prints, in one run: training time and test P@1 of PPDSparse and of the reference on the
//! subset, the ratio, the 1 → 2 (→ N) thread speed-ups, then PPDSparse on every label: time,
//! P@1 and nnz(W) after pruning. Run with `cargo bench --bench solver`. It prints figures and
//! asserts nothing about time.

mod common;

use std::time::Instant;
use xmc::data::{self, Dataset};
use xmc::linear::{self, LinearColumn, Method, SolverParams};

/// Positives of the labels `labels`, as sorted row lists.
fn positives(ds: &Dataset, labels: &[u32]) -> Vec<Vec<u32>> {
    let mut slot = vec![usize::MAX; ds.n_labels()];
    for (k, &l) in labels.iter().enumerate() {
        slot[l as usize] = k;
    }
    let mut out = vec![Vec::new(); labels.len()];
    for i in 0..ds.n_points() {
        for &l in ds.label_row(i) {
            if slot[l as usize] != usize::MAX {
                out[slot[l as usize]].push(i as u32);
            }
        }
    }
    out
}

/// P@1 over the test points, ranking only `labels` by w·x + b.
fn p_at_1(test: &Dataset, labels: &[u32], cols: &[LinearColumn]) -> f64 {
    // Weights by feature: feature → [(column, weight)].
    let mut by_feat: Vec<Vec<(u32, f32)>> = vec![Vec::new(); test.n_features()];
    for (k, c) in cols.iter().enumerate() {
        for (&j, &w) in c.indices.iter().zip(&c.values) {
            if (j as usize) < by_feat.len() {
                by_feat[j as usize].push((k as u32, w));
            }
        }
    }
    let mut scores: Vec<f32> = Vec::with_capacity(cols.len());
    let mut hits = 0usize;
    for i in 0..test.n_points() {
        scores.clear();
        scores.extend(cols.iter().map(|c| c.bias));
        let (idx, val) = test.feature_row(i);
        for (&j, &x) in idx.iter().zip(val) {
            for &(k, w) in &by_feat[j as usize] {
                scores[k as usize] += w * x;
            }
        }
        let best = scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(k, _)| labels[k]);
        if let Some(l) = best {
            hits += usize::from(test.label_row(i).contains(&l));
        }
    }
    hits as f64 / test.n_points() as f64
}

fn train(
    ds: &Dataset,
    pos: &[Vec<u32>],
    params: &SolverParams,
    threads: usize,
) -> anyhow::Result<(Vec<LinearColumn>, f64)> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let start = Instant::now();
    let cols = pool.install(|| linear::train_columns(&ds.features, pos, params))?;
    Ok((cols, start.elapsed().as_secs_f64()))
}

fn nnz(cols: &[LinearColumn]) -> usize {
    cols.iter().map(|c| c.indices.len()).sum()
}

fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(s) => Ok(s.parse::<usize>()?.max(1)),
        Err(_) => Ok(default),
    }
}

fn main() -> anyhow::Result<()> {
    let Some(dir) = common::data_dir("solver", "debian-deps") else {
        return Ok(());
    };
    let stride = env_usize("XMC_BENCH_STRIDE", 8)?;
    let threads = env_usize("XMC_BENCH_THREADS", 2)?;
    let scaling_stride = env_usize("XMC_BENCH_SCALING_STRIDE", stride)?;
    let mut ds = data::read_xc_file(&dir.join("train.txt.gz"))?;
    data::l2_normalize_rows(&mut ds.features);
    let mut test = data::read_xc_file(&dir.join("test.txt.gz"))?;
    data::l2_normalize_rows(&mut test.features);
    println!(
        "{}: {} train points, {} features, {} labels; {} test points; {} cores available",
        dir.display(),
        ds.n_points(),
        ds.n_features(),
        ds.n_labels(),
        test.n_points(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let subset: Vec<u32> = (0..ds.n_labels() as u32).step_by(stride).collect();
    let pos = positives(&ds, &subset);
    let ppd = SolverParams::DEFAULT;
    let reference = SolverParams {
        method: Method::Reference,
        ..ppd
    };
    println!(
        "head-to-head on every {stride}-th label ({} labels), {threads} threads:",
        subset.len()
    );
    let (pc, pt) = train(&ds, &pos, &ppd, threads)?;
    let pp1 = p_at_1(&test, &subset, &pc);
    println!(
        "  PPDSparse: {pt:.2} s, P@1 {pp1:.4}, nnz(W) after pruning {}, unconverged {}",
        nnz(&pc),
        pc.iter().filter(|c| !c.stats.converged).count()
    );
    let (rc, rt) = train(&ds, &pos, &reference, threads)?;
    let rp1 = p_at_1(&test, &subset, &rc);
    println!(
        "  reference: {rt:.2} s, P@1 {rp1:.4}, nnz(W) after pruning {}, unconverged {}",
        nnz(&rc),
        rc.iter().filter(|c| !c.stats.converged).count()
    );
    println!(
        "  PPDSparse is {:.2}x faster, P@1 difference {:+.2} points",
        rt / pt,
        100.0 * (pp1 - rp1)
    );
    drop((pc, rc));

    let scaling: Vec<u32> = (0..ds.n_labels() as u32).step_by(scaling_stride).collect();
    let pos_s = positives(&ds, &scaling);
    println!(
        "thread scaling, PPDSparse on every {scaling_stride}-th label ({} labels):",
        scaling.len()
    );
    let (_, t1) = train(&ds, &pos_s, &ppd, 1)?;
    let (_, t2) = train(&ds, &pos_s, &ppd, 2)?;
    println!(
        "  1 thread {t1:.2} s, 2 threads {t2:.2} s: speed-up 1 -> 2 threads {:.2}x",
        t1 / t2
    );
    if threads > 2 {
        let (_, tn) = train(&ds, &pos_s, &ppd, threads)?;
        println!(
            "  {threads} threads {tn:.2} s: speed-up 1 -> {threads} threads {:.2}x",
            t1 / tn
        );
    }

    if stride > 1 {
        let all: Vec<u32> = (0..ds.n_labels() as u32).collect();
        let pos = positives(&ds, &all);
        let (ac, at) = train(&ds, &pos, &ppd, threads)?;
        println!(
            "all {} labels, PPDSparse, {threads} threads: {at:.2} s, P@1 {:.4}, nnz(W) after pruning {}",
            all.len(),
            p_at_1(&test, &all, &ac),
            nnz(&ac)
        );
    }
    Ok(())
}

//! Training the BP stage: the choice of λ_bp (k-fold cross-validation, §3.3) and of q, the
//! partition, the router, and one model per block.

use super::partition::{self, Partition};
use super::view::{BlockArrays, BpArrays};
use super::{BpMeta, CvPoint, CvReport, QTry};
use crate::cluster::derive_seed;
use crate::config::{ModelKind, TrainConfig};
use crate::data::{Dataset, SparseMatrix, row_slices};
use crate::linear::{Loss, SolverParams};
use crate::train::{Progress, TrainError, single_leaf, train_one_tree};
use crate::tree::freq::label_frequencies;
use crate::tree::train::{select_rows, train_tree};
use crate::tree::view::{SearchLimits, SearchScratch, TreeArrays};
use rayon::prelude::*;
use std::collections::HashMap;
use std::time::Instant;

/// The λ_bp values the cross-validation tries, smallest (most labels per block) first.
pub const LAMBDA_GRID: &[f64] = &[0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0];

/// How many of a held-out point's best labels (by the fold's flat model) the cross-validation
/// keeps; a routed block holding none of them counts as a miss at P@1.
const CV_TOP: usize = 100;

/// What BP training produced.
#[derive(Debug)]
pub struct BpTrained {
    /// The router and block models.
    pub arrays: BpArrays<Vec<u32>, Vec<f32>>,
    /// What the metadata records.
    pub meta: BpMeta,
    /// Per block, its model's node, leaf and weight counts.
    pub block_stats: Vec<serde_json::Value>,
    /// Wall-clock seconds per phase: `bp_cv`, `bp_partition`, `bp_router`, `bp_blocks`.
    pub seconds: Vec<(String, f64)>,
}

type Arrays = TreeArrays<Vec<u32>, Vec<f32>>;

fn bp_err(e: impl std::fmt::Display) -> TrainError {
    TrainError::Bp(e.to_string())
}

/// Trains the BP stage on `ds` (rows already normalised if the config says so).
pub fn train_bp(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
) -> Result<BpTrained, TrainError> {
    let seed = derive_seed(cfg.seed, 0xB10C);
    let mut seconds = Vec::new();
    let start = Instant::now();
    let (lambda, cv) = if cfg.bp_lambda > 0.0 {
        (f64::from(cfg.bp_lambda), None)
    } else {
        let cv = cross_validate(ds, cfg, seed, progress)?;
        (cv.chosen, Some(cv))
    };
    seconds.push(("bp_cv".to_string(), start.elapsed().as_secs_f64()));

    let start = Instant::now();
    progress.phase("BP: partition", 1);
    let mut kmeans = KmeansCache::new(&ds.features, seed);
    let (part, q_search) = choose_partition(ds, cfg, lambda, &mut kmeans)?;
    progress.step();
    seconds.push(("bp_partition".to_string(), start.elapsed().as_secs_f64()));

    let start = Instant::now();
    progress.phase("BP: router", 1);
    let solver = SolverParams {
        seed: derive_seed(seed, 1),
        ..cfg.solver
    };
    let router = train_router(&ds.features, &part.assign, part.q(), &solver)?;
    progress.step();
    seconds.push(("bp_router".to_string(), start.elapsed().as_secs_f64()));

    let start = Instant::now();
    let mut blocks = Vec::with_capacity(part.q());
    let mut block_stats = Vec::with_capacity(part.q());
    let mut block_points = Vec::with_capacity(part.q());
    for (b, cluster) in part.clusters.iter().enumerate() {
        let rows: Vec<u32> = (0..ds.n_points() as u32)
            .filter(|&i| part.assign[i as usize] as usize == b)
            .collect();
        block_points.push(rows.len());
        let bds = block_dataset(ds, &rows, cluster);
        let weighted = cfg.block_model == ModelKind::Tree && cfg.lambda > 0.0;
        let freqs = weighted.then(|| label_frequencies(&bds.labels, cfg.freq));
        let one = train_one_tree(
            &bds,
            cfg,
            cfg.block_model,
            freqs.as_ref(),
            derive_seed(seed, 100 + b as u64),
            progress,
            &format!("block {b}"),
        )
        .map_err(|e| bp_err(format!("block {b}: {}", e.for_tree(0))))?;
        block_stats.push(one.stats);
        blocks.push(BlockArrays {
            labels: cluster.clone(),
            tree: one.arrays,
        });
    }
    seconds.push(("bp_blocks".to_string(), start.elapsed().as_secs_f64()));

    let total_ones = ds.labels.nnz().max(1) as f64;
    let captured = partition::captured_ones(&ds.labels, &part.assign, &part.clusters) as f64;
    let meta = BpMeta {
        q: part.q(),
        lambda,
        lambda_source: if cv.is_some() {
            "cross-validation".into()
        } else {
            "configured".into()
        },
        block_model: cfg.block_model,
        block_points,
        block_labels: part.clusters.iter().map(Vec::len).collect(),
        captured_frac: captured / total_ones,
        objective: part.objective(),
        rounds: part.rounds,
        q_search,
        cv,
    };
    Ok(BpTrained {
        arrays: BpArrays { router, blocks },
        meta,
        block_stats,
        seconds,
    })
}

/// k-means initialisations per q over one data set, computed once each.
struct KmeansCache<'a> {
    x: &'a SparseMatrix,
    seed: u64,
    done: HashMap<usize, Vec<u32>>,
}

impl<'a> KmeansCache<'a> {
    fn new(x: &'a SparseMatrix, seed: u64) -> Self {
        KmeansCache {
            x,
            seed,
            done: HashMap::new(),
        }
    }

    fn get(&mut self, q: usize) -> Vec<u32> {
        let (x, seed) = (self.x, self.seed);
        self.done
            .entry(q)
            .or_insert_with(|| partition::kmeans(x, q, derive_seed(seed, q as u64)))
            .clone()
    }
}

/// The partition for λ: with `bp_q` set, that q (blocks that come out empty are dropped); else
/// the largest q up to `bp_q_max` with no empty block (§3.3), found by
/// [`partition::search_q`]: `bp_q_max` first, then bisection, so at most 1 + ⌈log₂ bp_q_max⌉
/// partitions instead of one per q. Also returns every q tried, in the order tried.
fn choose_partition(
    ds: &Dataset,
    cfg: &TrainConfig,
    lambda: f64,
    kmeans: &mut KmeansCache<'_>,
) -> Result<(Partition, Vec<QTry>), TrainError> {
    let all_empty = || {
        bp_err(format!(
            "every label cluster is empty at bp_lambda = {lambda}: no label occurs often enough \
             in any block; lower bp_lambda"
        ))
    };
    let total = ds.labels.nnz().max(1) as f64;
    let run = |q: usize, init: Vec<u32>| partition::alternate(&ds.labels, init, q, lambda);
    if cfg.bp_q > 0 {
        let q = cfg.bp_q.min(ds.n_points()).max(1);
        let p = run(q, kmeans.get(q));
        let p = partition::compact(&ds.features, p).ok_or_else(all_empty)?;
        return Ok((p, Vec::new()));
    }
    let mut tried = Vec::new();
    // The bisection only moves its lower end up, so the last q that fits is the answer.
    let mut last_fit: Option<Partition> = None;
    let q_max = cfg.bp_q_max.min(ds.n_points()).max(1);
    let chosen = partition::search_q(q_max, |q| {
        let p = run(q, kmeans.get(q));
        let empty = p.has_empty_block();
        let captured = partition::captured_ones(&ds.labels, &p.assign, &p.clusters) as f64;
        tried.push(QTry {
            q,
            empty_block: empty,
            captured_frac: captured / total,
        });
        if !empty {
            last_fit = Some(p);
        }
        !empty
    });
    let best = match last_fit.filter(|p| chosen == Some(p.q())) {
        Some(p) => p,
        // Even q = 1 has an empty label cluster; compacting it reports that clearly.
        None => partition::compact(&ds.features, run(1, vec![0; ds.n_points()]))
            .ok_or_else(all_empty)?,
    };
    Ok((best, tried))
}

/// The router: one classifier per block over every training point, a block's points its
/// positives, stored as a one-leaf tree whose outputs are the blocks.
fn train_router(
    x: &SparseMatrix,
    assign: &[u32],
    q: usize,
    solver: &SolverParams,
) -> Result<Arrays, TrainError> {
    let labels = one_hot(assign, q);
    let rds = Dataset {
        features: x.clone(),
        labels,
    };
    let layout = single_leaf(q).map_err(bp_err)?;
    train_tree(&rds, &layout, solver, &|| {}).map_err(|e| bp_err(format!("router: {e}")))
}

/// The n × q indicator matrix of the blocks.
fn one_hot(assign: &[u32], q: usize) -> SparseMatrix {
    let n = assign.len();
    SparseMatrix::new((n, q), (0..=n).collect(), assign.to_vec(), vec![1.0; n])
}

/// The data set of one block: its rows, and their labels within `cluster` (sorted global ids)
/// renumbered to local ids.
pub fn block_dataset(ds: &Dataset, rows: &[u32], cluster: &[u32]) -> Dataset {
    let features = select_rows(&ds.features, rows);
    let mut indptr = Vec::with_capacity(rows.len() + 1);
    indptr.push(0usize);
    let mut idx = Vec::new();
    for &r in rows {
        for &l in ds.label_row(r as usize) {
            if let Ok(local) = cluster.binary_search(&l) {
                idx.push(local as u32);
            }
        }
        indptr.push(idx.len());
    }
    let n = idx.len();
    let labels = SparseMatrix::new((rows.len(), cluster.len()), indptr, idx, vec![1.0; n]);
    Dataset { features, labels }
}

/// The rows `rows` of `ds`, all labels kept.
fn subset(ds: &Dataset, rows: &[u32]) -> Dataset {
    Dataset {
        features: select_rows(&ds.features, rows),
        labels: select_rows(&ds.labels, rows),
    }
}

/// Runs `tree`'s exact top-`k` search on every row of `x`; returns each row's labels, best first.
fn top_labels(tree: &Arrays, x: &SparseMatrix, loss: Loss, k: usize) -> Vec<Vec<u32>> {
    let limits = SearchLimits {
        k,
        beam: usize::MAX,
        deadline: None,
    };
    let tree = tree.borrowed();
    (0..x.rows())
        .into_par_iter()
        .map_init(
            || (SearchScratch::default(), vec![0f32; x.cols()]),
            |(scratch, dense), i| {
                let (idx, val) = row_slices(x, i);
                for (&j, &v) in idx.iter().zip(val) {
                    dense[j as usize] = v;
                }
                tree.early_stop_search(idx, val, dense, loss, &limits, scratch);
                for &j in idx {
                    dense[j as usize] = 0.0;
                }
                let mut c = scratch.candidates.clone();
                c.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                c.into_iter().map(|c| c.0).collect()
            },
        )
        .collect()
}

/// Chooses λ_bp by k-fold cross-validation (§3.3). Per fold, a flat one-vs-all model is trained
/// on the other folds and ranks the held-out points' labels; per λ, the partition and router are
/// trained on the other folds, each held-out point is routed, and its P@1 is that model's best
/// label *within the routed block's label cluster*. The loss against the unrestricted P@1 is
/// the precision the routing costs; the chosen λ is the largest whose loss stays within
/// `bp_tolerance` on every fold.
///
/// The block models themselves are not retrained per fold (that would cost a full training per
/// fold and λ): the cross-validation measures the labels BP removes from reach, which is what λ
/// controls.
fn cross_validate(
    ds: &Dataset,
    cfg: &TrainConfig,
    seed: u64,
    progress: &dyn Progress,
) -> Result<CvReport, TrainError> {
    let k = cfg.bp_folds;
    let fold_of: Vec<usize> = (0..ds.n_points())
        .map(|i| (derive_seed(seed ^ 0xCF, i as u64) % k as u64) as usize)
        .collect();
    let mut grid: Vec<CvPoint> = LAMBDA_GRID
        .iter()
        .map(|&lambda| CvPoint {
            lambda,
            q: Vec::new(),
            p1_full: Vec::new(),
            p1_bp: Vec::new(),
            evals_mean: Vec::new(),
            within: true,
        })
        .collect();
    progress.phase("BP: λ cross-validation", (k * LAMBDA_GRID.len()) as u64);
    for f in 0..k {
        let train_rows: Vec<u32> = (0..ds.n_points() as u32)
            .filter(|&i| fold_of[i as usize] != f)
            .collect();
        let held_rows: Vec<u32> = (0..ds.n_points() as u32)
            .filter(|&i| fold_of[i as usize] == f)
            .collect();
        if train_rows.is_empty() || held_rows.is_empty() {
            return Err(bp_err(format!(
                "{} points are too few for {k}-fold cross-validation of bp_lambda; set bp_lambda",
                ds.n_points()
            )));
        }
        let tr = subset(ds, &train_rows);
        let held = subset(ds, &held_rows);
        let solver = SolverParams {
            seed: derive_seed(seed, 1000 + f as u64),
            ..cfg.solver
        };
        let flat = train_tree(
            &tr,
            &single_leaf(ds.n_labels()).map_err(bp_err)?,
            &solver,
            &|| {},
        )
        .map_err(|e| bp_err(format!("cross-validation fold {f}: {e}")))?;
        let ranked = top_labels(&flat, &held.features, cfg.solver.loss, CV_TOP);
        let hit = |i: usize, l: u32| held.label_row(i).binary_search(&l).is_ok();
        let n_held = held_rows.len() as f64;
        let p1_full = ranked
            .iter()
            .enumerate()
            .filter(|(i, r)| r.first().is_some_and(|&l| hit(*i, l)))
            .count() as f64
            / n_held;
        let mut kmeans = KmeansCache::new(&tr.features, derive_seed(seed, 2000 + f as u64));
        for point in grid.iter_mut() {
            let (part, _) = match choose_partition(&tr, cfg, point.lambda, &mut kmeans) {
                Ok(p) => p,
                Err(_) => {
                    // Every cluster empty: this λ routes nowhere, the worst possible loss.
                    point.q.push(0);
                    point.p1_full.push(p1_full);
                    point.p1_bp.push(0.0);
                    point.evals_mean.push(0.0);
                    point.within = false;
                    progress.step();
                    continue;
                }
            };
            let router = train_router(&tr.features, &part.assign, part.q(), &solver)?;
            let routed = top_labels(&router, &held.features, cfg.solver.loss, 1);
            let mut hits = 0usize;
            let mut evals = 0usize;
            for (i, r) in routed.iter().enumerate() {
                let b = r.first().copied().unwrap_or(0) as usize;
                let cluster = &part.clusters[b];
                evals += part.q() + cluster.len();
                if let Some(&l) = ranked[i].iter().find(|l| cluster.binary_search(l).is_ok()) {
                    hits += usize::from(hit(i, l));
                }
            }
            let p1_bp = hits as f64 / n_held;
            point.q.push(part.q());
            point.p1_full.push(p1_full);
            point.p1_bp.push(p1_bp);
            point.evals_mean.push(evals as f64 / n_held);
            point.within &= p1_full - p1_bp <= f64::from(cfg.bp_tolerance);
            progress.step();
        }
    }
    let chosen = grid
        .iter()
        .rev()
        .find(|p| p.within)
        .map(|p| p.lambda)
        .unwrap_or_else(|| {
            let worst = |p: &CvPoint| {
                p.p1_full
                    .iter()
                    .zip(&p.p1_bp)
                    .map(|(a, b)| a - b)
                    .fold(f64::NEG_INFINITY, f64::max)
            };
            grid.iter()
                .min_by(|a, b| worst(a).total_cmp(&worst(b)))
                .map_or(LAMBDA_GRID[0], |p| p.lambda)
        });
    Ok(CvReport {
        folds: k,
        tolerance: f64::from(cfg.bp_tolerance),
        grid,
        chosen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synth::{SynthParams, generate};

    /// `choose_partition`'s q against the exhaustive scan of every q with the same
    /// initialisations: the largest q with no empty block whenever emptiness is monotone in q
    /// (§3.3's assumption), else a q with no empty block whose successor has one.
    #[test]
    fn q_search_picks_the_largest_q_with_no_empty_block() {
        let q_max = 12;
        let cfg = TrainConfig {
            bp: true,
            bp_q_max: q_max,
            ..TrainConfig::DEFAULT
        };
        let (mut monotone, mut inside) = (0, 0);
        for seed in 0..6u64 {
            let ds = generate(&SynthParams {
                n: 300,
                d: 200,
                l: 60,
                labels_per_point: 2.0,
                features_per_label: 8,
                features_per_point: 12,
                seed,
                ..SynthParams::DEFAULT
            });
            for lambda in [0.05, 0.3, 1.0, 3.0, 10.0] {
                let mut cache = KmeansCache::new(&ds.features, seed);
                let empty: Vec<bool> = (1..=q_max)
                    .map(|q| {
                        partition::alternate(&ds.labels, cache.get(q), q, lambda).has_empty_block()
                    })
                    .collect();
                let got = choose_partition(&ds, &cfg, lambda, &mut cache).map(|(p, tried)| {
                    assert!(
                        tried.len() <= 1 + 4,
                        "{} partitions for q_max 12",
                        tried.len()
                    );
                    p.q()
                });
                let largest = empty.iter().rposition(|&e| !e).map(|p| p + 1);
                let first_empty = empty.iter().position(|&e| e);
                if first_empty.is_none_or(|f| empty[f..].iter().all(|&e| e)) {
                    monotone += 1;
                    match largest {
                        Some(q) => {
                            assert_eq!(got.as_ref().ok(), Some(&q), "seed {seed} λ {lambda}");
                            inside += usize::from(q > 1 && q < q_max);
                        }
                        None => assert!(got.is_err(), "seed {seed} λ {lambda}"),
                    }
                } else {
                    let q = got.unwrap_or_else(|e| panic!("seed {seed} λ {lambda}: {e}"));
                    assert!(!empty[q - 1], "seed {seed} λ {lambda}: {empty:?}");
                    assert!(q == q_max || empty[q], "seed {seed} λ {lambda}: {empty:?}");
                }
            }
        }
        // Not vacuous: most cases are monotone, and some answers lie strictly inside 1..q_max.
        assert!(monotone >= 20, "{monotone} of 30 cases monotone");
        assert!(inside >= 3, "{inside} monotone cases with 1 < q < q_max");
    }
}

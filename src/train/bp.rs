//! Training the BP stage: the choice of λ_bp (k-fold cross-validation, §3.3) and of q, the
//! partition, the router, and one model per block.

use super::{OneTree, Progress, Quiet, TrainError, single_leaf, train_one_tree};
use crate::config::{ModelKind, TrainConfig};
use crate::data::{Dataset, SparseMatrix, row_slices};
use crate::linear::SolverParams;
use crate::router::partition::{self, Partition};
use crate::router::view::{BlockArrays, BpArrays, BpQuery, BpScratch};
use crate::router::{BpMeta, CvPoint, CvReport, QTry, worst};
use crate::seed::derive_seed;
use crate::tree::freq::label_frequencies;
use crate::tree::train::{Negatives, select_rows, train_tree};
use crate::tree::view::{Candidate, SearchLimits, SearchScratch, TreeArrays};
use rayon::prelude::*;
use std::collections::HashMap;
use std::time::Instant;

/// The λ_bp values the cross-validation tries, smallest (most labels per block) first.
pub const LAMBDA_GRID: &[f64] = &[0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0];

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

/// The part of BP training that is computed once, before any classifier: λ_bp (with its
/// cross-validation), the partition and what the metadata records of it.
#[derive(Debug)]
pub struct BpPlanned {
    /// The partition of the points into blocks and of the labels into clusters.
    pub part: Partition,
    /// What the metadata records.
    pub meta: BpMeta,
    /// Wall-clock seconds per phase: `bp_cv` (and its parts), `bp_partition`.
    pub seconds: Vec<(String, f64)>,
}

/// The seed every BP stream derives from.
fn bp_seed(cfg: &TrainConfig) -> u64 {
    derive_seed(cfg.seed, 0xB10C)
}

/// The router's solver settings.
pub fn router_solver(cfg: &TrainConfig) -> SolverParams {
    SolverParams {
        seed: derive_seed(bp_seed(cfg), 1),
        ..cfg.solver
    }
}

/// The seed of block `b`'s model (its partition and its classifiers).
pub fn block_seed(cfg: &TrainConfig, b: usize) -> u64 {
    derive_seed(bp_seed(cfg), 100 + b as u64)
}

/// The points of block `b`, in order.
pub fn block_rows(assign: &[u32], b: usize) -> Vec<u32> {
    (0..assign.len() as u32)
        .filter(|&i| assign[i as usize] as usize == b)
        .collect()
}

/// Chooses λ_bp and the partition of `ds` (rows already normalised if the config says so).
pub fn plan_bp(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
) -> Result<BpPlanned, TrainError> {
    let seed = bp_seed(cfg);
    let mut seconds = Vec::new();
    let start = Instant::now();
    let mut cv_seconds = CvSeconds::default();
    let (lambda, cv) = if cfg.bp_lambda > 0.0 {
        (f64::from(cfg.bp_lambda), None)
    } else {
        let cv = cross_validate(ds, cfg, seed, progress, &mut cv_seconds)?;
        (cv.chosen, Some(cv))
    };
    seconds.push(("bp_cv".to_string(), start.elapsed().as_secs_f64()));
    if cv.is_some() {
        seconds.extend(cv_seconds.named());
    }

    let start = Instant::now();
    progress.phase("BP: partition", 1);
    let mut kmeans = KmeansCache::new(seed);
    let (part, q_search) = choose_partition(ds, cfg, lambda, &mut kmeans)?;
    progress.step();
    seconds.push(("bp_partition".to_string(), start.elapsed().as_secs_f64()));

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
        block_points: part.block_sizes(),
        block_labels: part.clusters.iter().map(Vec::len).collect(),
        captured_frac: captured / total_ones,
        objective: part.objective(),
        rounds: part.rounds,
        q_search,
        cv,
    };
    Ok(BpPlanned {
        part,
        meta,
        seconds,
    })
}

/// Trains the BP stage on `ds` (rows already normalised if the config says so).
pub fn train_bp(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
) -> Result<BpTrained, TrainError> {
    let BpPlanned {
        part,
        meta,
        mut seconds,
    } = plan_bp(ds, cfg, progress)?;

    let start = Instant::now();
    progress.phase("BP: router", 1);
    let router = train_router(&ds.features, &part.assign, part.q(), &router_solver(cfg))?;
    progress.step();
    seconds.push(("bp_router".to_string(), start.elapsed().as_secs_f64()));

    let start = Instant::now();
    let trained = train_blocks(ds, &part, cfg, bp_seed(cfg), progress)?;
    seconds.push(("bp_blocks".to_string(), start.elapsed().as_secs_f64()));
    debug_assert_eq!(trained.points, meta.block_points);

    Ok(BpTrained {
        arrays: BpArrays {
            router,
            blocks: trained.blocks,
        },
        meta,
        block_stats: trained.stats,
        seconds,
    })
}

/// The block models of one partition, with what the metadata records of them.
struct TrainedBlocks {
    blocks: Vec<BlockArrays<Vec<u32>, Vec<f32>>>,
    stats: Vec<serde_json::Value>,
    points: Vec<usize>,
}

/// Trains one model per block of `part` (of the kind `block_model`) over the block's points and
/// label cluster; block b's seed is derived from `seed` and b.
fn train_blocks(
    ds: &Dataset,
    part: &Partition,
    cfg: &TrainConfig,
    seed: u64,
    progress: &dyn Progress,
) -> Result<TrainedBlocks, TrainError> {
    let mut blocks = Vec::with_capacity(part.q());
    let mut stats = Vec::with_capacity(part.q());
    let mut points = Vec::with_capacity(part.q());
    for (b, cluster) in part.clusters.iter().enumerate() {
        let rows = block_rows(&part.assign, b);
        points.push(rows.len());
        let bds = block_dataset(ds, &rows, cluster);
        let name = format!("block {b}");
        let one = train_kind(
            &bds,
            cfg,
            derive_seed(seed, 100 + b as u64),
            progress,
            &name,
        )?;
        stats.push(one.stats);
        blocks.push(BlockArrays {
            labels: cluster.clone(),
            tree: one.arrays,
        });
    }
    Ok(TrainedBlocks {
        blocks,
        stats,
        points,
    })
}

/// Trains a model of the blocks' kind (`block_model`) on `ds`; `name` prefixes its errors.
fn train_kind(
    ds: &Dataset,
    cfg: &TrainConfig,
    seed: u64,
    progress: &dyn Progress,
    name: &str,
) -> Result<OneTree, TrainError> {
    let weighted = cfg.block_model == ModelKind::Tree && cfg.lambda > 0.0;
    let freqs = weighted.then(|| label_frequencies(&ds.labels, cfg.freq));
    train_one_tree(
        ds,
        cfg,
        cfg.block_model,
        freqs.as_ref(),
        seed,
        progress,
        name,
    )
    .map_err(|e| bp_err(format!("{name}: {}", e.for_tree(0))))
}

/// k-means initialisations per q over one data set (the one passed to every `get`), computed
/// once each.
struct KmeansCache {
    seed: u64,
    done: HashMap<usize, Vec<u32>>,
}

impl KmeansCache {
    fn new(seed: u64) -> Self {
        KmeansCache {
            seed,
            done: HashMap::new(),
        }
    }

    fn get(&mut self, x: &SparseMatrix, q: usize) -> Vec<u32> {
        let seed = self.seed;
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
    kmeans: &mut KmeansCache,
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
        let p = run(q, kmeans.get(&ds.features, q));
        let p = partition::compact(&ds.features, p).ok_or_else(all_empty)?;
        return Ok((p, Vec::new()));
    }
    let mut tried = Vec::new();
    // The bisection only moves its lower end up, so the last q that fits is the answer.
    let mut last_fit: Option<Partition> = None;
    let q_max = cfg.bp_q_max.min(ds.n_points()).max(1);
    let chosen = partition::search_q(q_max, |q| {
        let p = run(q, kmeans.get(&ds.features, q));
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
    let rds = router_dataset(x, assign, q);
    let layout = single_leaf(q).map_err(bp_err)?;
    train_tree(&rds, &layout, solver, Negatives::TeacherForced, &|| {})
        .map_err(|e| bp_err(format!("router: {e}")))
}

/// The router's data set: every point, with its block as its one label.
pub fn router_dataset(x: &SparseMatrix, assign: &[u32], q: usize) -> Dataset {
    Dataset {
        features: x.clone(),
        labels: one_hot(assign, q),
    }
}

/// The label tree (or the flat model's one leaf) of a block's model on the block's data set
/// `bds`: the one [`train_kind`] trains with the block's seed.
pub fn block_layout(
    bds: &Dataset,
    cfg: &TrainConfig,
    seed: u64,
) -> Result<crate::tree::layout::TreeLayout, TrainError> {
    let weighted = cfg.block_model == ModelKind::Tree && cfg.lambda > 0.0;
    let freqs = weighted.then(|| label_frequencies(&bds.labels, cfg.freq));
    super::tree_layout(bds, cfg, cfg.block_model, freqs.as_ref(), None, seed)
        .map_err(|e| bp_err(e.to_string()))
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
pub(super) fn subset(ds: &Dataset, rows: &[u32]) -> Dataset {
    Dataset {
        features: select_rows(&ds.features, rows),
        labels: select_rows(&ds.labels, rows),
    }
}

/// The share of `held`'s points whose best label by `best` (given a row's features and its
/// dense copy) is one of the point's labels, and the mean classifier evaluations `best` reports.
fn precision_at_1<S: Send>(
    held: &Dataset,
    scratch: impl Fn() -> S + Sync + Send,
    best: impl Fn(&mut S, &[u32], &[f32], &[f32]) -> (Option<u32>, usize) + Sync + Send,
) -> (f64, f64) {
    let x = &held.features;
    let (hits, evals) = (0..x.rows())
        .into_par_iter()
        .map_init(
            || (scratch(), vec![0f32; x.cols()]),
            |(s, dense), i| {
                let (idx, val) = row_slices(x, i);
                for (&j, &v) in idx.iter().zip(val) {
                    dense[j as usize] = v;
                }
                let (label, evals) = best(s, idx, val, dense);
                for &j in idx {
                    dense[j as usize] = 0.0;
                }
                let hit = label.is_some_and(|l| held.label_row(i).binary_search(&l).is_ok());
                (usize::from(hit), evals)
            },
        )
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let n = x.rows().max(1) as f64;
    (hits as f64 / n, evals as f64 / n)
}

/// The best of a search's candidates: highest score, then lowest id.
fn best_candidate(cands: &[Candidate]) -> Option<u32> {
    cands
        .iter()
        .min_by(|a, b| Candidate::ranking(a, b))
        .map(|c| c.label)
}

/// Chooses λ_bp by k-fold cross-validation (§3.3), scoring the first `bp_scored_folds` folds
/// (`docs/decisions/0020-bp-lambda-one-held-out-fold.md`). Per fold, a model of the blocks' kind
/// (`block_model`: a label tree or flat one-vs-all, over all labels) is trained on the other
/// folds: the model without BP. Per λ, the whole BP model (partition, router and block models)
/// is trained on the same folds, and both models predict the held-out points' top label with
/// the model's default beam. The loss is the difference in P@1; the chosen λ is the largest
/// whose loss stays within `bp_tolerance` on every fold. [`search_lambda`] tries λ from the
/// largest down and stops at the first that passes, so only the λ values tried are reported.
fn cross_validate(
    ds: &Dataset,
    cfg: &TrainConfig,
    seed: u64,
    progress: &dyn Progress,
    secs: &mut CvSeconds,
) -> Result<CvReport, TrainError> {
    let k = cfg.bp_folds;
    // Only the first `scored` folds are held out in turn; the partition into k folds is the same
    // whatever `scored` is, so scoring every fold is the full k-fold cross-validation.
    let scored = cfg.bp_scored_folds.clamp(1, k);
    let fold_of: Vec<usize> = (0..ds.n_points())
        .map(|i| (derive_seed(seed ^ 0xCF, i as u64) % k as u64) as usize)
        .collect();
    progress.phase("BP: cross-validation fold models", scored as u64);
    let mut folds = Vec::with_capacity(scored);
    for f in 0..scored {
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
        // The model without BP: the blocks' kind, over every label of the fold.
        let name = format!("cross-validation fold {f}");
        let start = Instant::now();
        let model = train_kind(&tr, cfg, solver.seed, &Quiet, &name)?;
        secs.full_train += start.elapsed().as_secs_f64();
        let start = Instant::now();
        let tree = model.arrays.borrowed();
        let limits = SearchLimits {
            k: 1,
            keep: 0,
            beam: cfg.beam,
            deadline: None,
        };
        let (p1_full, _) = precision_at_1(&held, SearchScratch::default, |s, idx, val, dense| {
            let stats = tree.early_stop_search(idx, val, dense, cfg.solver.loss, &limits, s);
            (
                best_candidate(&s.candidates),
                stats.outputs_evaluated as usize,
            )
        });
        secs.full_predict += start.elapsed().as_secs_f64();
        folds.push(CvFold {
            train_rows,
            held,
            p1_full,
            solver,
            kmeans: KmeansCache::new(derive_seed(seed, 2000 + f as u64)),
        });
        progress.step();
    }

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
    progress.phase(
        "BP: λ cross-validation",
        (scored * LAMBDA_GRID.len()) as u64,
    );
    let tolerance = f64::from(cfg.bp_tolerance);
    let chosen = search_lambda(LAMBDA_GRID.len(), scored, tolerance, |i, f| {
        let fold = &mut folds[f];
        let point = &mut grid[i];
        // Rebuilt per score rather than kept per fold: k fold copies of (k − 1)/k of the data
        // would hold (k − 1)× the training set at once.
        let tr = subset(ds, &fold.train_rows);
        let scored = score_fold(&tr, fold, cfg, point.lambda, secs)?;
        progress.step();
        point.q.push(scored.q);
        point.p1_full.push(fold.p1_full);
        point.p1_bp.push(scored.p1_bp);
        point.evals_mean.push(scored.evals_mean);
        // No partition at all (every cluster empty) routes nowhere: the worst possible loss.
        let loss = if scored.q == 0 {
            f64::INFINITY
        } else {
            fold.p1_full - scored.p1_bp
        };
        point.within &= loss <= tolerance;
        Ok::<_, TrainError>(loss)
    })?;
    // Only the λ values that were tried are reported, each with the folds it was scored on.
    grid.retain(|p| !p.p1_bp.is_empty());
    Ok(CvReport {
        folds: k,
        scored_folds: scored,
        tolerance,
        grid,
        chosen: LAMBDA_GRID[chosen],
    })
}

/// Wall-clock seconds of the cross-validation's parts, summed over folds and λ values.
#[derive(Default)]
struct CvSeconds {
    /// Training the models without BP, one per fold.
    full_train: f64,
    /// Their held-out predictions.
    full_predict: f64,
    /// The BP models' partitions (k-means included).
    partition: f64,
    /// Their routers.
    router: f64,
    /// Their block models.
    blocks: f64,
    /// Their held-out predictions.
    bp_predict: f64,
}

impl CvSeconds {
    /// The parts under the names `meta.created.seconds` records them by.
    fn named(&self) -> Vec<(String, f64)> {
        [
            ("bp_cv_full_train", self.full_train),
            ("bp_cv_full_predict", self.full_predict),
            ("bp_cv_partition", self.partition),
            ("bp_cv_router", self.router),
            ("bp_cv_blocks", self.blocks),
            ("bp_cv_bp_predict", self.bp_predict),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), s))
        .collect()
    }
}

/// What one cross-validation fold keeps while λ_bp varies: its training rows, its held-out
/// points, the P@1 of the model without BP, the solver settings and the k-means
/// initialisations of its training rows.
struct CvFold {
    train_rows: Vec<u32>,
    held: Dataset,
    p1_full: f64,
    solver: SolverParams,
    kmeans: KmeansCache,
}

/// One (λ_bp, fold) score: q (0 when no partition exists), the held-out P@1 of the BP model
/// trained on the fold, and the classifiers its search evaluates per point.
struct FoldScore {
    q: usize,
    p1_bp: f64,
    evals_mean: f64,
}

/// Trains the BP model at `lambda` on the fold's training rows `tr` (partition, router, one
/// model per block) and scores it on the fold's held-out points.
fn score_fold(
    tr: &Dataset,
    fold: &mut CvFold,
    cfg: &TrainConfig,
    lambda: f64,
    secs: &mut CvSeconds,
) -> Result<FoldScore, TrainError> {
    let start = Instant::now();
    let chosen = choose_partition(tr, cfg, lambda, &mut fold.kmeans);
    secs.partition += start.elapsed().as_secs_f64();
    let Ok((part, _)) = chosen else {
        return Ok(FoldScore {
            q: 0,
            p1_bp: 0.0,
            evals_mean: 0.0,
        });
    };
    let start = Instant::now();
    let router = train_router(&tr.features, &part.assign, part.q(), &fold.solver)?;
    secs.router += start.elapsed().as_secs_f64();
    let start = Instant::now();
    let blocks = train_blocks(tr, &part, cfg, fold.solver.seed, &Quiet)
        .map_err(|e| bp_err(format!("cross-validation at bp_lambda = {lambda}: {e}")))?
        .blocks;
    secs.blocks += start.elapsed().as_secs_f64();
    let start = Instant::now();
    let bp = BpArrays { router, blocks };
    let limits = SearchLimits {
        k: 1,
        keep: 0,
        beam: cfg.beam,
        deadline: None,
    };
    let query = BpQuery {
        limits: &limits,
        early_stop: true,
        blocks: 1,
        loss: cfg.solver.loss,
        flat_scan: false,
    };
    let scratch = || (BpScratch::default(), Vec::new(), Vec::new());
    let (p1_bp, evals_mean) = precision_at_1(&fold.held, scratch, |s, idx, val, dense| {
        let (scratch, cands, blocks) = s;
        let stats = bp.search(idx, val, dense, &query, scratch, cands, blocks);
        (
            best_candidate(cands),
            stats.search.outputs_evaluated as usize,
        )
    });
    secs.bp_predict += start.elapsed().as_secs_f64();
    Ok(FoldScore {
        q: part.q(),
        p1_bp,
        evals_mean,
    })
}

/// The §3.3 choice of λ_bp over `n` grid values (ascending) and `k` folds, where `loss(i, f)`
/// scores grid value i on fold f: the largest λ whose loss is within `tolerance` on every fold,
/// else the one whose worst fold loss is smallest (the first, i.e. smallest λ, on a tie).
///
/// It gives the answer of scoring every (λ, fold) pair, with fewer scores: λ values are tried
/// from the largest down, the first to pass every fold is the answer, and a λ stops at its first
/// fold out of tolerance. When no λ passes, the λ values are completed best-first, and one stops
/// as soon as its worst loss so far cannot beat the best complete λ (branch and bound). Each
/// pair is scored at most once; errors end the search.
fn search_lambda<E>(
    n: usize,
    k: usize,
    tolerance: f64,
    mut loss: impl FnMut(usize, usize) -> Result<f64, E>,
) -> Result<usize, E> {
    let mut table: Vec<Vec<f64>> = vec![Vec::with_capacity(k); n];
    for i in (0..n).rev() {
        let mut passes = true;
        for f in 0..k {
            let l = loss(i, f)?;
            table[i].push(l);
            if l > tolerance {
                passes = false;
                break;
            }
        }
        if passes {
            return Ok(i);
        }
    }
    // No λ passes: the answer is the smallest worst loss (the smallest λ on a tie). The λ
    // values are completed in order of the worst loss scored so far, and one is abandoned as
    // soon as its worst cannot beat the best complete one: scoring more folds only raises it.
    let worst_of = |row: &[f64]| worst(row.iter().copied());
    let beats = |i: usize, w: f64, best: Option<(usize, f64)>| {
        best.is_none_or(|(bi, bw)| w < bw || (w == bw && i < bi))
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        worst_of(&table[a])
            .total_cmp(&worst_of(&table[b]))
            .then(a.cmp(&b))
    });
    let mut best: Option<(usize, f64)> = None;
    for i in order {
        let mut worst = worst_of(&table[i]);
        while beats(i, worst, best) && table[i].len() < k {
            let l = loss(i, table[i].len())?;
            table[i].push(l);
            worst = worst.max(l);
        }
        if beats(i, worst, best) {
            best = Some((i, worst));
        }
    }
    Ok(best.map_or(0, |(i, _)| i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synth::{SynthParams, generate};
    use proptest::prelude::*;

    /// The exhaustive choice `search_lambda` must reproduce: every (λ, fold) pair scored.
    fn choose_exhaustively(losses: &[Vec<f64>], tolerance: f64) -> usize {
        let worst: Vec<f64> = losses
            .iter()
            .map(|row| worst(row.iter().copied()))
            .collect();
        if let Some(i) = worst.iter().rposition(|&w| w <= tolerance) {
            return i;
        }
        let min = worst.iter().copied().fold(f64::INFINITY, f64::min);
        worst.iter().position(|&w| w == min).unwrap_or(0)
    }

    fn loss_table() -> impl Strategy<Value = Vec<Vec<f64>>> {
        (1usize..9, 1usize..5).prop_flat_map(|(n, k)| {
            let loss = prop_oneof![8 => 0.0f64..0.1, 1 => Just(f64::INFINITY)];
            proptest::collection::vec(proptest::collection::vec(loss, k), n)
        })
    }

    proptest! {
        #[test]
        fn lambda_search_chooses_what_scoring_every_pair_chooses(
            losses in loss_table(),
            tolerance in 0.0f64..0.1,
        ) {
            let (n, k) = (losses.len(), losses[0].len());
            let mut scored = std::collections::HashSet::new();
            let got = search_lambda(n, k, tolerance, |i, f| {
                assert!(scored.insert((i, f)), "({i}, {f}) scored twice");
                Ok::<_, ()>(losses[i][f])
            })
            .unwrap();
            prop_assert_eq!(got, choose_exhaustively(&losses, tolerance));
            // When a λ passes, nothing below it is scored, and each λ above it stops at its
            // first fold out of tolerance.
            if losses[got].iter().all(|&l| l <= tolerance) {
                for &(i, f) in &scored {
                    prop_assert!(i >= got);
                    prop_assert!(losses[i][..f].iter().all(|&l| l <= tolerance));
                }
            } else {
                // The chosen λ was scored on every fold, and every other λ was either scored
                // on every fold or stopped at a worst loss that could not beat the chosen one.
                let w = worst(losses[got].iter().copied());
                prop_assert!((0..k).all(|f| scored.contains(&(got, f))));
                for i in (0..n).filter(|&i| i != got) {
                    let seen: Vec<f64> =
                        (0..k).filter(|&f| scored.contains(&(i, f))).map(|f| losses[i][f]).collect();
                    let partial = worst(seen.iter().copied());
                    prop_assert!(seen.len() == k || partial > w || (partial == w && i > got));
                }
            }
        }
    }

    #[test]
    fn lambda_search_stops_at_an_error() {
        let mut calls = 0;
        let got = search_lambda(4, 3, 0.02, |i, f| {
            calls += 1;
            if (i, f) == (3, 1) {
                Err("fold 1 failed")
            } else {
                Ok(0.0)
            }
        });
        assert_eq!(got, Err("fold 1 failed"));
        assert_eq!(calls, 2);
    }

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
                let mut cache = KmeansCache::new(seed);
                let empty: Vec<bool> = (1..=q_max)
                    .map(|q| {
                        partition::alternate(&ds.labels, cache.get(&ds.features, q), q, lambda)
                            .has_empty_block()
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

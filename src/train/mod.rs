//! The trainer: composes the stage trainers and writes one bundle.
//!
//! For each tree of the ensemble: PIFA label embeddings, the label partition (balanced, or
//! λ-weighted by the label frequencies when `lambda > 0`), then the node classifiers ([`crate::tree::train`]). A flat model is a single-leaf tree. The arrays go into
//! one bundle with a JSON `meta` section, written atomically.

pub mod bp;
pub mod refrag;
mod rerank;
pub mod shard;

use crate::bundle::{BundleWriter, FormatError};
use crate::cluster::SplitStrategy;
use crate::config::{ModelKind, TrainConfig, TreeNegatives};
use crate::data::{Dataset, LabelId, SparseMatrix};
use crate::defrag::train::{DefragArrays, Prototypes};
use crate::model::sections;
use crate::model::{Created, MODEL_FORMAT, ModelMeta};
use crate::rerank::train::{OvaArrays, RerankTrainError};
use crate::router::BpArrays;
use crate::text::Fitted;
use crate::tree::TreeError;
use crate::tree::build::{TreeParams, build_tree, build_tree_weighted, pifa_embeddings};
use crate::tree::freq::label_frequencies;
use crate::tree::layout::TreeLayout;
use crate::tree::train::{Negatives, TreeTrainError, train_tree};
use crate::tree::view::TreeArrays;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::time::Instant;
use thiserror::Error;

/// Why training failed.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The data cannot train a model.
    #[error("training data: {0}")]
    Data(String),
    /// A tree failed to train.
    #[error("tree {tree}: {source}")]
    Tree {
        /// The tree's index.
        tree: usize,
        /// Why.
        source: TreeTrainError,
    },
    /// The label tree could not be built.
    #[error("building the label tree: {0}")]
    Layout(#[from] TreeError),
    /// The bundle could not be written.
    #[error(transparent)]
    Bundle(#[from] FormatError),
    /// The BP stage failed.
    #[error("BP: {0}")]
    Bp(String),
    /// The OVA reranker could not be trained.
    #[error("OVA reranker: {0}")]
    Rerank(#[from] RerankTrainError),
    /// The search refused a training point while proposing the OVA reranker's candidates.
    #[error("OVA reranker: searching training point {point}: {source}")]
    RerankSearch {
        /// The point (its row in the training data).
        point: usize,
        /// Why.
        source: crate::model::QueryError,
    },
    /// The fold model refused a held-out point while REFRAG's weights were chosen.
    #[error("REFRAG weights: predicting held-out point {point}: {source}")]
    RefragSearch {
        /// The point (its row in the held-out fold).
        point: usize,
        /// Why.
        source: crate::model::QueryError,
    },
    /// The model could not be opened to search the training points for the reranker.
    #[error("opening the trained model for the reranker: {0}")]
    Open(String),
    /// FIAT's feature clustering failed.
    #[error("FIAT feature clustering: {0}")]
    Fiat(crate::cluster::ClusterError),
    /// The DEFRAG feature clustering failed.
    #[error("tree {tree}: DEFRAG feature clustering: {source}")]
    Defrag {
        /// The tree's index.
        tree: usize,
        /// Why.
        source: crate::cluster::ClusterError,
    },
}

/// The stream of `seed` that FIAT's feature clustering draws from (apart from the members').
const FIAT_SEED_STREAM: u64 = 0xF1A7;

/// Progress callbacks, so the CLI can show bars and tests can stay quiet.
pub trait Progress: Sync {
    /// A phase starts with `total` steps.
    fn phase(&self, name: &str, total: u64);
    /// One step of the current phase is done.
    fn step(&self);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn phase(&self, _: &str, _: u64) {}
    fn step(&self) {}
}

/// What training produced, before it is written.
#[derive(Debug)]
pub struct Trained {
    /// The trees' arrays (none when BP is on: the blocks hold the models).
    pub trees: Vec<TreeArrays<Vec<u32>, Vec<f32>>>,
    /// The BP router and block models, when BP is on.
    pub bp: Option<BpArrays<Vec<u32>, Vec<f32>>>,
    /// Per tree, its DEFRAG arrays (empty when DEFRAG is off).
    pub defrag: Vec<DefragArrays>,
    /// REFRAG's prototypes over the input features, when `refrag` is on without DEFRAG.
    pub prototypes: Option<Prototypes>,
    /// The OVA reranker's scorers, when `rerank_model = "ova"`.
    pub rerank: Option<OvaArrays>,
    /// FIAT's C^F over the input features, when `fiat.input` is on.
    pub fiat: Option<crate::defrag::fiat::CoRows>,
    /// Training-set count of each label (for propensities and rare-label handling).
    pub label_counts: Vec<u32>,
    /// Label names, when known.
    pub label_names: Option<Vec<String>>,
    /// Feature names, when known.
    pub feature_names: Option<Vec<String>>,
    /// The text vectorizer, when the model is trained from text.
    pub text: Option<Fitted>,
    /// The metadata; the caller may add held-out metrics and timings before writing.
    pub meta: ModelMeta,
}

impl Trained {
    /// Lays the model out as a bundle; the writer borrows the arrays.
    pub fn writer(&self) -> Result<BundleWriter<'_>, FormatError> {
        let mut w = self.sections()?;
        w.add_json(sections::META, &self.meta)?;
        Ok(w)
    }

    /// Every section but the metadata: what the content version hashes.
    fn sections(&self) -> Result<BundleWriter<'_>, FormatError> {
        // The order is the bundle's section order: changing it changes every bundle's bytes.
        let mut w = BundleWriter::new();
        sections::write_arrays(
            &mut w,
            &self.trees,
            self.bp.as_ref(),
            &self.label_counts,
            self.meta.config.weights,
        )?;
        sections::write_flat_orders(&mut w, &self.trees, self.meta.loss)?;
        sections::write_defrag(&mut w, &self.defrag)?;
        if let Some(p) = &self.prototypes {
            sections::write_input_prototypes(&mut w, p)?;
        }
        sections::write_ova(&mut w, self.rerank.as_ref())?;
        sections::write_fiat(&mut w, self.fiat.as_ref())?;
        sections::write_names(
            &mut w,
            self.label_names.as_deref(),
            self.feature_names.as_deref(),
        )?;
        sections::write_text(&mut w, self.text.as_ref())?;
        Ok(w)
    }

    /// The bundle's bytes, e.g. to open the model in memory before writing it.
    pub fn to_bytes(&self) -> Result<Vec<u8>, FormatError> {
        self.writer()?.to_bytes()
    }

    /// Writes the bundle atomically to `path`, returning its size in bytes.
    pub fn write(&self, path: &std::path::Path) -> Result<u64, FormatError> {
        self.writer()?.write_atomic(path)
    }
}

/// Extra, optional inputs of a training run.
#[derive(Debug, Default)]
pub struct TrainInputs {
    /// Label names, one per label.
    pub label_names: Option<Vec<String>>,
    /// Feature names, one per feature.
    pub feature_names: Option<Vec<String>>,
    /// Statistics of the training file, recorded in the metadata.
    pub train_stats: serde_json::Value,
    /// The text vectorizer the rows were made with, stored in the bundle.
    pub text: Option<Fitted>,
}

/// Trains a model on `ds` (rows already normalized if the config says so) and lays out its bundle.
/// `heldout` is filled in later by the caller if it evaluates on a test file.
///
/// With REFRAG on and `refrag_search` on, REFRAG's (α, γ_r) are first chosen on a held-out fold
/// ([`refrag`]) and become the model's; the fold's figures are recorded as `meta.refrag`.
pub fn train(
    ds: &Dataset,
    cfg: &TrainConfig,
    inputs: TrainInputs,
    progress: &dyn Progress,
) -> Result<Trained, TrainError> {
    if !(cfg.defrag.refrag && cfg.defrag.search.0) {
        return train_model(ds, cfg, inputs, progress);
    }
    check_inputs(ds, &inputs)?;
    let start = Instant::now();
    let choice = refrag::search(ds, cfg, progress)?;
    let search_s = start.elapsed().as_secs_f64();
    let mut cfg = cfg.clone();
    if let Some(c) = &choice {
        cfg.defrag.alpha = c.alpha;
        cfg.defrag.gamma_r = c.gamma;
    }
    let mut trained = train_model(ds, &cfg, inputs, progress)?;
    trained.meta.refrag = choice;
    trained
        .meta
        .created
        .seconds
        .insert("refrag_search".into(), search_s.into());
    Ok(trained)
}

/// [`train`] with REFRAG's weights as `cfg` gives them.
fn train_model(
    ds: &Dataset,
    cfg: &TrainConfig,
    inputs: TrainInputs,
    progress: &dyn Progress,
) -> Result<Trained, TrainError> {
    check_inputs(ds, &inputs)?;
    let mut seconds = serde_json::Map::new();
    // FIAT's C^F comes first: with `fiat.train`, every stage trains on the imputed rows.
    let (fiat, imputed) = fiat_stage(ds, cfg, &mut seconds)?;
    let ds = imputed.as_ref().unwrap_or(ds);
    let mut trees = Vec::with_capacity(cfg.trees);
    let mut tree_stats = Vec::with_capacity(cfg.trees);
    let mut bp = None;
    let mut defrag = Vec::new();
    if cfg.bp {
        if cfg.defrag.on() {
            return Err(TrainError::Bp(
                "BP with DEFRAG is not supported yet: set defrag=off or bp=off".into(),
            ));
        }
        let trained = bp::train_bp(ds, cfg, progress)?;
        for (name, s) in &trained.seconds {
            seconds.insert(name.clone(), (*s).into());
        }
        tree_stats = trained.block_stats.clone();
        bp = Some(trained);
    } else {
        train_trees(
            ds,
            cfg,
            progress,
            &mut seconds,
            &mut trees,
            &mut tree_stats,
            &mut defrag,
        )?;
    }
    let prototypes = (cfg.defrag.refrag && !cfg.defrag.on()).then(|| {
        let start = Instant::now();
        let p = crate::defrag::train::input_prototypes(
            &ds.features,
            &ds.labels,
            cfg.defrag.prototype_entries.0,
        );
        seconds.insert("refrag".into(), start.elapsed().as_secs_f64().into());
        p
    });
    let mut trained = assemble(
        DataFacts::of(ds, inputs.train_stats.is_null()),
        cfg,
        inputs,
        Parts {
            trees,
            tree_stats,
            bp,
            defrag,
            prototypes,
            fiat,
            seconds,
        },
    );
    if cfg.rerank.on() {
        let start = Instant::now();
        trained.rerank = Some(rerank::train_rerank(&mut trained, ds, cfg, progress)?);
        trained
            .meta
            .created
            .seconds
            .insert("rerank".into(), start.elapsed().as_secs_f64().into());
    }
    trained.meta.version = content_hash(&trained)?;
    Ok(trained)
}

/// What a model's metadata and label counts take from its training data: its shape, each
/// label's count and its statistics. The merge of shards has it from the plan, not the data.
#[derive(Debug)]
pub(crate) struct DataFacts {
    /// Points, features and labels.
    pub shape: [usize; 3],
    /// Training-set count of each label.
    pub label_counts: Vec<u32>,
    /// [`crate::data::DataStats`] of the data, when known.
    pub stats: Option<serde_json::Value>,
}

impl DataFacts {
    /// The facts of `ds`, its statistics computed only if `with_stats`.
    pub(crate) fn of(ds: &Dataset, with_stats: bool) -> DataFacts {
        DataFacts {
            shape: [ds.n_points(), ds.n_features(), ds.n_labels()],
            label_counts: crate::data::label_counts(&ds.labels),
            stats: with_stats
                .then(|| serde_json::to_value(crate::data::DataStats::of(ds)).unwrap_or_default()),
        }
    }
}

/// Refuses data that cannot train a model, and names or a vectorizer that do not fit it.
fn check_inputs(ds: &Dataset, inputs: &TrainInputs) -> Result<(), TrainError> {
    check_shape([ds.n_points(), ds.n_features(), ds.n_labels()], inputs)
}

/// [`check_inputs`] for data of shape `[points, features, labels]`.
fn check_shape(
    [n_points, n_features, n_labels]: [usize; 3],
    inputs: &TrainInputs,
) -> Result<(), TrainError> {
    if n_labels == 0 {
        return Err(TrainError::Data("the data has no labels (L = 0)".into()));
    }
    if n_points == 0 {
        return Err(TrainError::Data("the data has no points".into()));
    }
    for (names, n, what) in [
        (&inputs.label_names, n_labels, "label"),
        (&inputs.feature_names, n_features, "feature"),
    ] {
        if let Some(names) = names.as_ref().filter(|names| names.len() != n) {
            return Err(TrainError::Data(format!(
                "{} {what} names for {n} {what}s",
                names.len()
            )));
        }
    }
    if let Some(text) = inputs.text.as_ref().filter(|t| t.idf.len() != n_features) {
        return Err(TrainError::Data(format!(
            "the text vectorizer has {} terms for {n_features} features",
            text.idf.len(),
        )));
    }
    Ok(())
}

/// The trained parts of a model, before its metadata.
struct Parts {
    trees: Vec<TreeArrays<Vec<u32>, Vec<f32>>>,
    tree_stats: Vec<serde_json::Value>,
    bp: Option<bp::BpTrained>,
    defrag: Vec<DefragArrays>,
    prototypes: Option<Prototypes>,
    fiat: Option<crate::defrag::fiat::CoRows>,
    seconds: serde_json::Map<String, serde_json::Value>,
}

/// The model of `parts` with its metadata, but for the content version (and the reranker).
fn assemble(data: DataFacts, cfg: &TrainConfig, inputs: TrainInputs, parts: Parts) -> Trained {
    let Parts {
        trees,
        tree_stats,
        bp,
        defrag,
        prototypes,
        fiat,
        seconds,
    } = parts;
    let DataFacts {
        shape: [_, n_features, n_labels],
        label_counts,
        stats,
    } = data;
    let meta = ModelMeta {
        format: MODEL_FORMAT.to_string(),
        name: if cfg.name.is_empty() {
            "xmc-model".to_string()
        } else {
            cfg.name.clone()
        },
        // Set below, once every section is known.
        version: String::new(),
        n_features,
        n_labels,
        trees: cfg.trees,
        loss: cfg.solver.loss,
        normalize: cfg.normalize,
        beam: cfg.beam,
        has_label_names: inputs.label_names.is_some(),
        has_feature_names: inputs.feature_names.is_some(),
        config: cfg.clone(),
        train_data: match (inputs.train_stats, stats) {
            (serde_json::Value::Null, Some(stats)) => stats,
            (given, _) => given,
        },
        heldout: None,
        tree_stats,
        bp: bp.as_ref().map(|b| b.meta.clone()),
        text: inputs.text.as_ref().map(|t| t.meta.clone()),
        refrag: None,
        created: Created {
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            seconds,
        },
    };
    Trained {
        trees,
        bp: bp.map(|b| b.arrays),
        defrag,
        prototypes,
        rerank: None,
        fiat,
        label_counts,
        label_names: inputs.label_names,
        feature_names: inputs.feature_names,
        text: inputs.text,
        meta,
    }
}

/// FIAT's C^F over the input features when `fiat.input` is on, and with `fiat.train` the
/// training rows imputed through it (by the one function the request path imputes with).
fn fiat_stage(
    ds: &Dataset,
    cfg: &TrainConfig,
    seconds: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(Option<crate::defrag::fiat::CoRows>, Option<Dataset>), TrainError> {
    if !cfg.fiat.input {
        return Ok((None, None));
    }
    let start = Instant::now();
    let seed = crate::seed::derive_seed(cfg.seed, FIAT_SEED_STREAM);
    let co = crate::defrag::fiat::build(ds, &cfg.fiat, seed).map_err(TrainError::Fiat)?;
    seconds.insert("fiat".into(), start.elapsed().as_secs_f64().into());
    if !cfg.fiat.train {
        return Ok((Some(co), None));
    }
    let start = Instant::now();
    let imputed = crate::defrag::fiat::impute_rows(&co, &ds.features, &cfg.fiat, cfg.normalize);
    seconds.insert("fiat_rows".into(), start.elapsed().as_secs_f64().into());
    let imputed = Dataset {
        features: imputed,
        labels: ds.labels.clone(),
    };
    Ok((Some(co), Some(imputed)))
}

/// The label trees of a model without BP: every member's partition, then every member's
/// classifiers, into `trees`, `tree_stats` and `defrag`, with their timings in `seconds`.
fn train_trees(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
    seconds: &mut serde_json::Map<String, serde_json::Value>,
    trees: &mut Vec<TreeArrays<Vec<u32>, Vec<f32>>>,
    tree_stats: &mut Vec<serde_json::Value>,
    defrag: &mut Vec<DefragArrays>,
) -> Result<(), TrainError> {
    let (seeds, members) = partition_members(ds, cfg, progress, seconds)?;
    let n_nodes: usize = members.iter().map(|m| m.layout.n_nodes()).sum();
    progress.phase("classifiers", n_nodes as u64);
    let trained: Vec<OneTree> = members
        .par_iter()
        .zip(&seeds)
        .enumerate()
        .map(|(t, (m, &seed))| {
            let member_ds = m.defrag.as_ref().map_or(ds, |b| &b.dataset);
            tree_classifiers(member_ds, cfg, &m.layout, seed, &|| progress.step())
                .map_err(|e| e.for_tree(t))
        })
        .collect::<Result<_, _>>()?;
    for (t, (m, one)) in members.into_iter().zip(trained).enumerate() {
        if let Some(built) = &m.defrag {
            seconds.insert(
                format!("tree{t}_defrag_clustering"),
                built.arrays.cluster_seconds.into(),
            );
            seconds.insert(format!("tree{t}_defrag"), m.defrag_s.into());
        }
        seconds.insert(format!("tree{t}_partition"), m.partition_s.into());
        seconds.insert(format!("tree{t}_classifiers"), one.classifiers_s.into());
        let mut stats = one.stats;
        if let Some(built) = m.defrag {
            if let Some(obj) = stats.as_object_mut() {
                obj.insert("defrag".into(), defrag_stats(&built.arrays));
            }
            defrag.push(built.arrays);
        }
        tree_stats.push(stats);
        trees.push(one.arrays);
    }
    Ok(())
}

/// Every ensemble member's seed and partition (with its DEFRAG clustering when on); the shared
/// embeddings' time goes into `seconds`.
fn partition_members(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
    seconds: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(Vec<u64>, Vec<Member>), TrainError> {
    // λ = 0 is Parabel's balanced split, taken by its own code path so that such trees stay
    // exactly what they were before the λ split existed.
    let weighted = cfg.model == ModelKind::Tree && cfg.lambda > 0.0;
    let freqs = weighted.then(|| label_frequencies(&ds.labels, cfg.freq));
    // The trees are independent, so they train concurrently: the members' partitions first,
    // then every member's classifiers in one pool, so that one tree's narrow top levels (a
    // root with two columns) overlap with another's wide bottom ones. Each member's seed and
    // each column's seed are fixed, so the bundle does not depend on the schedule.
    let seeds: Vec<u64> = (0..cfg.trees)
        .map(|t| crate::seed::member_seed(cfg.seed, t as u64))
        .collect();
    progress.phase(
        if cfg.defrag.on() {
            "feature clusters and label partitions"
        } else {
            "label partitions"
        },
        cfg.trees as u64,
    );
    // Without DEFRAG every member partitions the same label embeddings: they are computed
    // once, not once per tree (and held once).
    let start = Instant::now();
    let shared = (cfg.model == ModelKind::Tree && !cfg.defrag.on() && cfg.trees > 1)
        .then(|| pifa_embeddings(ds));
    if shared.is_some() {
        seconds.insert("embeddings".into(), start.elapsed().as_secs_f64().into());
    }
    let members: Vec<Member> = seeds
        .par_iter()
        .enumerate()
        .map(|(t, &seed)| {
            let member = partition_member(ds, cfg, freqs.as_ref(), shared.as_ref(), seed, t);
            progress.step();
            member
        })
        .collect::<Result<_, _>>()?;
    Ok((seeds, members))
}

/// One trained tree, with its statistics and timings.
pub(crate) struct OneTree {
    /// Its arrays.
    pub arrays: TreeArrays<Vec<u32>, Vec<f32>>,
    /// Node, leaf, depth and weight counts for the metadata.
    pub stats: serde_json::Value,
    /// Seconds spent on the label partition.
    pub partition_s: f64,
    /// Seconds spent on the node classifiers.
    pub classifiers_s: f64,
}

/// Why one tree failed, before the caller says which tree it was.
pub(crate) enum OneTreeError {
    Layout(TreeError),
    Classifiers(TreeTrainError),
}

impl OneTreeError {
    /// The trainer's error for tree `t` of the ensemble.
    pub fn for_tree(self, t: usize) -> TrainError {
        match self {
            OneTreeError::Layout(e) => TrainError::Layout(e),
            OneTreeError::Classifiers(source) => TrainError::Tree { tree: t, source },
        }
    }
}

/// One ensemble member before its classifiers: its DEFRAG clustering (when on) and its layout.
struct Member {
    defrag: Option<crate::defrag::train::Built>,
    /// Seconds spent on DEFRAG, clustering included.
    defrag_s: f64,
    layout: TreeLayout,
    /// Seconds spent on the label partition.
    partition_s: f64,
}

/// Member `t`'s feature clustering (DEFRAG: a fresh one per member, App. A.3) and label tree,
/// on `embeddings` when given (the PIFA embeddings of `ds`, shared by the members).
fn partition_member(
    ds: &Dataset,
    cfg: &TrainConfig,
    freqs: Option<&crate::tree::LabelFrequencies>,
    embeddings: Option<&SparseMatrix>,
    seed: u64,
    t: usize,
) -> Result<Member, TrainError> {
    let start = Instant::now();
    let defrag = if cfg.defrag.on() {
        Some(
            crate::defrag::train::build(
                ds,
                &cfg.defrag,
                cfg.normalize,
                crate::seed::derive_seed(seed, 0xDEF8A6),
            )
            .map_err(|source| TrainError::Defrag { tree: t, source })?,
        )
    } else {
        None
    };
    let defrag_s = start.elapsed().as_secs_f64();
    let member_ds = defrag.as_ref().map_or(ds, |b| &b.dataset);
    let start = Instant::now();
    let layout = tree_layout(member_ds, cfg, cfg.model, freqs, embeddings, seed)
        .map_err(|e| OneTreeError::Layout(e).for_tree(t))?;
    Ok(Member {
        defrag,
        defrag_s,
        layout,
        partition_s: start.elapsed().as_secs_f64(),
    })
}

/// The layout of one model of kind `kind` on `ds`: a label tree (balanced, or λ-weighted with
/// `freqs`) or a flat one-leaf tree. A tree partitions `embeddings` when given (they must be
/// `ds`'s PIFA embeddings), else computes them.
fn tree_layout(
    ds: &Dataset,
    cfg: &TrainConfig,
    kind: ModelKind,
    freqs: Option<&crate::tree::LabelFrequencies>,
    embeddings: Option<&SparseMatrix>,
    seed: u64,
) -> Result<TreeLayout, TreeError> {
    match kind {
        ModelKind::Flat => single_leaf(ds.n_labels()),
        ModelKind::Tree => {
            let own;
            let emb = match embeddings {
                Some(e) => e,
                None => {
                    own = pifa_embeddings(ds);
                    &own
                }
            };
            let mut params = TreeParams {
                branching: cfg.branching,
                max_leaf: cfg.max_leaf,
                seed,
                ..TreeParams::DEFAULT
            };
            match freqs {
                Some(freqs) => {
                    params.strategy = SplitStrategy::Weighted {
                        lambda: cfg.lambda,
                        gamma: cfg.gamma,
                    };
                    build_tree_weighted(emb, &params, freqs)
                }
                None => build_tree(emb, &params),
            }
        }
    }
}

/// Trains the classifiers of `layout` on `ds`, calling `on_node_done` after each node.
fn tree_classifiers(
    ds: &Dataset,
    cfg: &TrainConfig,
    layout: &TreeLayout,
    seed: u64,
    on_node_done: &(dyn Fn() + Sync),
) -> Result<OneTree, OneTreeError> {
    let start = Instant::now();
    let solver = crate::linear::SolverParams { seed, ..cfg.solver };
    let negatives = match cfg.negatives {
        TreeNegatives::Tfn => Negatives::TeacherForced,
        TreeNegatives::Man => Negatives::Matcher {
            beam: if cfg.man_beam == 0 {
                cfg.beam
            } else {
                cfg.man_beam
            },
        },
    };
    let arrays = train_tree(ds, layout, &solver, negatives, on_node_done)
        .map_err(OneTreeError::Classifiers)?;
    let classifiers_s = start.elapsed().as_secs_f64();
    Ok(OneTree {
        stats: tree_stats(layout, &arrays),
        arrays,
        partition_s: 0.0,
        classifiers_s,
    })
}

/// A tree's node, leaf, depth and weight counts, for the metadata's `tree_stats`.
fn tree_stats(layout: &TreeLayout, arrays: &TreeArrays<Vec<u32>, Vec<f32>>) -> serde_json::Value {
    serde_json::json!({
        "nodes": layout.n_nodes(),
        "leaves": (0..layout.n_nodes()).filter(|&i| layout.is_leaf(i)).count(),
        "leaf_depth_histogram": layout
            .depth_histogram()
            .iter()
            .map(|d| d.leaves)
            .collect::<Vec<_>>(),
        "weights": arrays.chunks.n_weights(),
    })
}

/// Trains one model of kind `kind` on `ds`: a label tree (balanced, or λ-weighted with `freqs`)
/// or a flat one-leaf tree, then its classifiers. `name` labels the progress phases.
pub(crate) fn train_one_tree(
    ds: &Dataset,
    cfg: &TrainConfig,
    kind: ModelKind,
    freqs: Option<&crate::tree::LabelFrequencies>,
    seed: u64,
    progress: &dyn Progress,
    name: &str,
) -> Result<OneTree, OneTreeError> {
    let start = Instant::now();
    if kind == ModelKind::Tree {
        progress.phase(&format!("tree {name}: label partition"), 1);
    }
    let layout = tree_layout(ds, cfg, kind, freqs, None, seed).map_err(OneTreeError::Layout)?;
    if kind == ModelKind::Tree {
        progress.step();
    }
    let partition_s = start.elapsed().as_secs_f64();
    progress.phase(
        &format!("tree {name}: classifiers"),
        layout.n_nodes() as u64,
    );
    let mut one = tree_classifiers(ds, cfg, &layout, seed, &|| progress.step())?;
    one.partition_s = partition_s;
    Ok(one)
}

/// The layout of a flat model: the root is the only node, a leaf holding every label.
pub(crate) fn single_leaf(n_labels: usize) -> Result<TreeLayout, TreeError> {
    let n = u32::try_from(n_labels).map_err(|_| TreeError::InvalidParam {
        name: "n_labels",
        reason: format!("{n_labels} labels do not fit u32 ids"),
    })?;
    TreeLayout::from_parts(
        vec![0],
        vec![0],
        vec![0],
        vec![0, n],
        (0..n).map(LabelId).collect(),
        n_labels,
    )
}

/// The reproducible clustering statistics of one member, for `tree_stats`.
fn defrag_stats(a: &DefragArrays) -> serde_json::Value {
    // Prototypes in the input space would hold every feature of every cluster they touch.
    let unagglomerated = a.prototypes.as_ref().map(|p| {
        p.idx
            .iter()
            .map(|&c| u64::from(a.sizes[c as usize]))
            .sum::<u64>()
    });
    // FIAT's scale s_j is 1 plus the cosines of feature j to the rest of its cluster: near 1,
    // imputation changes nothing.
    let scale_stats = a.scale.as_ref().map(|s| {
        let n = s.len().max(1) as f64;
        let mean = s.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let near_one = s.iter().filter(|&&v| v < 1.1).count() as f64 / n;
        (mean, near_one)
    });
    serde_json::json!({
        "clusters": a.sizes.len(),
        "fiat_scale_mean": scale_stats.map(|s| s.0),
        "fiat_scale_below_1_1": scale_stats.map(|s| s.1),
        "balance_factor": crate::defrag::balance_factor(&a.sizes),
        "normalized_entropy": crate::defrag::normalized_entropy(&a.sizes),
        "prototype_nnz": a.prototypes.as_ref().map(|p| p.idx.len()),
        "prototype_nnz_unagglomerated": unagglomerated,
        "unrepresented_sampled": a.unrepresented_sampled,
        "unrepresented": a.unrepresented,
    })
}

/// The model's version: a content hash of every section but `meta`.
fn content_hash(t: &Trained) -> Result<String, FormatError> {
    let w = t.sections()?;
    let mut hasher = HashWriter(Sha256::new());
    w.write_to(&mut hasher)?;
    let digest = hasher.0.finalize();
    Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
}

/// Feeds written bytes to a SHA-256, so a bundle is hashed as it streams, never held whole.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

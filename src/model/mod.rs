//! The request path: one immutable model over one bundle, answering `predict(query, options)`.
//!
//! [`Model`] composes the stage views stored in a bundle: the label trees of an ensemble (a flat
//! one-vs-all model is a tree whose root is its only leaf), each with its DEFRAG agglomeration and
//! REFRAG prototypes when the model has them, or the BP router and its block models. It is
//! validated once, at open; after that a prediction only reads the memory map, and with a warm
//! [`Scratch`] it allocates nothing.

pub mod evaluate;
mod meta;
mod names;
mod prediction;
mod query;
pub mod sections;
mod stage;

pub use meta::{Created, FoldFigures, GridPoint, MODEL_FORMAT, ModelMeta, RefragChoice};
pub use names::Names;
pub use prediction::{PredictOptions, Prediction};
pub use query::QueryError;
pub use sections::{defrag_section, refrag_section, tree_section};

use crate::bundle::{Bundle, FormatError, OpenOptions, Section};
use crate::data::LabelId;
use crate::defrag::view::{Agglomerated, DefragView, DefragViewError};
use crate::linear::Loss;
use crate::rerank::{LabelRows, LabelRowsError, OvaScorers};
use crate::router::{BpArrays, BpQuery, BpScratch, BpViewError};
use crate::text::TextView;
use crate::tree::chunk::Widths;
use crate::tree::view::{Candidate, SearchScratch, TreeArrays, TreeViewError};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Entry outputs as a memory-mapped bundle section of whichever width it was written at.
pub type MappedOuts = Widths<Section<u8>, Section<u16>, Section<u32>>;

/// A tree whose arrays are memory-mapped bundle sections.
pub type MappedTree = TreeArrays<Section<u32>, Section<f32>, MappedOuts>;

/// Why a bundle could not be opened as a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The container itself is bad.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The metadata is not an xmc model's.
    #[error("bundle metadata: {0}")]
    Meta(String),
    /// The BP sections are inconsistent.
    #[error(transparent)]
    Bp(#[from] BpViewError),
    /// A tree's DEFRAG sections are inconsistent.
    #[error("tree {tree}: DEFRAG sections: {source}")]
    Defrag {
        /// The tree's index in the ensemble.
        tree: usize,
        /// What is wrong.
        source: DefragViewError,
    },
    /// The OVA reranker's sections are inconsistent or missing.
    #[error("OVA reranker sections: {0}")]
    Rerank(#[from] LabelRowsError),
    /// REFRAG's prototypes over the input features are inconsistent.
    #[error("REFRAG prototype sections: {0}")]
    Prototypes(LabelRowsError),
    /// The metadata asks for REFRAG on a model without DEFRAG, but the bundle lacks its
    /// prototypes.
    #[error("the metadata says refrag = on, but the bundle has no {0} section")]
    PrototypesMissing(String),
    /// The metadata asks for a reranker whose sections the bundle lacks.
    #[error("the metadata says rerank_model = ova, but the bundle has no {0} section")]
    RerankMissing(String),
    /// FIAT's C^F rows are inconsistent.
    #[error("FIAT C^F sections: {0}")]
    Fiat(LabelRowsError),
    /// The metadata asks for FIAT in the input space, but the bundle lacks C^F.
    #[error("the metadata says fiat.input = true, but the bundle has no {0} section")]
    FiatMissing(String),
    /// The text vectorizer's sections are inconsistent.
    #[error("text vectorizer: {0}")]
    Text(#[from] crate::text::TextViewError),
    /// A tree's arrays are inconsistent.
    #[error("tree {tree}: {source}")]
    Tree {
        /// The tree's index in the ensemble.
        tree: usize,
        /// What is wrong.
        source: TreeViewError,
    },
}

/// Reusable per-thread buffers for [`Model::predict_into`].
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    dense: Vec<f32>,
    q_idx: Vec<u32>,
    q_val: Vec<f32>,
    search: SearchScratch,
    merged: Vec<Candidate>,
    bp: BpScratch,
    /// The query in one member's agglomerated space.
    agg: Agglomerated,
    /// With REFRAG, every member's agglomerated query, kept from the tree search for the
    /// rerank.
    kept: KeptQueries,
    /// Per candidate, a reranker's log-score (for REFRAG, first the summed affinity over the
    /// members).
    affinity: Vec<f32>,
    /// FIAT's accumulator, and the query before imputation.
    fiat: crate::defrag::fiat::ImputeScratch,
    f_idx: Vec<u32>,
    f_val: Vec<f32>,
}

impl Scratch {
    /// The lengths of the buffers that grow with a model's shape.
    pub fn sizes(&self) -> ScratchSizes {
        ScratchSizes {
            dense: self.dense.len(),
            acc: self.search.acc_len(),
            bp_acc: self.bp.acc_len(),
            clusters: self.agg.acc_len(),
        }
    }
}

/// Sparse queries back to back, in the order they were pushed.
#[derive(Clone, Debug, Default)]
struct KeptQueries {
    idx: Vec<u32>,
    val: Vec<f32>,
    /// Per query, the end of its entries.
    end: Vec<usize>,
}

impl KeptQueries {
    fn clear(&mut self) {
        self.idx.clear();
        self.val.clear();
        self.end.clear();
    }

    fn push(&mut self, idx: &[u32], val: &[f32]) {
        self.idx.extend_from_slice(idx);
        self.val.extend_from_slice(val);
        self.end.push(self.idx.len());
    }

    fn len(&self) -> usize {
        self.end.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&[u32], &[f32])> {
        let starts = std::iter::once(0).chain(self.end.iter().copied());
        starts
            .zip(&self.end)
            .map(|(s, &e)| (&self.idx[s..e], &self.val[s..e]))
    }
}

/// The lengths of the [`Scratch`] buffers that a model's shape sets, and that a prediction
/// grows (zero-filled, so every new page is faulted in on the request path) when they are
/// short. The rest of the scratch space grows with the query and `k`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchSizes {
    /// The dense query vector: the model's feature count.
    pub dense: usize,
    /// The tree search's output accumulator: [`crate::tree::chunk::OUT_SLOTS`] or the widest
    /// node's outputs.
    pub acc: usize,
    /// The BP block searches' accumulator.
    pub bp_acc: usize,
    /// DEFRAG's per-cluster accumulator.
    pub clusters: usize,
}

impl ScratchSizes {
    /// Whether buffers of these sizes serve `need` without growing.
    pub fn covers(&self, need: &ScratchSizes) -> bool {
        self.dense >= need.dense
            && self.acc >= need.acc
            && self.bp_acc >= need.bp_acc
            && self.clusters >= need.clusters
    }
}

/// A loaded, validated model.
pub struct Model {
    bundle: Bundle,
    meta: ModelMeta,
    trees: Vec<MappedTree>,
    /// Per tree, its bias order when it is flat and has one (else empty): see
    /// [`crate::tree::flat`].
    flat_orders: Vec<Section<u32>>,
    /// Per tree, a block index built in memory by [`Model::build_flat_blocks`] (else none).
    flat_blocks: Vec<Option<crate::tree::flat::FlatBlocks<Vec<u32>>>>,
    /// Score flat trees through their postings and bias order even where they have a block
    /// index.
    flat_unpruned: bool,
    /// Score flat trees by the scan over every label instead of their postings.
    flat_scan: bool,
    bp: Option<MappedBp>,
    defrag: Vec<MappedDefrag>,
    ova: Option<MappedOva>,
    /// REFRAG's prototypes over the input features (a model without DEFRAG).
    protos: Option<MappedRows>,
    /// FIAT's C^F over the input features, one row per feature.
    fiat: Option<MappedRows>,
    label_names: LazyNames,
    feature_names: LazyNames,
    train_counts: Section<u32>,
    train_points: usize,
    text: Option<TextView>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.meta.name)
            .field("version", &self.meta.version)
            .field("trees", &self.trees.len())
            .finish()
    }
}

/// The BP stage over memory-mapped sections.
pub type MappedBp = BpArrays<Section<u32>, Section<f32>, MappedOuts>;

/// Label-major sparse rows as memory-mapped bundle sections.
pub type MappedRows = LabelRows<Section<u32>, Section<f32>>;

/// The OVA reranker's scorers as memory-mapped bundle sections.
pub type MappedOva = OvaScorers<Section<u32>, Section<f32>>;

/// One member's DEFRAG arrays as memory-mapped bundle sections.
pub type MappedDefrag = DefragView<Section<u32>, Section<f32>>;

impl Model {
    /// Opens and validates the bundle at `path`. With `verify_checksums` every section's CRC and
    /// every stored weight entry and name are checked ([`Model::from_bundle`], O(file)); without,
    /// only what costs O(nodes + labels) is ([`Model::from_bundle_structure`]), so opening takes
    /// the same few milliseconds whatever the bundle's size.
    pub fn open(path: &Path, options: &OpenOptions) -> Result<Model, ModelError> {
        let bundle = Bundle::open(path, options)?;
        if options.verify_checksums {
            Model::from_bundle(bundle)
        } else {
            Model::from_bundle_structure(bundle)
        }
    }

    /// Validates an opened bundle as a model: metadata, every tree's topology and weights, and
    /// the name sections. Every stored index is then known to be in range.
    pub fn from_bundle(bundle: Bundle) -> Result<Model, ModelError> {
        let model = Model::build(bundle, true)?;
        model.label_names.load(&model.bundle)?;
        model.feature_names.load(&model.bundle)?;
        Ok(model)
    }

    /// Validates an opened bundle as a model in O(nodes + labels): metadata, every tree's
    /// topology and the offsets and sizes of its node chunks, but not each weight entry, and the
    /// name sections are parsed on first use. Predicting from such a model cannot panic or loop;
    /// a corrupt weight entry can only give wrong scores. Checksums catch a damaged file: the
    /// server, by default (`load_checks = "checksums"`), verifies them and then opens with this;
    /// [`Model::from_bundle`] adds the O(weights) checks (`load_checks = "full"`).
    pub fn from_bundle_structure(bundle: Bundle) -> Result<Model, ModelError> {
        Model::build(bundle, false)
    }

    /// Everything [`Model::open`] with `verify_checksums` checks, on a model already open: every
    /// section's CRC, every weight entry, hash slot and name section.
    pub fn verify(&self) -> Result<(), ModelError> {
        self.bundle.verify_checksums()?;
        for (t, tree) in self.trees.iter().enumerate() {
            let d = self
                .defrag
                .get(t)
                .map_or(self.meta.n_features, |v| v.n_clusters());
            tree.validate(self.meta.n_labels, d)
                .and_then(|()| tree.check_flat_order(&self.flat_orders[t], self.meta.loss, true))
                .map_err(|source| ModelError::Tree { tree: t, source })?;
        }
        if let Some(bp) = &self.bp {
            bp.validate(self.meta.n_labels, self.meta.n_features)?;
        }
        if let Some(ova) = &self.ova {
            ova.check(self.meta.n_labels, self.meta.n_features)?;
        }
        if let Some(p) = &self.protos {
            p.check(self.meta.n_labels, self.meta.n_features)
                .map_err(ModelError::Prototypes)?;
        }
        self.label_names.read(&self.bundle)?;
        self.feature_names.read(&self.bundle)?;
        if let Some(text) = &self.text {
            text.verify()?;
        }
        Ok(())
    }

    fn build(bundle: Bundle, deep: bool) -> Result<Model, ModelError> {
        let meta: ModelMeta = bundle.json(sections::META)?;
        meta.check()?;
        let mut trees = Vec::with_capacity(meta.trees);
        let mut flat_orders = Vec::with_capacity(meta.trees);
        let bp = match &meta.bp {
            Some(bp) => Some(sections::load_bp(&bundle, &meta, bp, deep)?),
            None => None,
        };
        let mut defrag = Vec::new();
        let dp = &meta.config.defrag;
        for t in 0..meta.trees {
            if bp.is_some() {
                // A BP model's one member is its router and blocks (validated by `load_bp`).
                break;
            }
            let mut tree_features = meta.n_features;
            if dp.on() {
                let view = sections::load_defrag(&bundle, &meta, t)?;
                tree_features = view.n_clusters();
                defrag.push(view);
            }
            let tree = sections::load_tree(&bundle, &sections::tree_prefix(t))?;
            if deep {
                tree.validate(meta.n_labels, tree_features)
            } else {
                tree.validate_structure(meta.n_labels)
            }
            .map_err(|source| ModelError::Tree { tree: t, source })?;
            let order = sections::load_flat_order(&bundle, t)?;
            tree.check_flat_order(&order, meta.loss, deep)
                .map_err(|source| ModelError::Tree { tree: t, source })?;
            trees.push(tree);
            flat_orders.push(order);
        }
        let ova = sections::load_ova(&bundle, &meta, deep)?;
        let protos = sections::load_input_prototypes(&bundle, &meta, deep)?;
        let fiat = sections::load_fiat(&bundle, &meta, deep)?;
        let label_names =
            LazyNames::new(meta.has_label_names, sections::LABEL_NAMES, meta.n_labels);
        let feature_names = LazyNames::new(
            meta.has_feature_names,
            sections::FEATURE_NAMES,
            meta.n_features,
        );
        let train_counts = sections::load_train_counts(&bundle, &meta)?;
        // The vocabulary is read in place: opening it reads its header, whatever its size.
        let text = match &meta.text {
            Some(tm) => {
                let view = TextView::open(&bundle, tm, meta.n_features)?;
                if deep {
                    view.verify()?;
                }
                Some(view)
            }
            None => None,
        };
        let train_points = meta
            .train_data
            .get("n")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0) as usize;
        Ok(Model {
            bundle,
            meta,
            trees,
            flat_orders,
            flat_blocks: Vec::new(),
            flat_unpruned: false,
            flat_scan: false,
            bp,
            defrag,
            ova,
            protos,
            fiat,
            label_names,
            feature_names,
            train_counts,
            train_points,
            text,
        })
    }

    /// The metadata.
    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// The underlying bundle (for section sizes and checksums).
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// The trees of the ensemble (empty for a BP model: see [`Model::bp`]).
    pub fn trees(&self) -> &[MappedTree] {
        &self.trees
    }

    /// Scores flat trees, and a BP model's flat blocks, by the scan over every label (`true`)
    /// instead of through their postings and bias order, or the selection pass for blocks
    /// (`false`, the default). Both give the same answers to the bit;
    /// the scan is the reference that comparisons and benchmarks interleave with.
    pub fn set_flat_scan(&mut self, on: bool) {
        self.flat_scan = on;
    }

    /// Scores flat trees through their postings and bias order (`true`) instead of a block
    /// index built by [`Model::build_flat_blocks`] (`false`, the default, where one is built).
    /// Both give the scan's answers to the bit; [`Model::set_flat_scan`] takes precedence.
    pub fn set_flat_unpruned(&mut self, on: bool) {
        self.flat_unpruned = on;
    }

    /// Builds, in memory, a block index ([`crate::tree::flat::FlatBlocks`]) with blocks of
    /// `2^shift` outputs and records for features of at least `long` entries for every flat
    /// tree, which then scores it ([`crate::tree::view::TreeArrays::flat_prune`]). The index
    /// is not stored in bundles: measured, it answers more slowly than the scan with its
    /// selection pass (docs/decisions/0055-flat-selection-pass-not-block-pruning.md); this is
    /// for benchmarks that compare them. Returns the index's size in bytes (0 for a model
    /// without flat trees). O(weights).
    pub fn build_flat_blocks(&mut self, shift: u32, long: u32) -> usize {
        self.flat_blocks = self
            .trees
            .iter()
            .map(|tree| tree.flat_blocks(shift, long))
            .collect();
        self.flat_blocks
            .iter()
            .flatten()
            .map(|b| b.byte_len())
            .sum()
    }

    /// Tree `t`'s block index, when [`Model::build_flat_blocks`] built one.
    pub fn flat_blocks(&self, t: usize) -> Option<&crate::tree::flat::FlatBlocks<Vec<u32>>> {
        self.flat_blocks.get(t).and_then(Option::as_ref)
    }

    /// Tree `t`'s bias order ([`crate::tree::flat`]; empty for a label tree, or a flat tree
    /// stored without one).
    pub fn flat_order(&self, t: usize) -> &[u32] {
        self.flat_orders.get(t).map_or(&[], |o| o)
    }

    /// The BP router and block models, when the model has them.
    pub fn bp(&self) -> Option<&MappedBp> {
        self.bp.as_ref()
    }

    /// Whether the model has REFRAG prototypes, which `rerank` needs.
    pub fn can_rerank(&self) -> bool {
        self.protos.is_some() || self.defrag.first().is_some_and(|v| v.has_prototypes())
    }

    /// REFRAG's prototypes over the input features, when the model has them (a model without
    /// DEFRAG trained with `refrag = on`).
    pub fn input_prototypes(&self) -> Option<&MappedRows> {
        self.protos.as_ref()
    }

    /// Whether the model has OVA reranker scorers, which `rerank_ova` needs.
    pub fn can_rerank_ova(&self) -> bool {
        self.ova.is_some()
    }

    /// The OVA reranker's scorers, when the model has them.
    pub fn ova(&self) -> Option<&MappedOva> {
        self.ova.as_ref()
    }

    /// Whether the model has FIAT scales or FIAT's C^F, which `impute` needs.
    pub fn can_impute(&self) -> bool {
        self.fiat.is_some() || self.defrag.first().is_some_and(|v| v.has_fiat())
    }

    /// FIAT's C^F over the input features, when the model has it (`fiat.input`).
    pub fn fiat(&self) -> Option<&MappedRows> {
        self.fiat.as_ref()
    }

    /// Per tree, its DEFRAG view (empty when the model has no feature clusters).
    pub fn defrag(&self) -> &[MappedDefrag] {
        &self.defrag
    }

    /// The text vectorizer, when the model was trained from text.
    pub fn text(&self) -> Option<&TextView> {
        self.text.as_ref()
    }

    /// The label names, when the model has them.
    pub fn label_names(&self) -> Option<&Names> {
        self.label_names.get(&self.bundle)
    }

    /// Predicts the top labels for one query given as feature ids and values (any order;
    /// duplicates are summed). Fails, without panicking, on an out-of-range id or a non-finite
    /// value.
    ///
    /// With early stopping, each tree returns its own exact top k (within the beam cap and the
    /// deadline), and an ensemble averages probabilities over the union of those sets, a label
    /// missing from a tree's top k counting 0 there, as labels the level-wise beam never reaches
    /// do. For one tree the result is exactly exhaustive search's; for T > 1 it is the average of
    /// T exact per-tree top-k lists, not the exact top k of the averaged scores.
    pub fn predict_into(
        &self,
        idx: &[u32],
        val: &[f32],
        options: &PredictOptions,
        scratch: &mut Scratch,
        out: &mut Prediction,
    ) -> Result<(), QueryError> {
        let deadline = options
            .deadline_us
            .map(|us| Instant::now() + Duration::from_micros(us));
        let (stage, impute) = self.stage_for(options)?;
        let rerank = stage.refrag.is_some();
        query::prepare(
            idx,
            val,
            self.meta.n_features,
            self.meta.normalize,
            &mut scratch.q_idx,
            &mut scratch.q_val,
        )?;
        if let Some(co) = self.fiat.as_ref().filter(|_| impute) {
            let fp = &self.meta.config.fiat;
            crate::defrag::fiat::impute(
                co,
                &scratch.q_idx,
                &scratch.q_val,
                options.impute_weight.unwrap_or(fp.weight),
                fp.max_terms,
                self.meta.normalize,
                &mut scratch.fiat,
                &mut scratch.f_idx,
                &mut scratch.f_val,
            );
            std::mem::swap(&mut scratch.q_idx, &mut scratch.f_idx);
            std::mem::swap(&mut scratch.q_val, &mut scratch.f_val);
        }
        // Every member's space has at most n_features dimensions (K ≤ d).
        if scratch.dense.len() < self.meta.n_features {
            scratch.dense.resize(self.meta.n_features, 0.0);
        }
        let beam = options.beam.unwrap_or(self.meta.beam);
        let loss = self.meta.loss;
        let (limits, tree_limits) = self.search_limits(&stage, options, beam, deadline);
        let mut nodes = 0;
        let mut outputs = 0;
        let (mut early, mut capped, mut late) = (true, false, false);
        scratch.merged.clear();
        scratch.kept.clear();
        out.blocks.clear();
        if let Some(bp) = &self.bp {
            // BP models have no DEFRAG stage (training refuses the pair): the router and the
            // blocks read the query itself.
            scatter(&mut scratch.dense, &scratch.q_idx, &scratch.q_val);
            let query = BpQuery {
                limits: &limits,
                early_stop: options.early_stop,
                blocks: options.block_candidates.unwrap_or(1),
                loss,
                flat_scan: self.flat_scan,
            };
            let stats = bp.search(
                &scratch.q_idx,
                &scratch.q_val,
                &scratch.dense,
                &query,
                &mut scratch.bp,
                &mut scratch.merged,
                &mut out.blocks,
            );
            nodes = stats.search.nodes_evaluated;
            outputs = stats.search.outputs_evaluated;
            early = stats.search.early_stopped;
            capped = stats.search.beam_capped;
            late = stats.search.deadline_hit;
            for c in scratch.merged.iter_mut() {
                c.score = c.score.exp();
            }
            unscatter(&mut scratch.dense, &scratch.q_idx);
        }
        for (t, tree) in self.trees.iter().enumerate() {
            let tree = tree.borrowed();
            let (qi, qv) = match self.defrag.get(t) {
                Some(view) => {
                    view.apply(
                        &scratch.q_idx,
                        &scratch.q_val,
                        impute,
                        self.meta.normalize,
                        &mut scratch.agg,
                    )
                    .map_err(|id| QueryError::ClusterOverflow { id })?;
                    if rerank {
                        scratch.kept.push(&scratch.agg.idx, &scratch.agg.val);
                    }
                    (&scratch.agg.idx, &scratch.agg.val)
                }
                None => (&scratch.q_idx, &scratch.q_val),
            };
            scatter(&mut scratch.dense, qi, qv);
            let order: &[u32] = match self.flat_orders.get(t) {
                Some(order) if !self.flat_scan => order,
                _ => &[],
            };
            let stats = if options.early_stop {
                let (dense, search) = (&scratch.dense, &mut scratch.search);
                match self.flat_blocks(t) {
                    Some(blocks) if !self.flat_scan && !self.flat_unpruned => {
                        tree.flat_prune(blocks, order, qi, qv, dense, loss, &tree_limits, search)
                    }
                    _ => tree.flat_search(order, qi, qv, dense, loss, &tree_limits, search),
                }
            } else {
                tree.beam_search(qi, qv, &scratch.dense, loss, beam, &mut scratch.search)
            };
            unscatter(&mut scratch.dense, qi);
            nodes += stats.nodes_evaluated;
            outputs += stats.outputs_evaluated;
            early &= stats.early_stopped;
            capped |= stats.beam_capped;
            late |= stats.deadline_hit;
            scratch
                .merged
                .extend(scratch.search.candidates.iter().map(|&c| Candidate {
                    score: c.score.exp(),
                    ..c
                }));
        }
        average_over_trees(&mut scratch.merged, self.trees.len());
        out.reranked = self.rerank_stage(&stage, scratch);
        top_k(&mut scratch.merged, options.k, out);
        out.nodes_evaluated = nodes;
        out.outputs_evaluated = outputs;
        out.early_stopped = early;
        out.beam_capped = capped;
        out.deadline_hit = late;
        Ok(())
    }

    /// Convenience wrapper around [`Model::predict_into`] that allocates.
    pub fn predict(
        &self,
        idx: &[u32],
        val: &[f32],
        options: &PredictOptions,
    ) -> Result<Prediction, QueryError> {
        let mut out = Prediction::default();
        self.predict_into(idx, val, options, &mut Scratch::default(), &mut out)?;
        Ok(out)
    }

    /// The feature names, when the model has them.
    pub fn feature_names(&self) -> Option<&Names> {
        self.feature_names.get(&self.bundle)
    }

    /// Training points per label (for propensities and rare-label handling).
    pub fn train_label_counts(&self) -> &[u32] {
        &self.train_counts
    }

    /// The number of training points (0 when the metadata does not say).
    pub fn train_points(&self) -> usize {
        self.train_points
    }

    /// The model's loss (it maps classifier scores to log-probabilities).
    pub fn loss(&self) -> Loss {
        self.meta.loss
    }
}

/// Writes a sparse query into the dense scratch vector (its ids are below the vector's length).
fn scatter(dense: &mut [f32], idx: &[u32], val: &[f32]) {
    for (&i, &v) in idx.iter().zip(val) {
        dense[i as usize] = v;
    }
}

/// Zeroes what [`scatter`] wrote, so the vector is clean for the next query.
fn unscatter(dense: &mut [f32], idx: &[u32]) {
    for &i in idx {
        dense[i as usize] = 0.0;
    }
}

/// A name section, parsed on first use: a JSON array of strings that must name exactly
/// `expected` items. Parsing costs O(names), so it is not part of a structural open.
struct LazyNames {
    present: bool,
    section: &'static str,
    expected: usize,
    parsed: OnceLock<Option<Names>>,
}

impl LazyNames {
    fn new(present: bool, section: &'static str, expected: usize) -> Self {
        LazyNames {
            present,
            section,
            expected,
            parsed: OnceLock::new(),
        }
    }

    /// Reads and checks the section (`None` when the metadata says it is absent).
    fn read(&self, bundle: &Bundle) -> Result<Option<Names>, ModelError> {
        if !self.present {
            return Ok(None);
        }
        let names = bundle.json_with(self.section, |text| {
            Names::parse(text, || bundle.step_done())
        })?;
        if names.len() != self.expected {
            return Err(ModelError::Meta(format!(
                "{} holds {} names for {} items",
                self.section,
                names.len(),
                self.expected
            )));
        }
        Ok(Some(names))
    }

    /// Parses now, failing on a bad section (a verified open).
    fn load(&self, bundle: &Bundle) -> Result<(), ModelError> {
        let names = self.read(bundle)?;
        let _ = self.parsed.set(names);
        Ok(())
    }

    /// The names, parsed on the first call. A section that does not parse (only a model opened
    /// without verification can have one) counts as absent, and is logged once.
    fn get(&self, bundle: &Bundle) -> Option<&Names> {
        self.parsed
            .get_or_init(|| {
                self.read(bundle).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "ignoring an unreadable name section");
                    None
                })
            })
            .as_ref()
    }
}

/// Merges candidates of several trees, each scored by its probability, into one entry per label
/// with the mean probability over `n_trees` (a tree that did not reach a label contributes 0).
fn average_over_trees(cands: &mut Vec<Candidate>, n_trees: usize) {
    if n_trees <= 1 {
        return;
    }
    cands.sort_unstable_by_key(|c| c.label);
    let mut w = 0;
    for r in 0..cands.len() {
        if w > 0 && cands[w - 1].label == cands[r].label {
            cands[w - 1].score += cands[r].score;
            cands[w - 1].depth = cands[w - 1].depth.max(cands[r].depth);
        } else {
            cands[w] = cands[r];
            w += 1;
        }
    }
    cands.truncate(w);
    let inv = 1.0 / n_trees as f32;
    for c in cands.iter_mut() {
        c.score *= inv;
    }
}

/// Writes the `k` best candidates, best first (ties broken by label id), into `out`.
fn top_k(cands: &mut [Candidate], k: usize, out: &mut Prediction) {
    let order = Candidate::ranking;
    let k = k.min(cands.len());
    if k > 0 && k < cands.len() {
        cands.select_nth_unstable_by(k - 1, order);
    }
    let best = &mut cands[..k];
    best.sort_unstable_by(order);
    out.labels.clear();
    out.scores.clear();
    out.depths.clear();
    out.labels.extend(best.iter().map(|c| LabelId(c.label)));
    out.scores.extend(best.iter().map(|c| c.score));
    out.depths.extend(best.iter().map(|c| c.depth));
    out.depth = best.iter().map(|c| c.depth).max().unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(c: &[(u32, f32, u32)]) -> Vec<Candidate> {
        c.iter()
            .map(|&(label, score, depth)| Candidate {
                label,
                score,
                depth,
            })
            .collect()
    }

    #[test]
    fn ensemble_average_counts_missing_as_zero() {
        let mut c = cands(&[(3, 0.5, 2), (1, 0.2, 3), (3, 0.3, 4)]);
        average_over_trees(&mut c, 2);
        assert_eq!(c, cands(&[(1, 0.1, 3), (3, 0.4, 4)]));
    }

    #[test]
    fn top_k_orders_and_breaks_ties_by_label() {
        let mut c = cands(&[(5, 0.2, 1), (2, 0.9, 3), (4, 0.2, 2), (1, 0.1, 7)]);
        let mut out = Prediction::default();
        top_k(&mut c, 3, &mut out);
        assert_eq!(out.labels, vec![LabelId(2), LabelId(4), LabelId(5)]);
        assert_eq!(out.scores, vec![0.9, 0.2, 0.2]);
        assert_eq!(out.depth, 3);
        assert_eq!(out.depths, vec![3, 2, 1]);
        top_k(&mut c, 10, &mut out);
        assert_eq!(out.labels.len(), 4);
    }
}

//! The BP instance router (Liang, Hsieh & Lee 2023, "Fast block-wise partitioning"): the request
//! path's first decision.
//!
//! Training points are partitioned into q blocks, each paired with an overlapping cluster of its
//! most frequent labels ([`partition`]: sparse k-means initialisation, then alternating
//! minimisation of objective (1)). A one-vs-all linear router over the q blocks sends a query to
//! its best block (or best `block_candidates` blocks), and only that block's model, a label tree
//! or flat one-vs-all over the block's points and labels, is searched. [`view`] holds the stored
//! form and the query-time search. The trainer (the choice of q and of λ_bp by cross-validation
//! included) composes tree trainers, so it lives beside them in [`crate::train::bp`].

pub mod partition;
pub mod view;

pub use view::{BlockArrays, BpArrays, BpQuery, BpScratch, BpStats, BpViewError};

use crate::tree::ModelKind;
use serde::{Deserialize, Serialize};

/// What the metadata records about the BP stage (`meta.bp`; absent when BP is off).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BpMeta {
    /// The number of blocks.
    pub q: usize,
    /// λ_bp.
    pub lambda: f64,
    /// `configured` or `cross-validation`.
    pub lambda_source: String,
    /// The model of each block.
    pub block_model: ModelKind,
    /// Training points per block.
    pub block_points: Vec<usize>,
    /// Labels per block (the label cluster sizes).
    pub block_labels: Vec<usize>,
    /// The share of the training label occurrences the blocks' label clusters capture.
    pub captured_frac: f64,
    /// Objective (1) at the end of the alternation.
    pub objective: f64,
    /// Alternation rounds.
    pub rounds: usize,
    /// Each q tried by the automatic choice (empty when q was configured).
    pub q_search: Vec<QTry>,
    /// The λ_bp cross-validation, when λ_bp was not configured.
    pub cv: Option<CvReport>,
}

/// One q of the automatic choice of q.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QTry {
    /// q.
    pub q: usize,
    /// Whether some block came out with no points or no labels.
    pub empty_block: bool,
    /// The share of label occurrences captured.
    pub captured_frac: f64,
}

/// The k-fold cross-validation that chose λ_bp.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CvReport {
    /// The number of folds.
    pub folds: usize,
    /// How many of them were held out in turn and scored (the first ones; 1 is a single
    /// hold-out split, `folds` the full cross-validation). Bundles made before this existed
    /// scored every fold and read as 0.
    #[serde(default)]
    pub scored_folds: usize,
    /// The tolerated P@1 loss.
    pub tolerance: f64,
    /// One entry per λ_bp tried, ascending. λ is tried from the grid's largest down until one
    /// passes every fold, so the entries are the chosen λ and those above it (all of the grid
    /// when none passes; then a λ is scored on more folds only while it can still have the
    /// smallest worst loss).
    pub grid: Vec<CvPoint>,
    /// The chosen λ_bp: the largest whose loss is within the tolerance on every fold (the
    /// intersection of the folds' intervals, §3.3), else the one with the smallest worst loss.
    pub chosen: f64,
}

/// The fold scores of one λ_bp.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CvPoint {
    /// λ_bp.
    pub lambda: f64,
    /// Per fold scored, in fold order: q (0 when no partition exists). A λ stops at its first
    /// fold out of tolerance, so it may have fewer entries than `folds`; when no λ passes, the
    /// chosen one has every fold.
    pub q: Vec<usize>,
    /// Per fold: held-out P@1 of the model without BP (of the blocks' kind, over all labels)
    /// trained on the other folds.
    pub p1_full: Vec<f64>,
    /// Per fold: held-out P@1 of the BP model at this λ (partition, router and block models)
    /// trained on the other folds.
    pub p1_bp: Vec<f64>,
    /// Per fold: that BP model's mean classifier evaluations per query (the router's q and the
    /// routed block's search).
    pub evals_mean: Vec<f64>,
    /// Whether the loss is within the tolerance on every fold.
    pub within: bool,
}

impl CvPoint {
    /// The largest P@1 loss (the model without BP's P@1 less the BP model's) over the folds
    /// scored; −∞ when none was.
    pub fn worst_loss(&self) -> f64 {
        worst(
            self.p1_full
                .iter()
                .zip(&self.p1_bp)
                .map(|(full, bp)| full - bp),
        )
    }
}

/// The largest of `losses`; −∞ when there are none.
pub(crate) fn worst(losses: impl IntoIterator<Item = f64>) -> f64 {
    losses.into_iter().fold(f64::NEG_INFINITY, f64::max)
}

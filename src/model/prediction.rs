//! What one prediction is asked for ([`PredictOptions`]) and what it answers ([`Prediction`]).

use crate::data::LabelId;

/// Per-request options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PredictOptions {
    /// How many labels to return.
    pub k: usize,
    /// The beam width of the search (`None`: the model's default). With early stopping it caps
    /// the nodes expanded per depth; without, it is the level-wise beam.
    pub beam: Option<usize>,
    /// The depth-aware early-stopping search (the default); `false` runs the level-wise beam
    /// search.
    pub early_stop: bool,
    /// With early stopping: return the best labels found once this many microseconds have
    /// passed since the prediction started, and flag it.
    pub deadline_us: Option<u64>,
    /// With a BP model: how many of the router's best blocks to search, their candidates merged
    /// (`None`: 1; more than q searches all q). Ignored by a model without BP.
    pub block_candidates: Option<usize>,
    /// REFRAG reranking of the search's candidates (`None`: the model's default).
    pub rerank: Option<bool>,
    /// FIAT imputation of the query (`None`: the model's default).
    pub impute: Option<bool>,
    /// With FIAT's C^F, the weight of the imputed terms for this request (`None`: the
    /// model's `fiat.weight`).
    pub impute_weight: Option<f32>,
    /// How many candidates the search returns for reranking (`None`: the model's default; never
    /// fewer than `k`).
    pub candidates: Option<usize>,
    /// REFRAG's α for this request (`None`: the model's).
    pub rerank_alpha: Option<f32>,
    /// REFRAG's γ_r for this request (`None`: the model's).
    pub rerank_gamma: Option<f32>,
    /// OVA reranking of the search's candidates (`None`: the model's default).
    pub rerank_ova: Option<bool>,
    /// The OVA reranker's α for this request: the weight of the search's log-probability
    /// (`None`: the model's).
    pub rerank_ova_alpha: Option<f32>,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions {
            k: 5,
            beam: None,
            early_stop: true,
            deadline_us: None,
            block_candidates: None,
            rerank: None,
            impute: None,
            impute_weight: None,
            candidates: None,
            rerank_alpha: None,
            rerank_gamma: None,
            rerank_ova: None,
            rerank_ova_alpha: None,
        }
    }
}

/// One answer: the top labels best first, their scores (probabilities averaged over the
/// ensemble), and what the search did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prediction {
    /// Labels, best first.
    pub labels: Vec<LabelId>,
    /// Their scores, in `[0, 1]`.
    pub scores: Vec<f32>,
    /// Per returned label, its depth in the tree (its leaf's depth + 1; the deepest over the
    /// trees of an ensemble).
    pub depths: Vec<u32>,
    /// The depth of the deepest returned label.
    pub depth: u32,
    /// Nodes evaluated, over all trees (with BP: the router's one node and the searched blocks'
    /// nodes).
    pub nodes_evaluated: u32,
    /// Classifiers evaluated: every output of every node evaluated (with BP: the q router
    /// outputs too). For a flat model, the labels scored.
    pub outputs_evaluated: u32,
    /// Candidates rescored by a reranker (REFRAG or OVA; one count per candidate and reranker),
    /// 0 without reranking.
    pub reranked: u32,
    /// With BP, the blocks searched, best first (empty without BP).
    pub blocks: Vec<u32>,
    /// Whether the early-stopping bound cut the search short in every tree.
    pub early_stopped: bool,
    /// Whether the beam cap dropped a node in some tree (the result may then differ from
    /// exhaustive search).
    pub beam_capped: bool,
    /// Whether the deadline passed; the labels are then the best found by that time.
    pub deadline_hit: bool,
}

//! The model's JSON metadata section.

use super::ModelError;
use crate::config::TrainConfig;
use crate::linear::Loss;
use serde::{Deserialize, Serialize};

/// The value of [`ModelMeta::format`] for xmc models; a bundle with anything else is not one.
pub const MODEL_FORMAT: &str = "xmc-model";

/// What the bundle's `meta` section holds.
///
/// Everything here is a function of the data, the configuration and the seed, except `created`,
/// which records when and how fast the model was made; two trainings with the same inputs give
/// bundles that differ only there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    /// Always [`MODEL_FORMAT`].
    pub format: String,
    /// The model's name.
    pub name: String,
    /// A content hash of every section but this one.
    pub version: String,
    /// The number of input features.
    pub n_features: usize,
    /// The number of labels.
    pub n_labels: usize,
    /// The number of trees in the ensemble.
    pub trees: usize,
    /// The loss the classifiers were trained with (it maps scores to probabilities).
    pub loss: Loss,
    /// Whether queries are L2-normalized before scoring.
    pub normalize: bool,
    /// The default beam width.
    pub beam: usize,
    /// Whether a `label_names` section is present.
    pub has_label_names: bool,
    /// Whether a `feature_names` section is present (absent in bundles made before it existed).
    #[serde(default)]
    pub has_feature_names: bool,
    /// The full training configuration.
    pub config: TrainConfig,
    /// Statistics of the training data.
    pub train_data: serde_json::Value,
    /// Held-out quality, when a test file was given at training time.
    pub heldout: Option<serde_json::Value>,
    /// Per tree (with BP, per block): node count, leaf count, depth histogram, weight count.
    pub tree_stats: Vec<serde_json::Value>,
    /// The BP stage: q, λ_bp, block sizes, the choice of q and the λ_bp cross-validation.
    /// Absent when BP is off (and in bundles made before BP existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bp: Option<crate::router::BpMeta>,
    /// The text vectorizer (its sections are `text.vocab` and `text.idf`). Absent in models
    /// trained on feature vectors (and in bundles made before text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<crate::text::TextMeta>,
    /// How REFRAG's (α, γ_r) were chosen on a held-out fold: the grid's figures, the model's
    /// without REFRAG, and the pair chosen. Absent when the trainer did not search them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refrag: Option<RefragChoice>,
    /// When and how fast the model was made; the only field that differs between reproducible runs.
    pub created: Created,
}

/// The non-reproducible part of the metadata.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Created {
    /// Seconds since the Unix epoch.
    pub unix_time: u64,
    /// Wall-clock seconds per training phase.
    pub seconds: serde_json::Map<String, serde_json::Value>,
}

impl ModelMeta {
    /// Checks what the rest of the model relies on.
    pub fn check(&self) -> Result<(), ModelError> {
        let fail = |m: String| Err(ModelError::Meta(m));
        if self.format != MODEL_FORMAT {
            return fail(format!(
                "format is `{}`, not `{MODEL_FORMAT}`: this is not an xmc model bundle",
                self.format
            ));
        }
        if self.trees == 0 {
            return fail("the model has no trees".into());
        }
        if self.n_labels == 0 || self.n_labels > u32::MAX as usize {
            return fail(format!("bad label count {}", self.n_labels));
        }
        if self.n_features > u32::MAX as usize {
            return fail(format!("bad feature count {}", self.n_features));
        }
        if self.beam == 0 {
            return fail("the default beam is 0".into());
        }
        Ok(())
    }
}

/// A model's figures on the fold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoldFigures {
    /// P@1.
    #[serde(rename = "p@1")]
    pub p1: f64,
    /// PSP@5.
    #[serde(rename = "psp@5")]
    pub psp5: f64,
    /// coverage@5.
    #[serde(rename = "coverage@5")]
    pub coverage5: f64,
}

/// One grid point and its figures on the fold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    /// REFRAG's α.
    pub alpha: f32,
    /// REFRAG's γ_r.
    pub gamma: f32,
    /// Its figures.
    #[serde(flatten)]
    pub figures: FoldFigures,
}

/// What the trainer's REFRAG search (`train::refrag`) chose on its held-out fold and why,
/// recorded as `meta.refrag`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefragChoice {
    /// The chosen α (also the model's `defrag.alpha`).
    pub alpha: f32,
    /// The chosen γ_r (also the model's `defrag.gamma_r`).
    pub gamma: f32,
    /// Whether some grid pair kept P@1 within the tolerance; if none did, α = 1 (the search's
    /// order kept, the configured γ_r).
    pub within_tolerance: bool,
    /// Points the fold model trained on.
    pub train_points: usize,
    /// Points held out.
    pub fold_points: usize,
    /// The fold model without REFRAG.
    pub baseline: FoldFigures,
    /// Every pair scored, in grid order.
    pub grid: Vec<GridPoint>,
}

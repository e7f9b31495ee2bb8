//! Training settings, in layers: compiled-in defaults ([`TrainConfig::DEFAULT`]), then the
//! `[train]` table of a TOML file, then `XMC_TRAIN_*` environment variables, then `--set
//! key=value` overrides. The layering itself ([`crate::settings`]) is shared with the server's settings.
//! Keys are the dotted names of the fields (`trees`, `max_leaf`, `solver.c`, `text.min_df`, ...),
//! and the flat names of [`ALIASES`] for the DEFRAG fields. An unknown key or a bad value is an
//! error that names the key and where it was given, so a typo never silently trains a different
//! model.

use crate::defrag::DefragParams;
use crate::defrag::fiat::FiatParams;
use crate::linear::SolverParams;
use crate::rerank::RerankParams;
pub use crate::settings::ConfigError;
use crate::settings::{self as layers, Layer, Refusal};
use crate::text::TextConfig;
use crate::tree::FreqKind;
pub use crate::tree::ModelKind;
use figment::value::Dict;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How a bundle stores the label trees' weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// `f32` weights, with the outputs in an array of their own (the default).
    #[default]
    F32,
    /// bfloat16 weights packed with their outputs, one `u32` per entry, and rows packed two
    /// weights a `u32`, in trees whose outputs fit 16 bits (the others keep `f32`). Smaller and
    /// faster to score; each weight is rounded to 8 significant bits (see `tree::chunk`).
    Bf16,
}

/// Which training points a tree node's classifiers see as negatives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeNegatives {
    /// Teacher-forced (Parabel): the points with a label under the node (the default).
    #[default]
    Tfn,
    /// Teacher-forced plus matcher-aware (XR-Linear): also the points that the trained upper
    /// levels' beam search (width `man_beam`, or the model's `beam`) brings to the node. Trains
    /// depth by depth.
    Man,
}

/// Everything that determines a trained model: the settings of `xmc train`, and the record of
/// them in a bundle's metadata.
///
/// A new setting is one field here (or in one of the nested structs): a doc comment, a value in
/// [`TrainConfig::DEFAULT`], and `#[serde(default)]` so that older bundles still read (with
/// `skip_serializing_if = "crate::settings::omit_default"` where bundles that do not use
/// it must keep their bytes). Its key is the field's name (`solver.NAME` inside `solver`, and so
/// on); a field of `defrag` also needs its flat name in [`ALIASES`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The model's name, recorded in the bundle.
    pub name: String,
    /// Tree or flat.
    pub model: ModelKind,
    /// The ensemble size T.
    pub trees: usize,
    /// The largest number of labels in a leaf.
    pub max_leaf: usize,
    /// The tree's branching factor.
    pub branching: usize,
    /// Whether feature rows are L2-normalized before training (and queries at prediction).
    pub normalize: bool,
    /// The default beam width stored with the model.
    pub beam: usize,
    /// λ ∈ [0, 2] of the label-tree split (Baharav et al. 2021): 0 balanced 2-means (Parabel),
    /// 1 weighted 2-means, 2 Fano coding. The key `lambda_prime` sets it as 2λ'/(1 + λ').
    #[serde(default)]
    pub lambda: f32,
    /// The additive smoothing γ ≥ 0 of the split's frequencies f(λ).
    #[serde(default = "default_gamma")]
    pub gamma: f32,
    /// How the frequencies f̃ of the Fano end (λ > 1) are built.
    #[serde(default)]
    pub freq: FreqKind,
    /// The solver's hyper-parameters.
    pub solver: SolverParams,
    /// BP instance router (Liang, Hsieh & Lee 2023): partition points into q blocks, each with
    /// its own label cluster and model, and route queries with a linear router.
    #[serde(default)]
    pub bp: bool,
    /// λ_bp of the BP objective; 0 chooses it by k-fold cross-validation against `bp_tolerance`.
    #[serde(default)]
    pub bp_lambda: f32,
    /// The number of blocks q; 0 takes the largest q up to `bp_q_max` with no empty block.
    #[serde(default)]
    pub bp_q: usize,
    /// The largest q the automatic choice tries.
    #[serde(default = "default_bp_q_max")]
    pub bp_q_max: usize,
    /// Folds of the λ_bp cross-validation.
    #[serde(default = "default_bp_folds")]
    pub bp_folds: usize,
    /// How many of the `bp_folds` folds the λ_bp choice scores: 1 holds out one fold (the
    /// default), `bp_folds` is the full k-fold cross-validation.
    #[serde(default = "default_bp_scored_folds")]
    pub bp_scored_folds: usize,
    /// The P@1 loss (absolute, in [0, 1]) the λ_bp cross-validation tolerates.
    #[serde(default = "default_bp_tolerance")]
    pub bp_tolerance: f32,
    /// The model of each BP block: a label tree or flat one-vs-all.
    #[serde(default = "default_block_model")]
    pub block_model: ModelKind,
    /// The random seed.
    pub seed: u64,
    /// Worker threads for training (0: all cores).
    pub threads: usize,
    /// DEFRAG feature agglomeration, FIAT and REFRAG (off in bundles made before they existed).
    #[serde(default)]
    pub defrag: DefragParams,
    /// How the bundle stores the trees' entry weights. Left out of the metadata when `f32`, so
    /// bundles that do not use it are unchanged.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub weights: WeightFormat,
    /// The negatives of the tree nodes' classifiers. Left out of the metadata when `tfn`, so
    /// bundles that do not use it are unchanged.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub negatives: TreeNegatives,
    /// The beam of the training search that finds the matcher-aware negatives (`negatives =
    /// man`); 0 takes the model's `beam`. Left out of the metadata when 0.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub man_beam: usize,
    /// The text vectorizer's settings (`[train.text]`, `text.*` keys), used when training from
    /// JSON Lines. Left out of the metadata when default, so other bundles are unchanged.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub text: TextConfig,
    /// The reranking stage trained after the trees (`rerank_*` keys). Left out of the metadata
    /// when default, so other bundles are unchanged.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub rerank: RerankParams,
    /// FIAT in the input space (`fiat.*` keys): C^F over feature clusters of its own, stored in
    /// the bundle, and whether queries are imputed by default. Left out of the metadata when
    /// default, so other bundles are unchanged.
    #[serde(default, skip_serializing_if = "layers::omit_default")]
    pub fiat: FiatParams,
}

impl TrainConfig {
    /// The compiled-in defaults: a Parabel-style binary tree with leaves of up to 200 labels
    /// (docs/decisions/0026-default-max-leaf-200.md), T = 1 for latency, beam 10.
    pub const DEFAULT: TrainConfig = TrainConfig {
        name: String::new(),
        model: ModelKind::Tree,
        trees: 1,
        max_leaf: 200,
        branching: 2,
        normalize: true,
        beam: 10,
        lambda: 0.0,
        gamma: 0.1,
        freq: FreqKind::Marginal,
        solver: SolverParams::DEFAULT,
        bp: false,
        bp_lambda: 0.0,
        bp_q: 0,
        bp_q_max: 16,
        bp_folds: 3,
        bp_scored_folds: 1,
        bp_tolerance: 0.02,
        block_model: ModelKind::Tree,
        seed: 0,
        threads: 0,
        defrag: DefragParams::DEFAULT,
        weights: WeightFormat::F32,
        negatives: TreeNegatives::Tfn,
        man_beam: 0,
        text: TextConfig::DEFAULT,
        rerank: RerankParams::DEFAULT,
        fiat: FiatParams::DEFAULT,
    };

    /// Loads the defaults, then the `[train]` table of `path` (if given), then the process's
    /// `XMC_TRAIN_*` environment variables, then `overrides` (`key=value` strings, the value
    /// written as in TOML or as a bare word), and validates the result.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        Self::load_with_env(path, &env, overrides)
    }

    /// [`TrainConfig::load`] with the environment given: pairs of variable and value. A
    /// variable `XMC_TRAIN_KEY` sets `key` (lower case, `__` for a dot: `XMC_TRAIN_SOLVER__C`);
    /// other variables are ignored.
    pub fn load_with_env(
        path: Option<&Path>,
        env: &[(String, String)],
        overrides: &[String],
    ) -> Result<Self, ConfigError> {
        let defaults = layers::full_dict(&Self::DEFAULT);
        let mut stack = Vec::new();
        if let Some(path) = path {
            if let Some(layer) = file_layer(path, &defaults)? {
                stack.push(layer);
            }
        }
        for (var, raw) in env {
            if let Some(key) = var.strip_prefix(ENV_PREFIX) {
                let key = key.to_ascii_lowercase().replace("__", ".");
                let source = format!("environment variable {var}");
                stack.push(text_layer(source, &key, raw, &defaults)?);
            }
        }
        for o in overrides {
            let (key, raw) = o
                .split_once('=')
                .ok_or_else(|| ConfigError::BadOverride(o.clone()))?;
            let source = format!("--set {o}");
            stack.push(text_layer(source, key.trim(), raw.trim(), &defaults)?);
        }
        let cfg = layers::extract(&Self::DEFAULT, &stack).map_err(refused)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Every key of the `[train]` table, `--set` and `XMC_TRAIN_*`, derived from the struct:
    /// each field's dotted path (the flat names of [`ALIASES`] in place of theirs), without
    /// [`HIDDEN`], with `lambda_prime`.
    pub fn keys() -> Vec<String> {
        let mut keys: Vec<String> = layers::leaf_keys(&layers::full_dict(&Self::DEFAULT))
            .into_iter()
            .filter(|k| !HIDDEN.contains(&k.as_str()))
            .map(|k| user_key(&k))
            .chain([LAMBDA_PRIME.to_string()])
            .collect();
        keys.sort();
        keys
    }

    /// Sets λ from λ' (the key `lambda_prime`): λ = 2λ'/(1 + λ'), for λ' ≥ 0 or infinite.
    pub fn set_lambda_prime(&mut self, lambda_prime: f64) -> Result<(), ConfigError> {
        self.lambda = lambda_from_prime_checked(lambda_prime)? as f32;
        Ok(())
    }

    /// Checks ranges that single keys cannot (run after all layers are applied).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &str, v: usize| {
            if v == 0 {
                Err(bad(key, "must be at least 1".into()))
            } else {
                Ok(())
            }
        };
        positive("trees", self.trees)?;
        positive("max_leaf", self.max_leaf)?;
        positive("beam", self.beam)?;
        positive("solver.kappa", self.solver.kappa)?;
        positive("solver.max_iter", self.solver.max_iter)?;
        if self.branching < 2 {
            return Err(bad("branching", "must be at least 2".into()));
        }
        let finite_nonneg = |key: &str, v: f32, strict: bool| {
            if !v.is_finite() || v < 0.0 || (strict && v == 0.0) {
                Err(bad(
                    key,
                    format!(
                        "must be a finite number {} 0",
                        if strict { ">" } else { ">=" }
                    ),
                ))
            } else {
                Ok(())
            }
        };
        finite_nonneg("solver.l1", self.solver.l1, false)?;
        finite_nonneg("solver.c", self.solver.c, true)?;
        finite_nonneg("solver.prune", self.solver.prune, false)?;
        finite_nonneg("solver.tol", self.solver.tol, true)?;
        finite_nonneg("gamma", self.gamma, false)?;
        finite_nonneg("bp_lambda", self.bp_lambda, false)?;
        positive("bp_q_max", self.bp_q_max)?;
        if self.bp_folds < 2 {
            return Err(bad("bp_folds", "must be at least 2".into()));
        }
        if !(1..=self.bp_folds).contains(&self.bp_scored_folds) {
            return Err(bad(
                "bp_scored_folds",
                format!(
                    "must be in 1..=bp_folds ({}), got {}",
                    self.bp_folds, self.bp_scored_folds
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.bp_tolerance) {
            return Err(bad(
                "bp_tolerance",
                format!("must be in [0, 1], got {}", self.bp_tolerance),
            ));
        }
        if self.bp && self.trees > 1 {
            return Err(bad(
                "bp",
                "BP needs trees = 1: an ensemble of routed models is not supported yet".into(),
            ));
        }
        if !(0.0..=2.0).contains(&self.lambda) {
            return Err(bad(
                "lambda",
                format!("must be in [0, 2], got {}", self.lambda),
            ));
        }
        self.text.validate()?;
        self.rerank
            .validate()
            .map_err(|(key, message)| bad(key, message))?;
        self.fiat
            .validate()
            .map_err(|(key, message)| bad(key, message))?;
        self.defrag
            .validate()
            .map_err(|(key, message)| bad(key, message))
    }
}

/// λ = 2λ'/(1 + λ') (§5.4 of Baharav et al. 2021), for λ' ≥ 0; λ' = ∞ is Fano coding, λ = 2.
pub fn lambda_from_prime(lambda_prime: f64) -> f64 {
    if lambda_prime.is_infinite() {
        2.0
    } else {
        2.0 * lambda_prime / (1.0 + lambda_prime)
    }
}

fn lambda_from_prime_checked(lp: f64) -> Result<f64, ConfigError> {
    if lp.is_nan() || lp < 0.0 {
        return Err(bad(
            LAMBDA_PRIME,
            format!("must be a number >= 0 (or inf), got {lp}"),
        ));
    }
    Ok(lambda_from_prime(lp))
}

/// The prefix of the environment variables of train settings.
pub const ENV_PREFIX: &str = "XMC_TRAIN_";

/// The key that sets `lambda` from λ' (it has no field of its own).
const LAMBDA_PRIME: &str = "lambda_prime";

/// Flat keys of fields that live in a nested struct: (key, the field's dotted path).
pub const ALIASES: &[(&str, &str)] = &[
    ("defrag", "defrag.kind"),
    ("d0", "defrag.d0"),
    ("defrag_points", "defrag.points_frac"),
    ("defrag_labels", "defrag.labels_frac"),
    ("defrag_fill", "defrag.fill"),
    ("defrag_average", "defrag.average"),
    ("fiat", "defrag.fiat"),
    ("refrag", "defrag.refrag"),
    ("refrag_search", "defrag.search"),
    ("refrag_alpha", "defrag.alpha"),
    ("refrag_gamma", "defrag.gamma_r"),
    ("refrag_candidates", "defrag.candidates"),
    ("refrag_entries", "defrag.prototype_entries"),
    ("rerank_model", "rerank.model"),
    ("rerank_candidates", "rerank.candidates"),
    ("rerank_query_candidates", "rerank.query_candidates"),
    ("rerank_alpha", "rerank.alpha"),
];

/// Fields that are recorded in a bundle but are not settings: the solver's seed derives from
/// `seed`.
pub const HIDDEN: &[&str] = &["solver.seed"];

/// The key a user writes for the field at dotted `path`.
fn user_key(path: &str) -> String {
    ALIASES
        .iter()
        .find(|(_, p)| *p == path)
        .map_or_else(|| path.to_string(), |(k, _)| k.to_string())
}

/// The `[train]` table of the file at `path` as a layer (`None` without one); any other
/// top-level table than `[train]` and `[serve]` is refused.
fn file_layer(path: &Path, defaults: &Dict) -> Result<Option<Layer>, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: name.clone(),
        source,
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Toml {
            path: name.clone(),
            message: e.to_string(),
        })?;
    if let Some(key) = table.keys().find(|k| *k != "train" && *k != "serve") {
        return Err(ConfigError::UnknownKey {
            key: key.clone(),
            source_name: format!("file {name}"),
            known: "[train], [serve]".into(),
        });
    }
    let Some(train) = table.get("train") else {
        return Ok(None);
    };
    let source = format!("file {name}");
    let mut train = train.clone();
    if let toml::Value::Table(t) = &mut train {
        rename_aliases(t);
    }
    let layer = Layer::from_toml(source, &train, defaults).map_err(refused)?;
    resolve_lambda_prime(layer).map(Some)
}

/// One `key=value` (from `--set` or the environment) as a layer.
fn text_layer(source: String, key: &str, raw: &str, defaults: &Dict) -> Result<Layer, ConfigError> {
    let path = ALIASES
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(key, |(_, p)| *p);
    let layer = Layer::from_text(source, path, raw, defaults).map_err(refused)?;
    resolve_lambda_prime(layer)
}

/// Moves the flat keys of [`ALIASES`] of a file's table to their fields' places.
fn rename_aliases(table: &mut toml::Table) {
    for (key, path) in ALIASES {
        if table.get(*key).is_some_and(|v| !v.is_table()) {
            if let (Some(value), Some((head, field))) = (table.remove(*key), path.split_once('.')) {
                let sub = table
                    .entry(head)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(sub) = sub {
                    sub.insert(field.to_string(), value);
                }
            }
        }
    }
}

/// Refuses a layer's [`HIDDEN`] keys, and replaces its `lambda_prime` by the `lambda` it gives.
fn resolve_lambda_prime(mut layer: Layer) -> Result<Layer, ConfigError> {
    if let Some(key) = HIDDEN
        .iter()
        .find(|k| layers::get(&layer.dict, k).is_some())
    {
        return Err(unknown(key.to_string(), layer.source));
    }
    let Some(value) = layers::remove(&mut layer.dict, LAMBDA_PRIME) else {
        return Ok(layer);
    };
    let lp = value.deserialize::<f64>().map_err(|_| {
        bad(
            LAMBDA_PRIME,
            format!("expected a number, found {value:?} (in {})", layer.source),
        )
    })?;
    let lambda = lambda_from_prime_checked(lp)?;
    layers::insert(&mut layer.dict, "lambda", lambda.into());
    Ok(layer)
}

fn unknown(key: String, source_name: String) -> ConfigError {
    ConfigError::UnknownKey {
        key,
        source_name,
        known: TrainConfig::keys().join(", "),
    }
}

/// A refusal of the layering as a [`ConfigError`] naming the key as a user writes it.
fn refused(r: Refusal) -> ConfigError {
    let key = user_key(&r.key);
    if r.unknown {
        unknown(key, r.source)
    } else {
        bad(&key, format!("{} (in {})", r.message, r.source))
    }
}

fn default_gamma() -> f32 {
    TrainConfig::DEFAULT.gamma
}

fn default_bp_q_max() -> usize {
    TrainConfig::DEFAULT.bp_q_max
}

fn default_bp_folds() -> usize {
    TrainConfig::DEFAULT.bp_folds
}

fn default_bp_scored_folds() -> usize {
    TrainConfig::DEFAULT.bp_scored_folds
}

fn default_bp_tolerance() -> f32 {
    TrainConfig::DEFAULT.bp_tolerance
}

fn default_block_model() -> ModelKind {
    TrainConfig::DEFAULT.block_model
}

fn bad(key: &str, message: String) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::Loss;

    #[test]
    fn overrides_apply_in_order_and_name_bad_keys() {
        let cfg =
            TrainConfig::load(None, &["trees=3".into(), "solver.loss=logistic".into()]).unwrap();
        assert_eq!(cfg.trees, 3);
        assert_eq!(cfg.solver.loss, Loss::Logistic);
        let err = TrainConfig::load(None, &["tres=3".into()]).unwrap_err();
        assert!(err.to_string().contains("`tres`"), "{err}");
        let err = TrainConfig::load(None, &["solver.c=-1".into()]).unwrap_err();
        assert!(err.to_string().contains("`solver.c`"), "{err}");
        let err = TrainConfig::load(None, &["trees".into()]).unwrap_err();
        assert!(matches!(err, ConfigError::BadOverride(_)));
        let cfg = TrainConfig::load(None, &["weights=bf16".into()]).unwrap();
        assert_eq!(cfg.weights, WeightFormat::Bf16);
        let err = TrainConfig::load(None, &["weights=f16".into()]).unwrap_err();
        assert!(
            err.to_string().contains("`weights`") && err.to_string().contains("`f16`"),
            "{err}"
        );
    }

    #[test]
    fn lambda_keys_are_checked_and_named() {
        let cfg = TrainConfig::load(None, &["lambda_prime=1".into()]).unwrap();
        assert_eq!(cfg.lambda, 1.0);
        let cfg = TrainConfig::load(None, &["lambda_prime=inf".into()]).unwrap();
        assert_eq!(cfg.lambda, 2.0);
        let cfg = TrainConfig::load(None, &["lambda=0.5".into(), "freq=greedy".into()]).unwrap();
        assert_eq!((cfg.lambda, cfg.freq), (0.5, FreqKind::Greedy));
        for (set, key) in [
            ("lambda=2.5", "`lambda`"),
            ("lambda=-0.1", "`lambda`"),
            ("lambda=nan", "`lambda`"),
            ("gamma=-1", "`gamma`"),
            ("lambda_prime=-1", "`lambda_prime`"),
            ("freq=huffman", "`freq`"),
        ] {
            let err = TrainConfig::load(None, &[set.into()]).unwrap_err();
            assert!(err.to_string().contains(key), "{set}: {err}");
        }
    }

    #[test]
    fn file_layer_sits_under_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[train]\ntrees = 2\nmax_leaf = 50\n[train.solver]\nc = 2.0\n",
        )
        .unwrap();
        let cfg = TrainConfig::load(Some(&path), &["trees=4".into()]).unwrap();
        assert_eq!((cfg.trees, cfg.max_leaf, cfg.solver.c), (4, 50, 2.0));
        std::fs::write(&path, "[train]\nbranching = \"two\"\n").unwrap();
        let err = TrainConfig::load(Some(&path), &[]).unwrap_err();
        assert!(err.to_string().contains("`branching`"), "{err}");
    }
}

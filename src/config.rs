//! Layered configuration shared by the CLI, the trainer and (later) the server.
//!
//! Training settings come from compiled-in defaults ([`TrainConfig::DEFAULT`]), then the `[train]`
//! table of a TOML file, then `--set key=value` overrides. Keys are the dotted names of the design's
//! CLI contract (`trees`, `max_leaf`, `solver.c`, ...). An unknown key or a bad value is an error
//! that names the key, so a typo never silently trains a different model.

use crate::defrag::{DefragKind, DefragParams};
use crate::linear::{Loss, Method, SolverParams};
use crate::rerank::{RerankModel, RerankParams};
use crate::text::TextConfig;
use crate::tree::FreqKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

/// A configuration error, naming the key or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading config {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("parsing config {path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A key is not known.
    #[error("unknown config key `{key}` (known keys: {known})")]
    UnknownKey {
        /// The key.
        key: String,
        /// The keys that are known.
        known: String,
    },
    /// A value has the wrong type or is out of range.
    #[error("config key `{key}`: {message}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A `--set` argument is not `key=value`.
    #[error("--set `{0}` is not of the form key=value")]
    BadOverride(String),
}

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

impl WeightFormat {
    fn is_f32(&self) -> bool {
        *self == WeightFormat::F32
    }
}

/// Which model family to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A probabilistic label tree (Parabel-style), the default.
    Tree,
    /// Flat one-vs-all: every label scored by its own classifier.
    Flat,
}

/// Everything that determines a trained model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "WeightFormat::is_f32")]
    pub weights: WeightFormat,
    /// The text vectorizer's settings (`[train.text]`, `text.*` keys), used when training from
    /// JSON Lines. Left out of the metadata when default, so other bundles are unchanged.
    #[serde(default, skip_serializing_if = "TextConfig::is_default")]
    pub text: TextConfig,
    /// The reranking stage trained after the trees (`rerank_*` keys). Left out of the metadata
    /// when default, so other bundles are unchanged.
    #[serde(default, skip_serializing_if = "RerankParams::is_default")]
    pub rerank: RerankParams,
}

impl TrainConfig {
    /// The compiled-in defaults: Parabel's (T = 1 for latency, max leaf 100, binary tree, beam 10).
    pub const DEFAULT: TrainConfig = TrainConfig {
        name: String::new(),
        model: ModelKind::Tree,
        trees: 1,
        max_leaf: 100,
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
        bp_tolerance: 0.02,
        block_model: ModelKind::Tree,
        seed: 0,
        threads: 0,
        defrag: DefragParams::DEFAULT,
        weights: WeightFormat::F32,
        text: TextConfig::DEFAULT,
        rerank: RerankParams::DEFAULT,
    };

    /// The keys `set` accepts, for error messages and docs.
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "model",
        "trees",
        "max_leaf",
        "branching",
        "normalize",
        "beam",
        "lambda",
        "lambda_prime",
        "gamma",
        "freq",
        "bp",
        "bp_lambda",
        "bp_q",
        "bp_q_max",
        "bp_folds",
        "bp_tolerance",
        "block_model",
        "seed",
        "threads",
        "solver.l1",
        "solver.c",
        "solver.loss",
        "solver.prune",
        "solver.tol",
        "solver.kappa",
        "solver.max_iter",
        "solver.search_eps",
        "solver.method",
        "defrag",
        "d0",
        "defrag_points",
        "defrag_labels",
        "defrag_average",
        "fiat",
        "refrag",
        "refrag_alpha",
        "refrag_gamma",
        "refrag_candidates",
        "weights",
        "rerank_model",
        "rerank_candidates",
        "rerank_alpha",
        "text.*",
    ];

    /// Loads the defaults, then the `[train]` table of `path` (if given), then `overrides`
    /// (`key=value` strings, the value written as in TOML or as a bare word).
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        let mut cfg = Self::DEFAULT.clone();
        if let Some(path) = path {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                path: name.clone(),
                source,
            })?;
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Toml {
                        path: name.clone(),
                        message: e.to_string(),
                    })?;
            for key in table.keys() {
                if key != "train" && key != "serve" {
                    return Err(ConfigError::UnknownKey {
                        key: key.clone(),
                        known: "[train], [serve]".into(),
                    });
                }
            }
            if let Some(train) = table.get("train") {
                let mut flat = BTreeMap::new();
                flatten("", train, &mut flat);
                for (key, value) in flat {
                    cfg.set(&key, &value)?;
                }
            }
        }
        for o in overrides {
            let (key, raw) = o
                .split_once('=')
                .ok_or_else(|| ConfigError::BadOverride(o.clone()))?;
            cfg.set(key.trim(), &parse_override(raw.trim()))?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets one dotted key.
    pub fn set(&mut self, key: &str, value: &toml::Value) -> Result<(), ConfigError> {
        let s = &mut self.solver;
        match key {
            "name" => self.name = as_str(key, value)?.to_string(),
            "model" => self.model = as_model_kind(key, value)?,
            "trees" => self.trees = as_usize(key, value)?,
            "max_leaf" => self.max_leaf = as_usize(key, value)?,
            "branching" => self.branching = as_usize(key, value)?,
            "normalize" => self.normalize = as_bool(key, value)?,
            "beam" => self.beam = as_usize(key, value)?,
            "lambda" => self.lambda = as_f32(key, value)?,
            "lambda_prime" => {
                let lp = f64::from(as_f32(key, value)?);
                if lp.is_nan() || lp < 0.0 {
                    return Err(bad(
                        key,
                        format!("must be a number >= 0 (or inf), got {lp}"),
                    ));
                }
                self.lambda = lambda_from_prime(lp) as f32;
            }
            "gamma" => self.gamma = as_f32(key, value)?,
            "freq" => {
                self.freq = match as_str(key, value)? {
                    "marginal" => FreqKind::Marginal,
                    "greedy" => FreqKind::Greedy,
                    other => {
                        return Err(bad(key, format!("`{other}` is not `marginal` or `greedy`")));
                    }
                }
            }
            "bp" => self.bp = as_bool(key, value)?,
            "bp_lambda" => self.bp_lambda = as_f32(key, value)?,
            "bp_q" => self.bp_q = as_usize(key, value)?,
            "bp_q_max" => self.bp_q_max = as_usize(key, value)?,
            "bp_folds" => self.bp_folds = as_usize(key, value)?,
            "bp_tolerance" => self.bp_tolerance = as_f32(key, value)?,
            "block_model" => self.block_model = as_model_kind(key, value)?,
            "seed" => self.seed = as_usize(key, value)? as u64,
            "threads" => self.threads = as_usize(key, value)?,
            "defrag" => {
                let v = as_str(key, value)?;
                self.defrag.kind = DefragKind::parse(v)
                    .ok_or_else(|| bad(key, format!("`{v}` is not off, x, xy or n")))?;
            }
            "d0" => self.defrag.d0 = as_usize(key, value)?,
            "defrag_points" => self.defrag.points_frac = as_f32(key, value)?,
            "defrag_labels" => self.defrag.labels_frac = as_f32(key, value)?,
            "defrag_average" => self.defrag.average = as_bool(key, value)?,
            "fiat" => self.defrag.fiat = as_bool(key, value)?,
            "refrag" => self.defrag.refrag = as_bool(key, value)?,
            "refrag_alpha" => self.defrag.alpha = as_f32(key, value)?,
            "refrag_gamma" => self.defrag.gamma_r = as_f32(key, value)?,
            "refrag_candidates" => self.defrag.candidates = as_usize(key, value)?,
            "weights" => {
                self.weights = match as_str(key, value)? {
                    "f32" => WeightFormat::F32,
                    "bf16" => WeightFormat::Bf16,
                    other => return Err(bad(key, format!("`{other}` is not `f32` or `bf16`"))),
                }
            }
            "rerank_model" => {
                self.rerank.model = match as_str(key, value)? {
                    "off" => RerankModel::Off,
                    "ova" => RerankModel::Ova,
                    other => return Err(bad(key, format!("`{other}` is not `off` or `ova`"))),
                }
            }
            "rerank_candidates" => self.rerank.candidates = as_usize(key, value)?,
            "rerank_alpha" => self.rerank.alpha = as_f32(key, value)?,
            k if k.starts_with("text.") => self.text.set(&k["text.".len()..], value)?,
            "solver.l1" => s.l1 = as_f32(key, value)?,
            "solver.c" => s.c = as_f32(key, value)?,
            "solver.prune" => s.prune = as_f32(key, value)?,
            "solver.tol" => s.tol = as_f32(key, value)?,
            "solver.kappa" => s.kappa = as_usize(key, value)?,
            "solver.max_iter" => s.max_iter = as_usize(key, value)?,
            "solver.search_eps" => s.search_eps = as_f32(key, value)?,
            "solver.method" => {
                s.method = match as_str(key, value)? {
                    "ppdsparse" => Method::PpdSparse,
                    "reference" => Method::Reference,
                    other => {
                        return Err(bad(
                            key,
                            format!("`{other}` is not `ppdsparse` or `reference`"),
                        ));
                    }
                }
            }
            "solver.loss" => {
                s.loss = match as_str(key, value)? {
                    "squared_hinge" | "sqhinge" => Loss::SquaredHinge,
                    "hinge" => Loss::Hinge,
                    "logistic" | "log" => Loss::Logistic,
                    other => {
                        return Err(bad(
                            key,
                            format!("`{other}` is not squared_hinge, hinge or logistic"),
                        ));
                    }
                }
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_string(),
                    known: Self::KEYS.join(", "),
                });
            }
        }
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

fn default_gamma() -> f32 {
    TrainConfig::DEFAULT.gamma
}

fn default_bp_q_max() -> usize {
    TrainConfig::DEFAULT.bp_q_max
}

fn default_bp_folds() -> usize {
    TrainConfig::DEFAULT.bp_folds
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

fn flatten(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, toml::Value>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

/// Reads a `--set` value as TOML (numbers, booleans, quoted strings), or else as a bare string.
fn parse_override(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn as_str<'a>(key: &str, v: &'a toml::Value) -> Result<&'a str, ConfigError> {
    v.as_str()
        .ok_or_else(|| bad(key, format!("expected a string, found `{v}`")))
}

fn as_model_kind(key: &str, v: &toml::Value) -> Result<ModelKind, ConfigError> {
    match as_str(key, v)? {
        "tree" => Ok(ModelKind::Tree),
        "flat" => Ok(ModelKind::Flat),
        other => Err(bad(key, format!("`{other}` is not `tree` or `flat`"))),
    }
}

fn as_bool(key: &str, v: &toml::Value) -> Result<bool, ConfigError> {
    match v {
        toml::Value::Boolean(b) => Ok(*b),
        toml::Value::String(s) if s == "on" => Ok(true),
        toml::Value::String(s) if s == "off" => Ok(false),
        _ => Err(bad(
            key,
            format!("expected true/false or on/off, found `{v}`"),
        )),
    }
}

fn as_usize(key: &str, v: &toml::Value) -> Result<usize, ConfigError> {
    v.as_integer()
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| bad(key, format!("expected a non-negative integer, found `{v}`")))
}

fn as_f32(key: &str, v: &toml::Value) -> Result<f32, ConfigError> {
    let x = match v {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        _ => return Err(bad(key, format!("expected a number, found `{v}`"))),
    };
    Ok(x as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

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

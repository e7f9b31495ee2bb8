//! The vectorizer's settings: the `[train.text]` table and the `--set text.KEY=VALUE` keys
//! (read by [`crate::config`]'s layering).

use crate::settings::ConfigError;
use serde::{Deserialize, Serialize};

/// How text becomes a tf-idf vector. Every field has a default ([`TextConfig::DEFAULT`]); the
/// defaults were chosen by measurement (`docs/decisions/0100-text-vectorizer-defaults.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextConfig {
    /// The shortest word n-gram that is a term.
    pub ngram_min: usize,
    /// The longest word n-gram that is a term (2: unigrams and bigrams).
    pub ngram_max: usize,
    /// Words shorter than this many characters are dropped before n-grams are formed.
    pub min_chars: usize,
    /// A term must occur in at least this many training documents.
    pub min_df: usize,
    /// A term in more than this fraction of the training documents is dropped (1.0 keeps all).
    pub max_df: f32,
    /// Keep at most this many terms, the most frequent by document frequency (0: no limit).
    pub max_features: usize,
    /// Lower-case every word (after NFKC normalization).
    pub lowercase: bool,
    /// Term frequency `1 + ln(tf)` instead of `tf`.
    pub sublinear_tf: bool,
    /// Inverse document frequency `ln((1 + n) / (1 + df)) + 1` instead of `ln(n / df) + 1`.
    pub smooth_idf: bool,
    /// Scale every vector to unit L2 norm.
    pub l2: bool,
}

impl Default for TextConfig {
    fn default() -> Self {
        TextConfig::DEFAULT
    }
}

impl TextConfig {
    /// The defaults.
    pub const DEFAULT: TextConfig = TextConfig {
        ngram_min: 1,
        ngram_max: 2,
        min_chars: 1,
        min_df: 2,
        max_df: 1.0,
        max_features: 0,
        lowercase: true,
        sublinear_tf: true,
        smooth_idf: true,
        l2: true,
    };

    /// Checks the ranges that single keys cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError::BadValue {
            key: format!("text.{key}"),
            message,
        };
        if self.ngram_min == 0 {
            return Err(bad("ngram_min", "must be at least 1".into()));
        }
        if self.ngram_max < self.ngram_min || self.ngram_max > 8 {
            return Err(bad(
                "ngram_max",
                format!(
                    "must be between ngram_min ({}) and 8, got {}",
                    self.ngram_min, self.ngram_max
                ),
            ));
        }
        if self.min_df == 0 {
            return Err(bad("min_df", "must be at least 1".into()));
        }
        if !(self.max_df > 0.0 && self.max_df <= 1.0) {
            return Err(bad(
                "max_df",
                format!("must be in (0, 1], got {}", self.max_df),
            ));
        }
        if self.max_features > u32::MAX as usize {
            return Err(bad("max_features", "must fit 32 bits".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_set_and_errors_name_the_key() {
        let load = |set: &str| crate::config::TrainConfig::load_with_env(None, &[], &[set.into()]);
        let c = load("text.min_df=3").unwrap().text;
        assert_eq!(c.min_df, 3);
        assert!(!load("text.sublinear_tf=off").unwrap().text.sublinear_tf);
        let err = load("text.min_dff=3").unwrap_err();
        assert!(err.to_string().contains("`text.min_dff`"), "{err}");
        let err = load("text.max_df=true").unwrap_err();
        assert!(err.to_string().contains("`text.max_df`"), "{err}");
        let c = TextConfig {
            max_df: 1.5,
            ..TextConfig::default()
        };
        let err = c.validate().unwrap_err();
        assert!(err.to_string().contains("`text.max_df`"), "{err}");
        let err = serde_json::from_str::<TextConfig>(r#"{"ngram": 2}"#).unwrap_err();
        assert!(err.to_string().contains("ngram"), "{err}");
    }
}

//! Fitting the vocabulary: document frequencies counted in parallel, then a deterministic cut.
//!
//! Each worker counts the documents of its share of a chunk into its own map, and the maps are
//! summed; a term's document frequency does not depend on which worker saw which document. The
//! kept terms are then ordered by descending document frequency, ties by their bytes, and a
//! term's feature id is its place in that order, so the vocabulary and the ids do not depend on
//! thread scheduling either.

use super::{
    TextConfig, TextMeta, TextView, TextViewError, TokenScratch, for_each_term, idf_weight,
};
use crate::bundle::Section;
use crate::data::DataError;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use thiserror::Error;

/// Why a vocabulary could not be fitted or applied to a file.
#[derive(Debug, Error)]
pub enum FitError {
    /// The data file is unreadable or malformed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// No term passed the `min_df`/`max_df` cut.
    #[error(
        "no term of the {documents} documents is in at least text.min_df = {min_df} of them and in \
         at most text.max_df = {max_df} of them"
    )]
    NoTerms {
        /// The number of documents.
        documents: usize,
        /// The setting.
        min_df: usize,
        /// The setting.
        max_df: f32,
    },
    /// The file has no document.
    #[error("{0}: the file holds no document")]
    NoDocuments(String),
    /// There are more documents or terms than 32-bit ids hold.
    #[error("too many {0} for 32-bit ids")]
    TooMany(&'static str),
    /// Building the vocabulary failed.
    #[error("building the vocabulary: {0}")]
    Fst(String),
    /// The fitted vocabulary does not make a view (a bug, if it ever happens).
    #[error(transparent)]
    View(#[from] TextViewError),
}

/// A small, fast, non-cryptographic hash (the multiply-rotate scheme of rustc's `FxHasher`) for
/// the term counts: the keys are the data's own words, not an attacker's.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn write_usize(&mut self, i: usize) {
        self.write(&(i as u64).to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map keyed by the fast hash.
pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[derive(Clone, Copy, Debug)]
struct DfEntry {
    df: u32,
    /// The last document counted, so a term repeated in a document counts once.
    last: u32,
}

/// Document frequencies of the terms of some documents.
#[derive(Debug, Default)]
pub(crate) struct DfCounter {
    map: FxMap<Box<[u8]>, DfEntry>,
}

impl DfCounter {
    /// Counts the terms of document `doc` (a number no other document of this counter has).
    pub fn add(&mut self, cfg: &TextConfig, doc: u32, text: &str, tokens: &mut TokenScratch) {
        let map = &mut self.map;
        for_each_term(cfg, text, tokens, |term| match map.get_mut(term) {
            Some(e) => {
                if e.last != doc {
                    e.df += 1;
                    e.last = doc;
                }
            }
            None => {
                map.insert(term.into(), DfEntry { df: 1, last: doc });
            }
        });
    }

    /// Adds the counts of `other`, whose documents are not this counter's.
    pub fn merge(&mut self, other: DfCounter) {
        if self.map.len() < other.map.len() {
            let mine = std::mem::replace(&mut self.map, other.map);
            self.absorb(mine);
        } else {
            self.absorb(other.map);
        }
    }

    fn absorb(&mut self, other: FxMap<Box<[u8]>, DfEntry>) {
        for (term, e) in other {
            self.map
                .entry(term)
                .and_modify(|m| m.df += e.df)
                .or_insert(DfEntry {
                    df: e.df,
                    last: u32::MAX,
                });
        }
    }
}

/// A fitted vocabulary: the bytes of its `fst::Map`, the idf weights by feature id, and the
/// metadata.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The settings and counts.
    pub meta: TextMeta,
    /// The `fst::Map` from term to feature id, as stored in the bundle.
    pub vocab: Vec<u8>,
    /// The idf weight of every feature id.
    pub idf: Vec<f32>,
}

impl Fitted {
    /// Cuts the counted terms to the settings and builds the vocabulary.
    pub(crate) fn from_counts(
        counter: DfCounter,
        cfg: &TextConfig,
        documents: usize,
    ) -> Result<Fitted, FitError> {
        let terms_seen = counter.map.len();
        let max_df = f64::from(cfg.max_df) * documents as f64;
        let mut kept: Vec<(Box<[u8]>, u32)> = counter
            .map
            .into_iter()
            .filter(|(_, e)| e.df as usize >= cfg.min_df && f64::from(e.df) <= max_df)
            .map(|(t, e)| (t, e.df))
            .collect();
        kept.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if cfg.max_features > 0 {
            kept.truncate(cfg.max_features);
        }
        if kept.is_empty() {
            return Err(FitError::NoTerms {
                documents,
                min_df: cfg.min_df,
                max_df: cfg.max_df,
            });
        }
        if kept.len() > u32::MAX as usize {
            return Err(FitError::TooMany("terms"));
        }
        let idf = kept
            .iter()
            .map(|(_, df)| idf_weight(*df as usize, documents, cfg.smooth_idf))
            .collect();
        let mut by_term: Vec<(&[u8], u64)> = kept
            .iter()
            .enumerate()
            .map(|(id, (t, _))| (&t[..], id as u64))
            .collect();
        by_term.sort_unstable();
        let mut builder = fst::MapBuilder::memory();
        for (term, id) in by_term {
            builder
                .insert(term, id)
                .map_err(|e| FitError::Fst(e.to_string()))?;
        }
        let vocab = builder
            .into_inner()
            .map_err(|e| FitError::Fst(e.to_string()))?;
        Ok(Fitted {
            meta: TextMeta {
                settings: cfg.clone(),
                documents,
                terms_seen,
                terms: kept.len(),
            },
            vocab,
            idf,
        })
    }

    /// Fits a vocabulary on documents held in memory (for tests and small tools; files go
    /// through [`super::corpus::fit_file`], which streams).
    pub fn fit_texts<S: AsRef<str>>(texts: &[S], cfg: &TextConfig) -> Result<Fitted, FitError> {
        if texts.is_empty() {
            return Err(FitError::NoDocuments("texts".into()));
        }
        let docs = u32::try_from(texts.len()).map_err(|_| FitError::TooMany("documents"))?;
        let mut counter = DfCounter::default();
        let mut tokens = TokenScratch::default();
        for (doc, text) in (0..docs).zip(texts) {
            counter.add(cfg, doc, text.as_ref(), &mut tokens);
        }
        Fitted::from_counts(counter, cfg, texts.len())
    }

    /// A view over copies of the vocabulary and the weights, as a bundle would hold them: the
    /// trainer vectorizes its documents through it, by the same code as every query.
    pub fn view(&self) -> Result<TextView, FitError> {
        Ok(TextView::new(
            Section::copy_of(&self.vocab),
            Section::copy_of(&self.idf),
            self.meta.clone(),
            self.idf.len(),
        )?)
    }
}

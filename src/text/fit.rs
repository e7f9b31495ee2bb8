//! Fitting the vocabulary: document frequencies counted in parallel, then a deterministic cut.
//!
//! Each worker counts the documents of its share of a chunk into its own map, and the maps are
//! summed; a term's document frequency does not depend on which worker saw which document. The
//! kept terms are then ordered by descending document frequency, ties by their bytes, and a
//! term's feature id is its place in that order, so the vocabulary and the ids do not depend on
//! thread scheduling either.

use super::index::{TermIndex, TermIndexView};
use super::{
    TextConfig, TextMeta, TextView, TextViewError, TokenScratch, for_each_term, idf_weight,
};
use crate::bundle::Section;
use crate::data::DataError;
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
    /// Texts and label lists given in memory differ in number.
    #[error("{texts} texts but {labels} label lists")]
    LengthMismatch {
        /// The number of texts.
        texts: usize,
        /// The number of label lists.
        labels: usize,
    },
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

/// A hash map keyed by a fast, non-cryptographic hash (`rustc-hash`'s `FxHasher`) for the term
/// counts and label names: the keys are the data's own words, not an attacker's.
pub(crate) type FxMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// Keys (terms or label names) numbered in the order they are first seen, with the number of
/// documents that hold each.
///
/// The numbers are internal: the vocabulary's feature ids and the label ids are assigned later,
/// by document frequency and bytes, so they do not depend on the order the keys were seen in.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    ids: FxMap<Box<[u8]>, u32>,
    /// The document frequency of every key, by number.
    df: Vec<u32>,
    /// The last document counted for every key, so a key repeated in a document counts once.
    last: Vec<u32>,
}

impl Interner {
    /// The number of distinct keys.
    pub fn len(&self) -> usize {
        self.df.len()
    }

    /// Counts `key` in document `doc` (a number no other document of this interner has) and
    /// gives its number, and whether it is the first time `doc` holds it.
    #[inline]
    pub fn add(&mut self, key: &[u8], doc: u32) -> (u32, bool) {
        match self.ids.get(key) {
            Some(&id) => {
                let i = id as usize;
                match (self.last.get_mut(i), self.df.get_mut(i)) {
                    (Some(last), Some(df)) if *last != doc => {
                        *last = doc;
                        *df += 1;
                        (id, true)
                    }
                    _ => (id, false),
                }
            }
            None => {
                let id = self.df.len() as u32;
                self.ids.insert(key.into(), id);
                self.df.push(1);
                self.last.push(doc);
                (id, true)
            }
        }
    }

    /// Counts every term of `text` as document `doc`, appending the terms' numbers, in text
    /// order and with repetitions, to `out`.
    pub fn add_text(
        &mut self,
        cfg: &TextConfig,
        doc: u32,
        text: &str,
        tokens: &mut TokenScratch,
        out: &mut Vec<u32>,
    ) {
        for_each_term(cfg, text, tokens, |term| out.push(self.add(term, doc).0));
    }

    /// Adds the keys and counts of `other`, whose documents are not this interner's, and gives
    /// the number here of each of `other`'s numbers.
    pub fn absorb(&mut self, other: Interner) -> Vec<u32> {
        let mut renumber = vec![0u32; other.df.len()];
        for (key, id) in other.ids {
            let df = other.df.get(id as usize).copied().unwrap_or(0);
            let here = match self.ids.get(&key) {
                Some(&here) => {
                    if let Some(d) = self.df.get_mut(here as usize) {
                        *d += df;
                    }
                    here
                }
                None => {
                    let here = self.df.len() as u32;
                    self.ids.insert(key, here);
                    self.df.push(df);
                    self.last.push(u32::MAX);
                    here
                }
            };
            if let Some(r) = renumber.get_mut(id as usize) {
                *r = here;
            }
        }
        renumber
    }

    /// Every key with its document frequency and its number.
    pub fn into_counts(self) -> impl Iterator<Item = (Box<[u8]>, u32, u32)> {
        let df = self.df;
        self.ids
            .into_iter()
            .map(move |(key, id)| (key, df.get(id as usize).copied().unwrap_or(0), id))
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
    /// The hashed term index over the same terms, as stored in the bundle; empty (its default)
    /// for a vectorizer written without one, as before the index existed.
    pub index: TermIndex,
}

impl Fitted {
    /// Cuts the counted terms to the settings and builds the vocabulary. Also gives, for every
    /// number of `terms`, its feature id, or `u32::MAX` for a term that was cut.
    pub(crate) fn from_counts(
        terms: Interner,
        cfg: &TextConfig,
        documents: usize,
    ) -> Result<(Fitted, Vec<u32>), FitError> {
        let terms_seen = terms.len();
        let max_df = f64::from(cfg.max_df) * documents as f64;
        let mut kept: Vec<(Box<[u8]>, u32, u32)> = terms
            .into_counts()
            .filter(|(_, df, _)| *df as usize >= cfg.min_df && f64::from(*df) <= max_df)
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
        if kept.len() >= u32::MAX as usize {
            return Err(FitError::TooMany("terms"));
        }
        let idf = kept
            .iter()
            .map(|(_, df, _)| idf_weight(*df as usize, documents, cfg.smooth_idf))
            .collect();
        let mut feature_of = vec![u32::MAX; terms_seen];
        for (feature, (_, _, number)) in kept.iter().enumerate() {
            if let Some(f) = feature_of.get_mut(*number as usize) {
                *f = feature as u32;
            }
        }
        let index = TermIndex::build(kept.iter().map(|(t, _, _)| &t[..]))
            .ok_or(FitError::TooMany("bytes of terms for 32-bit offsets"))?;
        let mut by_term: Vec<(&[u8], u64)> = kept
            .iter()
            .enumerate()
            .map(|(id, (t, _, _))| (&t[..], id as u64))
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
        let fitted = Fitted {
            meta: TextMeta {
                settings: cfg.clone(),
                documents,
                terms_seen,
                terms: kept.len(),
            },
            vocab,
            idf,
            index,
        };
        Ok((fitted, feature_of))
    }

    /// Fits a vocabulary on documents held in memory (for tests and small tools; files go
    /// through [`super::corpus::fit_file`], which streams).
    pub fn fit_texts<S: AsRef<str>>(texts: &[S], cfg: &TextConfig) -> Result<Fitted, FitError> {
        if texts.is_empty() {
            return Err(FitError::NoDocuments("texts".into()));
        }
        let docs = u32::try_from(texts.len()).map_err(|_| FitError::TooMany("documents"))?;
        let mut terms = Interner::default();
        let (mut tokens, mut numbers) = (TokenScratch::default(), Vec::new());
        for (doc, text) in (0..docs).zip(texts) {
            numbers.clear();
            terms.add_text(cfg, doc, text.as_ref(), &mut tokens, &mut numbers);
        }
        Ok(Fitted::from_counts(terms, cfg, texts.len())?.0)
    }

    /// A view over copies of the vocabulary, the weights and the index, as a bundle would hold
    /// them: the trainer vectorizes its documents through it, by the same code as every query.
    pub fn view(&self) -> Result<TextView, FitError> {
        let index = if self.index.slots.is_empty() {
            None
        } else {
            Some(
                TermIndexView::new(
                    Section::copy_of(&self.index.slots),
                    Section::copy_of(&self.index.terms),
                    self.idf.len(),
                )
                .map_err(TextViewError::from)?,
            )
        };
        Ok(TextView::new(
            Section::copy_of(&self.vocab),
            Section::copy_of(&self.idf),
            index,
            self.meta.clone(),
            self.idf.len(),
        )?)
    }
}

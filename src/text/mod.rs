//! Text in: the tf-idf vectorizer that is fitted by the trainer, stored in the bundle and applied
//! to every text query.
//!
//! One function turns text into a feature vector, [`TextView::vectorize`]: the one tokenizer
//! gives the terms, the vocabulary their feature ids, and `TextView::weigh` the tf-idf vector.
//! The trainer reads its documents once: it tokenizes each by that same tokenizer while it fits
//! the vocabulary ([`fit`]), keeps each document's terms, and once the vocabulary is cut, weighs
//! each document's feature ids by `weigh` through a [`TextView`] over the very bytes it stores. So
//! a document sent as a query gets exactly the row the model learned from: there is no second
//! implementation that could drift (no training/serving skew).
//!
//! # Tokens and terms
//!
//! 1. The text is normalized to Unicode NFKC (`unicode-normalization`); text that is NFKC
//!    already (all ASCII text, and any text the NFKC quick check passes) skips that step.
//! 2. With `lowercase` (the default), every character is lower-cased after NFKC (Rust's
//!    `char::to_lowercase`, the full Unicode mapping, not locale-aware). This is case folding by
//!    lower-casing: it does not fold `ß` to `ss`, and the result is not re-normalized.
//! 3. Words are the UAX #29 word segments that hold a letter or a digit
//!    (`unicode-segmentation`'s `unicode_word_indices`); words shorter than `min_chars`
//!    characters are dropped.
//! 4. The terms are the word n-grams for n in `ngram_min..=ngram_max`, the words of an n-gram
//!    joined by one space.
//!
//! # Weights
//!
//! A term's value is `tf × idf`: `tf` is its count in the text, or `1 + ln(count)` with
//! `sublinear_tf`; `idf = ln((1 + n) / (1 + df)) + 1` with `smooth_idf`, else `ln(n / df) + 1`,
//! for `n` training documents of which `df` hold the term. With `l2` the vector is then scaled to
//! unit length. These are scikit-learn's `TfidfVectorizer` formulas.
//!
//! # In the bundle
//!
//! - `text.vocab` (bytes): an [`fst::Map`] from term bytes to feature id, read in place from the
//!   memory map; opening it reads its header only.
//! - `text.idf` (f32): one idf weight per feature id.
//! - `text.index.{slots,terms}`: the hashed term index ([`index`]) over the same terms,
//!   by which a query looks its terms up. Bundles written before it have none; their queries walk
//!   the fst.
//! - the metadata's `text` object ([`TextMeta`]): the settings and the fit's counts.

pub mod config;
pub mod corpus;
pub mod fit;
pub mod index;
pub mod jsonl;

pub use config::TextConfig;
pub use corpus::{LabelMap, TextCorpus};
pub use fit::{FitError, Fitted};
pub use index::{TermIndex, TermIndexError};

use index::TermIndexView;

use crate::bundle::{Bundle, Section};
use serde::{Deserialize, Serialize};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};
use unicode_segmentation::UnicodeSegmentation;

/// The section that holds the vocabulary, an `fst::Map` from term to feature id.
pub const VOCAB_SECTION: &str = "text.vocab";

/// The section that holds the idf weight of every feature id.
pub const IDF_SECTION: &str = "text.idf";

/// What a text model's metadata says about its vectorizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextMeta {
    /// The settings the vocabulary was fitted and is applied with.
    pub settings: TextConfig,
    /// The number of training documents the idf weights count.
    pub documents: usize,
    /// The number of distinct terms seen in training, before `min_df`, `max_df` and
    /// `max_features` cut them.
    pub terms_seen: usize,
    /// The number of terms kept: the feature count.
    pub terms: usize,
}

/// Counts of one vectorized text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextStats {
    /// The terms (word n-grams) of the text, with repetitions.
    pub terms: usize,
    /// Those found in the vocabulary.
    pub known_terms: usize,
}

/// Reusable buffers of the tokenizer.
#[derive(Clone, Debug, Default)]
pub(crate) struct TokenScratch {
    /// The normalized text.
    norm: String,
    /// Byte ranges of the kept words in `norm`.
    words: Vec<(usize, usize)>,
    /// The n-gram being assembled.
    key: Vec<u8>,
    /// The terms of a text, for the term index.
    batch: index::Batch,
}

/// Reusable buffers of [`TextView::vectorize`]; once they have grown to a query's size, a
/// query of that size allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct TextScratch {
    tokens: TokenScratch,
    ids: Vec<u32>,
}

/// Normalizes `text` into `norm` and gives the byte ranges of its kept words in `words`: steps 1
/// to 3 of the tokenizer, which fitting ([`for_each_term`]) and vectorizing
/// ([`TextView::vectorize`]) share.
fn tokenize(cfg: &TextConfig, text: &str, norm: &mut String, words: &mut Vec<(usize, usize)>) {
    norm.clear();
    if text.is_ascii() {
        // NFKC leaves ASCII unchanged, and ASCII lower-casing is the Unicode mapping there.
        norm.push_str(text);
        if cfg.lowercase {
            norm.make_ascii_lowercase();
        }
    } else if is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        // The text is already NFKC (the quick check answers `Yes` only then), so normalizing
        // would copy it unchanged.
        if cfg.lowercase {
            for c in text.chars() {
                norm.extend(c.to_lowercase());
            }
        } else {
            norm.push_str(text);
        }
    } else if cfg.lowercase {
        for c in text.nfkc() {
            norm.extend(c.to_lowercase());
        }
    } else {
        norm.extend(text.nfkc());
    }
    words.clear();
    for (start, w) in norm.unicode_word_indices() {
        if cfg.min_chars <= 1 || w.chars().count() >= cfg.min_chars {
            words.push((start, start + w.len()));
        }
    }
}

/// Calls `f` with every term of `text`, in text order: the terms the fit counts. Vectorizing
/// looks up the very same terms, walking the vocabulary along the same words
/// ([`TextView::vectorize`]).
pub(crate) fn for_each_term(
    cfg: &TextConfig,
    text: &str,
    scratch: &mut TokenScratch,
    mut f: impl FnMut(&[u8]),
) {
    let TokenScratch {
        norm, words, key, ..
    } = scratch;
    tokenize(cfg, text, norm, words);
    let bytes = norm.as_bytes();
    let word = |&(s, e): &(usize, usize)| bytes.get(s..e).unwrap_or(&[]);
    for i in 0..words.len() {
        for n in cfg.ngram_min..=cfg.ngram_max {
            let Some(gram) = words.get(i..i + n) else {
                break;
            };
            if let [one] = gram {
                f(word(one));
                continue;
            }
            key.clear();
            for (j, w) in gram.iter().enumerate() {
                if j > 0 {
                    key.push(b' ');
                }
                key.extend_from_slice(word(w));
            }
            f(key);
        }
    }
}

/// Follows `bytes` from `node` in `fst`, adding the transitions' outputs to `out`; false, with
/// `node` and `out` left anywhere, when the vocabulary has no term that starts so.
#[inline]
fn walk<'f>(
    fst: &'f fst::raw::Fst<Section<u8>>,
    node: &mut fst::raw::Node<'f>,
    out: &mut fst::raw::Output,
    bytes: &[u8],
) -> bool {
    for &b in bytes {
        let Some(i) = node.find_input(b) else {
            return false;
        };
        let t = node.transition(i);
        *out = out.cat(t.out);
        *node = fst.node(t.addr);
    }
    true
}

/// The weight of a term that occurs `count` times.
#[inline]
fn tf_weight(count: u32, sublinear: bool) -> f32 {
    if sublinear {
        1.0 + (count as f32).ln()
    } else {
        count as f32
    }
}

/// The idf weight of a term in `df` of `n` documents.
pub(crate) fn idf_weight(df: usize, n: usize, smooth: bool) -> f32 {
    let (n, df) = (n as f64, df as f64);
    let idf = if smooth {
        ((1.0 + n) / (1.0 + df)).ln() + 1.0
    } else {
        (n / df.max(1.0)).ln() + 1.0
    };
    idf as f32
}

/// Why a bundle's text sections cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TextViewError {
    /// The vocabulary is not a valid `fst::Map`.
    #[error("{VOCAB_SECTION}: {0}")]
    Vocab(String),
    /// The idf weights do not match the feature count.
    #[error("{IDF_SECTION} holds {found} weights for {expected} features")]
    IdfLength {
        /// The model's feature count.
        expected: usize,
        /// The section's length.
        found: usize,
    },
    /// A feature id in the vocabulary is out of range (found by a full check).
    #[error("{VOCAB_SECTION}: term {term:?} has feature id {id}, not below {n_features}")]
    IdOutOfRange {
        /// The term, lossily decoded.
        term: String,
        /// Its id.
        id: u64,
        /// The feature count.
        n_features: usize,
    },
    /// The vocabulary and the feature count disagree (found by a full check).
    #[error("{VOCAB_SECTION} holds {found} terms for {expected} features")]
    VocabLength {
        /// The feature count.
        expected: usize,
        /// The number of terms.
        found: usize,
    },
    /// An idf weight is not a finite positive number (found by a full check).
    #[error("{IDF_SECTION}: weight {index} is {value}")]
    BadIdf {
        /// The feature id.
        index: usize,
        /// The weight.
        value: f32,
    },
    /// The term index is damaged or disagrees with the vocabulary.
    #[error(transparent)]
    Index(#[from] TermIndexError),
    /// A section is missing or of the wrong type.
    #[error(transparent)]
    Format(#[from] crate::bundle::FormatError),
}

/// The vectorizer of a model: its vocabulary and idf weights, read in place from the bundle.
pub struct TextView {
    vocab: fst::Map<Section<u8>>,
    idf: Section<f32>,
    /// The hashed term index, in every bundle written since it exists.
    index: Option<TermIndexView>,
    meta: TextMeta,
}

impl std::fmt::Debug for TextView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextView")
            .field("terms", &self.vocab.len())
            .field("index", &self.index.is_some())
            .field("settings", &self.meta.settings)
            .finish()
    }
}

impl TextView {
    /// The view over a bundle's text sections, for a model with `n_features` features. Reads the
    /// vocabulary's header and the index's section lengths only, so it costs the same for any
    /// vocabulary size.
    pub fn open(
        bundle: &Bundle,
        meta: &TextMeta,
        n_features: usize,
    ) -> Result<Self, TextViewError> {
        TextView::new(
            bundle.bytes(VOCAB_SECTION)?,
            bundle.f32s(IDF_SECTION)?,
            TermIndexView::open(bundle, n_features)?,
            meta.clone(),
            n_features,
        )
    }

    /// The view over a vocabulary, idf weights and, when the bundle has one, a term index,
    /// checked in O(1).
    pub(crate) fn new(
        vocab: Section<u8>,
        idf: Section<f32>,
        index: Option<TermIndexView>,
        meta: TextMeta,
        n_features: usize,
    ) -> Result<Self, TextViewError> {
        if idf.len() != n_features {
            return Err(TextViewError::IdfLength {
                expected: n_features,
                found: idf.len(),
            });
        }
        let vocab = fst::Map::new(vocab).map_err(|e| TextViewError::Vocab(e.to_string()))?;
        Ok(TextView {
            vocab,
            idf,
            index,
            meta,
        })
    }

    /// The full check, O(vocabulary): the vocabulary's own checksum, every id in range and used
    /// once, every idf weight finite and positive, and the term index whole and holding the
    /// vocabulary's very terms.
    pub fn verify(&self) -> Result<(), TextViewError> {
        use fst::Streamer;
        self.vocab
            .as_fst()
            .verify()
            .map_err(|e| TextViewError::Vocab(e.to_string()))?;
        let n = self.idf.len();
        if self.vocab.len() != n {
            return Err(TextViewError::VocabLength {
                expected: n,
                found: self.vocab.len(),
            });
        }
        // The index's term check runs in the same pass over the fst, its first failure reported
        // after the vocabulary's and the index's own checks.
        let mut index_term = Ok(());
        let mut seen = vec![false; n];
        let mut stream = self.vocab.stream();
        while let Some((term, id)) = stream.next() {
            let fresh = usize::try_from(id)
                .ok()
                .and_then(|i| seen.get_mut(i))
                .map(|s| !std::mem::replace(s, true));
            if fresh != Some(true) {
                return Err(TextViewError::IdOutOfRange {
                    term: String::from_utf8_lossy(term).into_owned(),
                    id,
                    n_features: n,
                });
            }
            if let (Some(index), Ok(())) = (&self.index, &index_term) {
                index_term = index.check_term(term, id);
            }
        }
        if let Some((index, &value)) = self
            .idf
            .iter()
            .enumerate()
            .find(|(_, w)| !(w.is_finite() && **w > 0.0))
        {
            return Err(TextViewError::BadIdf { index, value });
        }
        if let Some(index) = &self.index {
            index.verify(n)?;
        }
        Ok(index_term?)
    }

    /// The settings and counts of the fit.
    pub fn meta(&self) -> &TextMeta {
        &self.meta
    }

    /// The number of features (terms in the vocabulary).
    pub fn n_features(&self) -> usize {
        self.idf.len()
    }

    /// The feature id of `term`, if it is in the vocabulary.
    pub fn term_id(&self, term: &str) -> Option<u32> {
        self.vocab
            .get(term)
            .and_then(|id| u32::try_from(id).ok())
            .filter(|&id| (id as usize) < self.idf.len())
    }

    /// Every term, indexed by feature id (O(vocabulary); for feature-name files and tools).
    pub fn terms(&self) -> Vec<String> {
        use fst::Streamer;
        let mut out = vec![String::new(); self.idf.len()];
        let mut stream = self.vocab.stream();
        while let Some((term, id)) = stream.next() {
            if let Some(slot) = usize::try_from(id).ok().and_then(|i| out.get_mut(i)) {
                *slot = String::from_utf8_lossy(term).into_owned();
            }
        }
        out
    }

    /// Sorted, unique feature ids with their tf-idf values (l2-normalised per settings).
    ///
    /// `idx` and `val` are cleared first. A text with no known term gives empty vectors. Once
    /// `scratch`, `idx` and `val` have grown to a text's size, a text of that size allocates
    /// nothing, and nothing here can panic.
    pub fn vectorize(
        &self,
        text: &str,
        scratch: &mut TextScratch,
        idx: &mut Vec<u32>,
        val: &mut Vec<f32>,
    ) -> TextStats {
        let TextScratch { tokens, ids } = scratch;
        let settings = &self.meta.settings;
        let n_features = self.idf.len();
        let mut stats = TextStats::default();
        ids.clear();
        tokenize(settings, text, &mut tokens.norm, &mut tokens.words);
        let bytes = tokens.norm.as_bytes();
        let words = &tokens.words;
        // The terms are those of `for_each_term`: for every word i, the n-grams of words i..i + n
        // joined by one space, n from `ngram_min` to `ngram_max`.
        let mut found = |stats: &mut TextStats, id: Option<u64>| {
            stats.terms += 1;
            if let Some(id) = id.and_then(|id| u32::try_from(id).ok()) {
                if (id as usize) < n_features {
                    stats.known_terms += 1;
                    ids.push(id);
                }
            }
        };
        match &self.index {
            // The hashed index, all the text's terms at once
            // (docs/decisions/0027-text-term-index.md).
            Some(index) => {
                let batch = &mut tokens.batch;
                batch.clear();
                for i in 0..words.len() {
                    for n in settings.ngram_min..=settings.ngram_max {
                        let Some(gram) = words.get(i..i + n) else {
                            break;
                        };
                        batch.push(
                            gram.iter().map(|&(s, e)| bytes.get(s..e).unwrap_or(&[])),
                            b' ',
                        );
                    }
                }
                index
                    .tables()
                    .get_batch(batch, |_, id| found(&mut stats, id.map(u64::from)));
            }
            // A bundle without the index: an n-gram's key extends the (n - 1)-gram's, so one
            // walk of the fst from the root along word i, a space, word i + 1, ... finds them
            // all; the n-gram is known when the walk reaches a final state after its nth word
            // (docs/decisions/0025-text-query-one-walk-per-word.md).
            None => {
                let fst = self.vocab.as_fst();
                for i in 0..words.len() {
                    let mut node = fst.root();
                    let mut out = fst::raw::Output::zero();
                    let mut alive = true;
                    for n in 1..=settings.ngram_max {
                        let Some(&(s, e)) = words.get(i + n - 1) else {
                            break;
                        };
                        if alive {
                            let word = bytes.get(s..e).unwrap_or(&[]);
                            alive = (n == 1 || walk(fst, &mut node, &mut out, b" "))
                                && walk(fst, &mut node, &mut out, word);
                        }
                        if n >= settings.ngram_min {
                            let id = (alive && node.is_final())
                                .then(|| out.cat(node.final_output()).value());
                            found(&mut stats, id);
                        }
                    }
                }
            }
        }
        self.weigh(ids, idx, val);
        stats
    }

    /// The second half of [`TextView::vectorize`]: the tf-idf vector of a text whose terms have
    /// the feature ids `ids` (in any order, with repetitions, every id below the feature count).
    /// The trainer, which finds its documents' feature ids while it fits the vocabulary, makes its
    /// rows by this very code.
    pub(crate) fn weigh(&self, ids: &mut [u32], idx: &mut Vec<u32>, val: &mut Vec<f32>) {
        let settings = &self.meta.settings;
        ids.sort_unstable();
        idx.clear();
        val.clear();
        let mut rest: &[u32] = ids;
        while let Some(&id) = rest.first() {
            let run = rest.iter().take_while(|&&x| x == id).count();
            rest = rest.get(run..).unwrap_or(&[]);
            idx.push(id);
            val.push(tf_weight(run as u32, settings.sublinear_tf));
        }
        // The idf weights are read in a loop of their own, whose reads do not wait on each other.
        let idf: &[f32] = &self.idf;
        for (v, &id) in val.iter_mut().zip(idx.iter()) {
            *v *= idf.get(id as usize).copied().unwrap_or(0.0);
        }
        if settings.l2 {
            crate::data::l2_normalize(val);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The vector of `text` found the plain way: every term of [`for_each_term`] looked up by
    /// itself with the fst's `get`, then weighed. `vectorize` must match it, by the term index and
    /// by its one fst walk per word.
    fn by_get(view: &TextView, text: &str) -> (Vec<u32>, Vec<f32>, TextStats) {
        let mut stats = TextStats::default();
        let mut ids = Vec::new();
        let settings = view.meta.settings.clone();
        for_each_term(&settings, text, &mut TokenScratch::default(), |term| {
            stats.terms += 1;
            if let Some(id) = view.vocab.get(term) {
                stats.known_terms += 1;
                ids.push(u32::try_from(id).unwrap());
            }
        });
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        view.weigh(&mut ids, &mut idx, &mut val);
        (idx, val, stats)
    }

    #[test]
    fn the_index_and_the_walk_find_what_a_lookup_per_term_finds() {
        let train = [
            "GTK+ image viewer written in Python",
            "an image viewer for the terminal, written in C",
            "Python bindings for GTK+ 3; the viewer's library",
            "ﬁle manager in Ｐｙｔｈｏｎ — Ünïcode text, written in C",
            "Straße and strasse: ǅemal written in Python, e.g. 3.14 or 1,000",
            "the the the viewer viewer image",
        ];
        let queries = [
            "",
            "   ",
            "written in python image viewer",
            "WRITTEN IN PYTHON, an unknown word, image viewer written in C",
            "ﬁle manager in Ｐｙｔｈｏｎ", // not NFKC: the normalizing path
            "ünïcode text written in c",   // NFKC already: the quick-check path
            "viewer viewer viewer in in python the the image",
            "Straße strasse ǅemal 3.14 1,000 e.g.",
            "zzz unknown words only",
        ];
        for (lo, hi, min_df) in [
            (1, 1, 1),
            (1, 2, 1),
            (1, 2, 2),
            (2, 2, 1),
            (2, 3, 1),
            (1, 3, 1),
        ] {
            let cfg = TextConfig {
                ngram_min: lo,
                ngram_max: hi,
                min_df,
                ..TextConfig::DEFAULT
            };
            let fitted = Fitted::fit_texts(&train, &cfg).unwrap();
            let view = fitted.view().unwrap();
            assert!(view.index.is_some());
            // A bundle written before the term index: its queries walk the fst.
            let walking = TextView::new(
                Section::copy_of(&fitted.vocab),
                Section::copy_of(&fitted.idf),
                None,
                fitted.meta.clone(),
                fitted.idf.len(),
            )
            .unwrap();
            let mut scratch = TextScratch::default();
            for q in train.iter().chain(&queries) {
                let (want_idx, want_val, want_stats) = by_get(&view, q);
                for v in [&view, &walking] {
                    let (mut idx, mut val) = (Vec::new(), Vec::new());
                    let stats = v.vectorize(q, &mut scratch, &mut idx, &mut val);
                    assert_eq!(stats, want_stats, "{lo}..={hi}, min_df {min_df}: {q:?}");
                    assert_eq!(idx, want_idx, "{lo}..={hi}, min_df {min_df}: {q:?}");
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&val), bits(&want_val), "{lo}..={hi}: {q:?}");
                }
            }
            // With every training term kept, a training text knows all its terms.
            if min_df == 1 {
                let (_, _, s) = by_get(&view, train[0]);
                assert!(
                    s.known_terms > 0 && s.known_terms == s.terms,
                    "{lo}..={hi}: {s:?}"
                );
            }
        }
    }
}

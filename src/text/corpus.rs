//! Text files to data sets: the streaming, parallel fit of a vocabulary and label map over a
//! JSONL file, and the vectorization of a JSONL file through a [`TextView`].

use super::fit::{FitError, Fitted, FxMap, Interner};
use super::jsonl::{LineChunk, LineReader, Record, line_error, parse_line};
use super::{TextConfig, TextScratch, TextStats, TextView, TokenScratch};
use crate::data::{DataError, Dataset, SparseMatrix};
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

/// How many bytes of lines are read before a chunk is processed in parallel.
const CHUNK_BYTES: usize = 8 << 20;

/// Label names and their ids.
///
/// Fitted on training data, the ids are given by descending training frequency (the number of
/// documents with the label), ties broken by the names' bytes; the most frequent label is 0.
#[derive(Clone, Debug, Default)]
pub struct LabelMap {
    names: Vec<String>,
    ids: FxMap<String, u32>,
}

impl LabelMap {
    /// The map whose label `i` is `names[i]`, e.g. a model's label names.
    pub fn from_names<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> LabelMap {
        let names: Vec<String> = names.into_iter().map(|s| s.as_ref().to_string()).collect();
        let mut ids = FxMap::default();
        for (i, n) in names.iter().enumerate() {
            ids.entry(n.clone()).or_insert(i as u32);
        }
        LabelMap { names, ids }
    }

    /// The map from training counts: descending count, then name. Also gives the label id of
    /// every number of `counted`.
    fn from_counts(counted: Interner) -> (LabelMap, Vec<u32>) {
        let n = counted.len();
        let mut by_count: Vec<(String, u32, u32)> = counted
            .into_counts()
            .map(|(name, count, number)| {
                let name = String::from_utf8(name.into_vec())
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                (name, count, number)
            })
            .collect();
        by_count.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut label_of = vec![0u32; n];
        for (id, (_, _, number)) in by_count.iter().enumerate() {
            if let Some(l) = label_of.get_mut(*number as usize) {
                *l = id as u32;
            }
        }
        let map = LabelMap::from_names(by_count.into_iter().map(|(name, _, _)| name));
        (map, label_of)
    }

    /// The id of `name`.
    pub fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// The names, by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there is no label.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The first error of a chunk, found again in line order, so that the error a file gets does
/// not depend on which worker failed first.
fn first_error(chunk: &LineChunk, file: &str, need_labels: bool, fallback: DataError) -> DataError {
    (0..chunk.len())
        .filter_map(|i| chunk.line(i))
        .find_map(|(no, line)| {
            parse_line(line, need_labels)
                .err()
                .map(|p| line_error(file, no, p))
        })
        .unwrap_or(fallback)
}

/// Documents counted: the terms and labels under numbers of their own, and, when kept, each
/// document's term and label numbers.
struct Counted {
    terms: Interner,
    labels: Interner,
    /// Every document's term numbers, in text order and with repetitions, one after another.
    doc_terms: Vec<u32>,
    /// Where each document's term numbers end in `doc_terms` (after a leading 0).
    term_ends: Vec<usize>,
    /// Every document's label numbers, each once.
    doc_labels: Vec<u32>,
    /// Where each document's label numbers end in `doc_labels` (after a leading 0).
    label_ends: Vec<usize>,
    /// Whether the documents' numbers are kept.
    keep: bool,
    /// The number of documents.
    docs: usize,
}

impl Counted {
    fn new(keep: bool) -> Counted {
        Counted {
            terms: Interner::default(),
            labels: Interner::default(),
            doc_terms: Vec::new(),
            term_ends: vec![0],
            doc_labels: Vec::new(),
            label_ends: vec![0],
            keep,
            docs: 0,
        }
    }

    /// Counts one document, number `doc`, tokenized by the one tokenizer.
    fn add(&mut self, cfg: &TextConfig, doc: u32, rec: &Record<'_>, tokens: &mut TokenScratch) {
        self.terms
            .add_text(cfg, doc, &rec.text, tokens, &mut self.doc_terms);
        for name in &rec.labels {
            if let (number, true) = self.labels.add(name.as_bytes(), doc) {
                self.doc_labels.push(number);
            }
        }
        self.docs += 1;
        if self.keep {
            self.term_ends.push(self.doc_terms.len());
            self.label_ends.push(self.doc_labels.len());
        } else {
            self.doc_terms.clear();
            self.doc_labels.clear();
        }
    }

    /// Appends `other`'s documents, which follow this one's, renumbering their terms and labels.
    fn append(&mut self, other: Counted) {
        let terms = self.terms.absorb(other.terms);
        let labels = self.labels.absorb(other.labels);
        self.docs += other.docs;
        if !self.keep {
            return;
        }
        let renumber = |map: &[u32], n: &u32| map.get(*n as usize).copied().unwrap_or(0);
        let (t0, l0) = (self.doc_terms.len(), self.doc_labels.len());
        self.doc_terms
            .extend(other.doc_terms.iter().map(|n| renumber(&terms, n)));
        self.doc_labels
            .extend(other.doc_labels.iter().map(|n| renumber(&labels, n)));
        self.term_ends
            .extend(other.term_ends.iter().skip(1).map(|e| e + t0));
        self.label_ends
            .extend(other.label_ends.iter().skip(1).map(|e| e + l0));
    }

    /// The term and label numbers of document `d`.
    fn doc(&self, d: usize) -> (&[u32], &[u32]) {
        let range = |ends: &[usize]| {
            let start = ends.get(d).copied().unwrap_or(0);
            start..ends.get(d + 1).copied().unwrap_or(start)
        };
        (
            self.doc_terms.get(range(&self.term_ends)).unwrap_or(&[]),
            self.doc_labels.get(range(&self.label_ends)).unwrap_or(&[]),
        )
    }
}

/// Counts documents `0..n` of a batch, numbered on from `total`'s, in a few contiguous ranges
/// per thread (so that a slow range holds no thread idle), and appends them to `total` in order.
/// `record(i)` parses document `i`.
fn count_batch<'a>(
    total: &mut Counted,
    n: usize,
    cfg: &TextConfig,
    record: impl Fn(usize) -> Result<Record<'a>, DataError> + Sync,
) -> Result<(), FitError> {
    let base = u32::try_from(total.docs).map_err(|_| FitError::TooMany("documents"))?;
    let keep = total.keep;
    let ranges = 2 * rayon::current_num_threads().max(1);
    let per = n.div_ceil(ranges).max(1);
    let parts = (0..n.div_ceil(per))
        .into_par_iter()
        .map(|r| {
            let mut part = Counted::new(keep);
            let mut tokens = TokenScratch::default();
            for i in r * per..n.min((r + 1) * per) {
                let rec = record(i)?;
                part.add(cfg, base.wrapping_add(i as u32), &rec, &mut tokens);
            }
            Ok(part)
        })
        .collect::<Result<Vec<Counted>, DataError>>()?;
    for part in parts {
        total.append(part);
    }
    Ok(())
}

/// Reads the JSONL file at `path` once, in chunks whose lines are parsed and tokenized in
/// parallel, and counts its terms and labels. Every line needs `text` and `labels`.
fn count_file(path: &Path, cfg: &TextConfig, keep: bool) -> Result<Counted, FitError> {
    let mut reader = LineReader::open(path)?;
    let file = reader.file().to_string();
    let mut chunk = LineChunk::default();
    let mut total = Counted::new(keep);
    while reader.next_chunk(&mut chunk, CHUNK_BYTES)? {
        count_batch(&mut total, chunk.len(), cfg, |i| {
            let (no, line) = chunk.line(i).unwrap_or((0, &[]));
            parse_line(line, true).map_err(|p| line_error(&file, no, p))
        })
        .map_err(|e| match e {
            FitError::Data(e) => FitError::Data(first_error(&chunk, &file, true, e)),
            e => e,
        })?;
    }
    if total.docs == 0 {
        return Err(FitError::NoDocuments(file));
    }
    Ok(total)
}

/// Fits the vocabulary and the label map on the JSONL file at `path`, streaming it in chunks
/// that are tokenized in parallel. Every line needs `text` and `labels`.
pub fn fit_file(path: &Path, cfg: &TextConfig) -> Result<(Fitted, LabelMap), FitError> {
    let counted = count_file(path, cfg, false)?;
    let (labels, _) = LabelMap::from_counts(counted.labels);
    let (fitted, _) = Fitted::from_counts(counted.terms, cfg, counted.docs)?;
    Ok((fitted, labels))
}

/// A JSONL file vectorized: its data set and what vectorizing found.
#[derive(Debug)]
pub struct TextCorpus {
    /// The rows, one per document, over the view's features and the label map's labels.
    pub dataset: Dataset,
    /// Label occurrences not in the label map (dropped from the rows).
    pub unknown_labels: usize,
    /// Summed over the documents.
    pub stats: TextStats,
    /// Documents with no known term (their rows are empty).
    pub empty_rows: usize,
    /// Wall-clock seconds spent.
    pub seconds: f64,
}

/// One vectorized document.
struct Row {
    idx: Vec<u32>,
    val: Vec<f32>,
    labels: Vec<u32>,
    unknown: usize,
    stats: TextStats,
}

/// The rows of a corpus, appended in document order.
struct Rows {
    f_ptr: Vec<usize>,
    f_idx: Vec<u32>,
    f_val: Vec<f32>,
    l_ptr: Vec<usize>,
    l_idx: Vec<u32>,
    unknown_labels: usize,
    stats: TextStats,
    empty_rows: usize,
}

impl Rows {
    fn new() -> Rows {
        Rows {
            f_ptr: vec![0],
            f_idx: Vec::new(),
            f_val: Vec::new(),
            l_ptr: vec![0],
            l_idx: Vec::new(),
            unknown_labels: 0,
            stats: TextStats::default(),
            empty_rows: 0,
        }
    }

    fn push(&mut self, r: Row) {
        self.f_idx.extend_from_slice(&r.idx);
        self.f_val.extend_from_slice(&r.val);
        self.f_ptr.push(self.f_idx.len());
        self.l_idx.extend_from_slice(&r.labels);
        self.l_ptr.push(self.l_idx.len());
        self.unknown_labels += r.unknown;
        self.stats.terms += r.stats.terms;
        self.stats.known_terms += r.stats.known_terms;
        self.empty_rows += usize::from(r.idx.is_empty());
    }

    fn finish(self, n_features: usize, n_labels: usize, start: Instant) -> TextCorpus {
        let n = self.f_ptr.len() - 1;
        let ones = vec![1.0f32; self.l_idx.len()];
        TextCorpus {
            dataset: Dataset {
                features: SparseMatrix::new((n, n_features), self.f_ptr, self.f_idx, self.f_val),
                labels: SparseMatrix::new((n, n_labels), self.l_ptr, self.l_idx, ones),
            },
            unknown_labels: self.unknown_labels,
            stats: self.stats,
            empty_rows: self.empty_rows,
            seconds: start.elapsed().as_secs_f64(),
        }
    }
}

/// Vectorizes the JSONL file at `path` through `view`, mapping label names with `labels`
/// (names it lacks are dropped and counted). With `need_labels`, every line needs `labels`.
pub fn vectorize_file(
    path: &Path,
    view: &TextView,
    labels: &LabelMap,
    need_labels: bool,
) -> Result<TextCorpus, DataError> {
    let start = Instant::now();
    let mut reader = LineReader::open(path)?;
    let file = reader.file().to_string();
    let mut chunk = LineChunk::default();
    let mut out = Rows::new();
    while reader.next_chunk(&mut chunk, CHUNK_BYTES)? {
        let rows: Vec<Row> = (0..chunk.len())
            .into_par_iter()
            .map_init(TextScratch::default, |scratch, i| {
                let (no, line) = chunk.line(i).unwrap_or((0, &[]));
                let rec = parse_line(line, need_labels).map_err(|p| line_error(&file, no, p))?;
                let (mut idx, mut val) = (Vec::new(), Vec::new());
                let stats = view.vectorize(&rec.text, scratch, &mut idx, &mut val);
                let mut ids: Vec<u32> = rec.labels.iter().filter_map(|n| labels.id(n)).collect();
                let unknown = rec.labels.len() - ids.len();
                ids.sort_unstable();
                ids.dedup();
                Ok(Row {
                    idx,
                    val,
                    labels: ids,
                    unknown,
                    stats,
                })
            })
            .collect::<Result<_, DataError>>()
            .map_err(|e| first_error(&chunk, &file, need_labels, e))?;
        rows.into_iter().for_each(|r| out.push(r));
    }
    Ok(out.finish(view.n_features(), labels.len(), start))
}

/// A text training set: the fitted vectorizer, the label map and the vectorized rows.
#[derive(Debug)]
pub struct TextTraining {
    /// The vocabulary and weights.
    pub fitted: Fitted,
    /// The label names by id.
    pub labels: LabelMap,
    /// The training rows, weighed through [`Fitted::view`].
    pub corpus: TextCorpus,
    /// Seconds spent reading and tokenizing the file and fitting the vocabulary.
    pub fit_seconds: f64,
}

/// Fits a vectorizer on the JSONL file at `path` and vectorizes the file with it: the whole
/// text side of `xmc train`.
///
/// The file is read and tokenized once. Each document's terms are kept under the fit's numbers;
/// once the vocabulary is cut, they become feature ids (the ids the stored vocabulary gives those
/// terms), and `TextView::weigh` of a view over the stored bytes makes each row, as it does for
/// every query.
pub fn fit_and_vectorize(path: &Path, cfg: &TextConfig) -> Result<TextTraining, FitError> {
    let start = Instant::now();
    let counted = count_file(path, cfg, true)?;
    vectorize_counted(counted, cfg, start)
}

/// [`fit_and_vectorize`] for documents held in memory: `texts[i]` with label names
/// `labels[i]` is the document a JSONL line `{"text": .., "labels": [..]}` would be, so the same
/// documents in a file and in memory give the same vectorizer, label ids and rows. Without
/// `labels`, the label map is empty and the rows have no labels (the caller brings label ids).
pub fn fit_and_vectorize_texts<S: AsRef<str> + Sync>(
    texts: &[S],
    labels: Option<&[Vec<S>]>,
    cfg: &TextConfig,
) -> Result<TextTraining, FitError> {
    let start = Instant::now();
    if texts.is_empty() {
        return Err(FitError::NoDocuments("the texts".into()));
    }
    if let Some(labels) = labels {
        if labels.len() != texts.len() {
            return Err(FitError::LengthMismatch {
                texts: texts.len(),
                labels: labels.len(),
            });
        }
    }
    let mut counted = Counted::new(true);
    count_batch(&mut counted, texts.len(), cfg, |i| {
        Ok(Record {
            text: Cow::Borrowed(texts.get(i).map_or("", AsRef::as_ref)),
            labels: labels
                .and_then(|l| l.get(i))
                .map(|names| names.iter().map(|n| Cow::Borrowed(n.as_ref())).collect())
                .unwrap_or_default(),
        })
    })?;
    vectorize_counted(counted, cfg, start)
}

/// The rest of a text fit once the documents are counted: the label map and vocabulary are cut,
/// then every document becomes a row.
fn vectorize_counted(
    mut counted: Counted,
    cfg: &TextConfig,
    start: Instant,
) -> Result<TextTraining, FitError> {
    let (labels, label_of) = LabelMap::from_counts(std::mem::take(&mut counted.labels));
    let terms = std::mem::take(&mut counted.terms);
    let (fitted, feature_of) = Fitted::from_counts(terms, cfg, counted.docs)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let view = fitted.view()?;
    let rows: Vec<Row> = (0..counted.docs)
        .into_par_iter()
        .map_init(Vec::new, |ids: &mut Vec<u32>, d| {
            let (terms, names) = counted.doc(d);
            ids.clear();
            ids.extend(
                terms
                    .iter()
                    .filter_map(|&t| feature_of.get(t as usize).copied())
                    .filter(|&f| f != u32::MAX),
            );
            let stats = TextStats {
                terms: terms.len(),
                known_terms: ids.len(),
            };
            let (mut idx, mut val) = (Vec::new(), Vec::new());
            view.weigh(ids, &mut idx, &mut val);
            let mut label_ids: Vec<u32> = names
                .iter()
                .filter_map(|&l| label_of.get(l as usize).copied())
                .collect();
            label_ids.sort_unstable();
            Row {
                idx,
                val,
                labels: label_ids,
                unknown: 0,
                stats,
            }
        })
        .collect();
    drop(counted);
    let mut out = Rows::new();
    rows.into_iter().for_each(|r| out.push(r));
    let corpus = out.finish(view.n_features(), labels.len(), start);
    Ok(TextTraining {
        fitted,
        labels,
        corpus,
        fit_seconds,
    })
}

//! Text files to data sets: the streaming, parallel fit of a vocabulary and label map over a
//! JSONL file, and the vectorization of a JSONL file through a [`TextView`].

use super::fit::{DfCounter, FitError, Fitted, FxMap};
use super::jsonl::{LineChunk, LineReader, line_error, parse_line};
use super::{TextConfig, TextScratch, TextStats, TextView, TokenScratch};
use crate::data::{DataError, Dataset, SparseMatrix};
use rayon::prelude::*;
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

    /// The map from training counts: descending count, then name.
    fn from_counts(counts: FxMap<String, u32>) -> LabelMap {
        let mut by_count: Vec<(String, u32)> = counts.into_iter().collect();
        by_count.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        LabelMap::from_names(by_count.into_iter().map(|(n, _)| n))
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

/// One pass's per-worker state.
#[derive(Default)]
struct FitPart {
    df: DfCounter,
    labels: FxMap<String, u32>,
    tokens: TokenScratch,
}

impl FitPart {
    fn merge(mut self, other: FitPart) -> FitPart {
        self.df.merge(other.df);
        for (name, c) in other.labels {
            *self.labels.entry(name).or_insert(0) += c;
        }
        self
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

/// Fits the vocabulary and the label map on the JSONL file at `path`, streaming it in chunks
/// that are tokenized in parallel. Every line needs `text` and `labels`.
pub fn fit_file(path: &Path, cfg: &TextConfig) -> Result<(Fitted, LabelMap), FitError> {
    let mut reader = LineReader::open(path)?;
    let file = reader.file().to_string();
    let mut chunk = LineChunk::default();
    let mut total = FitPart::default();
    let mut docs = 0usize;
    while reader.next_chunk(&mut chunk, CHUNK_BYTES)? {
        let base = u32::try_from(docs).map_err(|_| FitError::TooMany("documents"))?;
        let part = (0..chunk.len())
            .into_par_iter()
            .try_fold(FitPart::default, |mut part, i| {
                let (no, line) = chunk.line(i).unwrap_or((0, &[]));
                let rec = parse_line(line, true).map_err(|p| line_error(&file, no, p))?;
                let doc = base.wrapping_add(i as u32);
                part.df.add(cfg, doc, &rec.text, &mut part.tokens);
                for (j, name) in rec.labels.iter().enumerate() {
                    if !rec.labels.get(..j).is_some_and(|seen| seen.contains(name)) {
                        *part.labels.entry(name.to_string()).or_insert(0) += 1;
                    }
                }
                Ok::<_, DataError>(part)
            })
            .try_reduce(FitPart::default, |a, b| Ok(a.merge(b)))
            .map_err(|e| first_error(&chunk, &file, true, e))?;
        total = total.merge(part);
        docs += chunk.len();
    }
    if docs == 0 {
        return Err(FitError::NoDocuments(file));
    }
    let labels = LabelMap::from_counts(total.labels);
    Ok((Fitted::from_counts(total.df, cfg, docs)?, labels))
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
    let (mut f_ptr, mut f_idx, mut f_val) = (vec![0usize], Vec::new(), Vec::new());
    let (mut l_ptr, mut l_idx) = (vec![0usize], Vec::new());
    let mut out = TextCorpus {
        dataset: Dataset {
            features: SparseMatrix::zero((0, 0)),
            labels: SparseMatrix::zero((0, 0)),
        },
        unknown_labels: 0,
        stats: TextStats::default(),
        empty_rows: 0,
        seconds: 0.0,
    };
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
        for r in rows {
            f_idx.extend_from_slice(&r.idx);
            f_val.extend_from_slice(&r.val);
            f_ptr.push(f_idx.len());
            l_idx.extend_from_slice(&r.labels);
            l_ptr.push(l_idx.len());
            out.unknown_labels += r.unknown;
            out.stats.terms += r.stats.terms;
            out.stats.known_terms += r.stats.known_terms;
            out.empty_rows += usize::from(r.idx.is_empty());
        }
    }
    let n = f_ptr.len() - 1;
    let ones = vec![1.0f32; l_idx.len()];
    out.dataset = Dataset {
        features: SparseMatrix::new((n, view.n_features()), f_ptr, f_idx, f_val),
        labels: SparseMatrix::new((n, labels.len()), l_ptr, l_idx, ones),
    };
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

/// A text training set: the fitted vectorizer, the label map and the vectorized rows.
#[derive(Debug)]
pub struct TextTraining {
    /// The vocabulary and weights.
    pub fitted: Fitted,
    /// The label names by id.
    pub labels: LabelMap,
    /// The training rows, vectorized through [`Fitted::view`].
    pub corpus: TextCorpus,
    /// Seconds spent fitting the vocabulary (the first pass).
    pub fit_seconds: f64,
}

/// Fits a vectorizer on the JSONL file at `path` and vectorizes the file with it: the whole
/// text side of `xmc train`.
pub fn fit_and_vectorize(path: &Path, cfg: &TextConfig) -> Result<TextTraining, FitError> {
    let start = Instant::now();
    let (fitted, labels) = fit_file(path, cfg)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let view = fitted.view()?;
    let corpus = vectorize_file(path, &view, &labels, true)?;
    Ok(TextTraining {
        fitted,
        labels,
        corpus,
        fit_seconds,
    })
}

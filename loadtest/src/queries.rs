//! The replayed queries (precomputed request bodies) and their truth, and the quality metrics of
//! the responses, through `xmc::eval` so they mean exactly what `xmc eval` reports.

use crate::engine::Kept;
use anyhow::Context;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use xmc::eval::{Evaluator, QueryStats};

/// Request bodies for `/v1/predict` and the true labels of each.
#[derive(Debug)]
pub struct Queries {
    /// One JSON body per row.
    pub bodies: Vec<Bytes>,
    /// The true labels per row: label ids, or for text queries ids of [`Queries::names`].
    pub truth: Vec<Vec<u32>>,
    /// Labels per request.
    pub k: usize,
    /// Text queries: the true label names, interned (a name's id is its index), so that
    /// responses are scored by their `names`.
    pub names: Option<Vec<String>>,
}

impl Queries {
    /// Reads the queries: a JSON Lines file (`.jsonl`, `.jsonl.gz`) of `{"text", "labels"}`
    /// documents becomes text requests scored by label name, anything else is read as an XC file
    /// of feature requests. At most `limit` rows (0: all).
    pub fn load(path: &Path, k: usize, limit: usize) -> anyhow::Result<Queries> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.ends_with(".jsonl") || n.ends_with(".jsonl.gz")) {
            Queries::load_text(path, k, limit)
        } else {
            Queries::load_xc(path, k, limit)
        }
    }

    /// Reads a JSON Lines file, plain or gzip: one `{"text": ..., "k": k}` body per line, whose
    /// `labels` (names) are the truth.
    fn load_text(path: &Path, k: usize, limit: usize) -> anyhow::Result<Queries> {
        #[derive(Deserialize)]
        struct Doc {
            text: String,
            #[serde(default)]
            labels: Vec<String>,
        }
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the test data {}", path.display()))?;
        let mut reader = std::io::BufReader::new(file);
        let gzip = reader.fill_buf()?.starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn BufRead> = if gzip {
            Box::new(std::io::BufReader::new(
                flate2::bufread::MultiGzDecoder::new(reader),
            ))
        } else {
            Box::new(reader)
        };
        let mut interned: HashMap<String, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut q = Queries {
            bodies: Vec::new(),
            truth: Vec::new(),
            k,
            names: None,
        };
        for (i, line) in reader.lines().enumerate() {
            if limit != 0 && q.bodies.len() == limit {
                break;
            }
            let line = line.with_context(|| format!("{}:{}", path.display(), i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let doc: Doc = serde_json::from_str(&line)
                .with_context(|| format!("{}:{}", path.display(), i + 1))?;
            let truth = doc
                .labels
                .into_iter()
                .map(|l| intern(&mut interned, &mut names, l))
                .collect();
            let body = serde_json::to_vec(&serde_json::json!({"text": doc.text, "k": k}))?;
            q.bodies.push(Bytes::from(body));
            q.truth.push(truth);
        }
        anyhow::ensure!(
            !q.bodies.is_empty(),
            "the test data {} has no documents",
            path.display()
        );
        q.names = Some(names);
        Ok(q)
    }

    /// Reads an XC file (rows with no features are skipped: the server would refuse nothing,
    /// but they carry no query).
    fn load_xc(path: &Path, k: usize, limit: usize) -> anyhow::Result<Queries> {
        let ds = xmc::data::read_xc_file(path)
            .with_context(|| format!("reading the test data {}", path.display()))?;
        let n = if limit == 0 {
            ds.n_points()
        } else {
            limit.min(ds.n_points())
        };
        let mut bodies = Vec::with_capacity(n);
        let mut truth = Vec::with_capacity(n);
        for i in 0..n {
            let (idx, val) = ds.feature_row(i);
            if idx.is_empty() {
                continue;
            }
            let features: Vec<(u32, f32)> = idx.iter().copied().zip(val.iter().copied()).collect();
            let body = serde_json::to_vec(&serde_json::json!({"features": features, "k": k}))?;
            bodies.push(Bytes::from(body));
            truth.push(ds.label_row(i).to_vec());
        }
        anyhow::ensure!(
            !bodies.is_empty(),
            "the test data {} has no rows with features",
            path.display()
        );
        Ok(Queries {
            bodies,
            truth,
            k,
            names: None,
        })
    }
}

/// The id of `name` among `names`, adding it if new.
fn intern(ids: &mut HashMap<String, u32>, names: &mut Vec<String>, name: String) -> u32 {
    if let Some(&id) = ids.get(&name) {
        return id;
    }
    let id = u32::try_from(names.len()).unwrap_or(u32::MAX);
    names.push(name.clone());
    ids.insert(name, id);
    id
}

#[derive(Deserialize)]
struct Stats {
    depths: Option<Vec<u32>>,
    nodes_evaluated: u32,
    /// Classifier outputs scored (absent from servers older than the BP router).
    #[serde(default)]
    classifiers_evaluated: u32,
    #[serde(default)]
    early_stopped: bool,
    #[serde(default)]
    beam_capped: bool,
    #[serde(default)]
    elapsed_us: Option<f64>,
}

#[derive(Deserialize)]
struct ModelRef {
    version: String,
}

#[derive(Deserialize)]
struct Response {
    labels: Vec<u32>,
    #[serde(default)]
    names: Option<Vec<String>>,
    stats: Stats,
    model: ModelRef,
}

/// The quality of a run's responses.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Quality {
    /// Responses scored.
    pub n: usize,
    /// Responses that did not parse as a prediction.
    pub unparsable: usize,
    /// P@1, P@k, expected depth@1, @k, mean nodes evaluated, … from `xmc::eval`.
    pub metrics: Value,
    /// Model versions seen, with counts.
    pub versions: std::collections::BTreeMap<String, usize>,
    /// The server's own time per prediction (`stats.elapsed_us`), ms: the model's share of the
    /// HTTP latency.
    pub server_elapsed: crate::stats::Percentiles,
}

impl Quality {
    /// A metric by name (`p@1`, `expected_depth@5`, `nodes_evaluated_mean`).
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.get(key).and_then(Value::as_f64)
    }
}

/// Scores responses against the truth of the queries they answer.
pub fn score(queries: &Queries, responses: &[Kept]) -> Quality {
    let mut ev = Evaluator::new(&[1, queries.k], &[]);
    let mut q = Quality::default();
    let mut elapsed = crate::stats::histogram();
    // Text queries are scored by name: the truth's names, then those only responses gave.
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut names = queries.names.clone().unwrap_or_default();
    for (i, n) in names.iter().enumerate() {
        ids.insert(n.clone(), u32::try_from(i).unwrap_or(u32::MAX));
    }
    let mut named = Vec::new();
    for kept in responses {
        let (Ok(r), Some(truth)) = (
            serde_json::from_slice::<Response>(&kept.bytes),
            queries.truth.get(kept.body),
        ) else {
            q.unparsable += 1;
            continue;
        };
        let labels = match (&queries.names, r.names) {
            (Some(_), Some(got)) => {
                named.clear();
                named.extend(got.into_iter().map(|n| intern(&mut ids, &mut names, n)));
                &named
            }
            (Some(_), None) => {
                q.unparsable += 1;
                continue;
            }
            (None, _) => &r.labels,
        };
        q.n += 1;
        *q.versions.entry(r.model.version).or_default() += 1;
        let stats = QueryStats {
            nodes_evaluated: r.stats.nodes_evaluated,
            outputs_evaluated: r.stats.classifiers_evaluated,
            early_stopped: r.stats.early_stopped,
            beam_capped: r.stats.beam_capped,
        };
        ev.add(labels, truth, r.stats.depths.as_deref(), Some(stats));
        if let Some(us) = r.stats.elapsed_us.filter(|u| u.is_finite() && *u >= 0.0) {
            elapsed.saturating_record((us.round() as u64).max(1));
        }
    }
    q.metrics = ev.finish().quality_json();
    q.server_elapsed = crate::stats::Percentiles::of(&elapsed);
    q
}

/// The model version of a response, and the server's own time on its prediction
/// (`stats.elapsed_us`, µs, where the server reports it), if it is a prediction.
pub fn served(body: &[u8]) -> Option<(String, Option<f64>)> {
    serde_json::from_slice::<Response>(body)
        .ok()
        .map(|r| (r.model.version, r.stats.elapsed_us))
}

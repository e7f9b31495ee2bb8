//! The `xmc` Python package's native module, `xmc._xmc`: bindings over the `xmc` library.
//!
//! Everything a model does is the library's: the configuration and its validation, the text
//! vectorizer's fit, training, the memory-mapped model and its search, and the metrics. This
//! crate only moves values between Python and the library: it reads scipy CSR arrays in place,
//! releases the GIL around every long call, and maps the library's errors to Python exceptions
//! (see `xmc/__init__.pyi` for the API as Python sees it).

mod convert;
mod progress;

use convert::{Csr, LabelLists};
use numpy::IntoPyArray;
use numpy::ndarray::Array2;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use xmc::bundle::{Bundle, OpenOptions};
use xmc::cli::eval::{cutoffs, predict_options};
use xmc::cli::train::{text_inputs, text_summary, xc_inputs};
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::evaluate::{evaluate_model, predict_rows};
use xmc::model::{PredictOptions, Prediction, Scratch};
use xmc::text::LabelMap;
use xmc::text::corpus::fit_and_vectorize_texts;
use xmc::text::jsonl::{DataFormat, detect_format, read_records};

create_exception!(
    xmc,
    BundleError,
    PyValueError,
    "A model bundle is corrupt, truncated or of an unknown format."
);
create_exception!(
    xmc,
    DataError,
    PyValueError,
    "Input data is malformed: a bad file, dtype, shape, id or value."
);

fn bundle_err(e: impl std::fmt::Display) -> PyErr {
    BundleError::new_err(e.to_string())
}

fn data_err(e: impl std::fmt::Display) -> PyErr {
    DataError::new_err(e.to_string())
}

/// Error chains (`anyhow`) as one message, causes after colons.
fn chain(e: &anyhow::Error) -> String {
    format!("{e:#}")
}

/// `--set` strings from keyword arguments: `key=value`, with `__` in a key standing for a dot
/// (`text__min_df` is `text.min_df`), booleans as `true`/`false` and lists as TOML arrays.
fn overrides(settings: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let mut out = Vec::new();
    let Some(settings) = settings else {
        return Ok(out);
    };
    let json = settings.py().import("json")?;
    for (k, v) in settings.iter() {
        let key: String = k.extract()?;
        let key = key.replace("__", ".");
        let value: String = if v.is_instance_of::<PyBool>() {
            if v.extract::<bool>()? {
                "true"
            } else {
                "false"
            }
            .into()
        } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
            json.call_method1("dumps", (v,))?.extract()?
        } else {
            v.str()?.to_string()
        };
        out.push(format!("{key}={value}"));
    }
    Ok(out)
}

/// The prediction options of keyword arguments, validated by the same code as `xmc predict
/// --set`; the search looks for `k` labels.
fn options(k: usize, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<PredictOptions> {
    if k == 0 {
        return Err(PyValueError::new_err("`k` must be at least 1"));
    }
    predict_options(&overrides(kwargs)?, k).map_err(|e| PyValueError::new_err(chain(&e)))
}

/// Rayon pools by thread count, built once each, for calls that ask for a thread count.
fn pool(threads: usize) -> PyResult<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| PyRuntimeError::new_err("the thread pool cache is poisoned"))?;
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
    );
    pools.insert(threads, p.clone());
    Ok(p)
}

/// Runs `f` on the pool of `threads` threads, or on the global pool.
fn on_pool<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> PyResult<R> {
    match threads {
        Some(0) => Err(PyValueError::new_err("`threads` must be at least 1")),
        Some(t) => Ok(pool(t)?.install(f)),
        None => Ok(f()),
    }
}

thread_local! {
    /// The calling thread's scratch for one-query calls, so they allocate nothing once warm.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// An xmc model: a validated, memory-mapped bundle (or a freshly trained one in memory).
///
/// Open one with ``Model.open(path)`` or get one from ``xmc.train``. A model is immutable and
/// safe to share between threads.
#[pyclass(frozen, module = "xmc")]
pub struct Model {
    inner: xmc::model::Model,
}

/// Rows to predict: a CSR matrix read in place, or texts vectorized by the model.
enum Rows<'py> {
    Csr(Csr<'py>),
    Owned(Dataset),
}

/// A CSR matrix's arrays, borrowed: what the worker threads read.
#[derive(Clone, Copy)]
struct RowSlices<'a> {
    ptr: &'a [usize],
    idx: &'a [u32],
    val: &'a [f32],
}

impl<'a> RowSlices<'a> {
    fn len(&self) -> usize {
        self.ptr.len().saturating_sub(1)
    }

    /// Row `i` (the pointers were checked when read).
    fn row(&self, i: usize) -> (&'a [u32], &'a [f32]) {
        let (s, e) = (self.ptr[i], self.ptr[i + 1]);
        (&self.idx[s..e], &self.val[s..e])
    }
}

impl Rows<'_> {
    fn slices(&self) -> RowSlices<'_> {
        match self {
            Rows::Csr(m) => RowSlices {
                ptr: &m.indptr,
                idx: m.indices.as_slice(),
                val: m.data.as_slice(),
            },
            Rows::Owned(ds) => RowSlices {
                ptr: ds.features.indptr().into_raw_storage(),
                idx: ds.features.indices(),
                val: ds.features.data(),
            },
        }
    }

    fn len(&self) -> usize {
        self.slices().len()
    }
}

impl Model {
    fn rows<'py>(&self, x: &Bound<'py, PyAny>) -> PyResult<Rows<'py>> {
        if convert::is_sparse(x) {
            return Ok(Rows::Csr(Csr::read(x, "X")?));
        }
        if let Ok(text) = x.extract::<String>() {
            return Ok(Rows::Owned(self.vectorized(x.py(), vec![text])?));
        }
        if convert::is_texts(x) {
            let texts = convert::texts(x, "X")?;
            return Ok(Rows::Owned(self.vectorized(x.py(), texts)?));
        }
        if x.len().is_ok_and(|n| n == 0) {
            return Err(DataError::new_err("X: no rows"));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "X: expected a scipy CSR matrix, a string or a list of strings, got {}",
            x.get_type().name()?
        )))
    }

    /// The model's text vectorizer applied to `texts`, in parallel, without the GIL.
    fn vectorized(&self, py: Python<'_>, texts: Vec<String>) -> PyResult<Dataset> {
        let view = self.inner.text().ok_or_else(|| {
            DataError::new_err("X is text, but the model was not trained from text")
        })?;
        Ok(py.detach(|| vectorize_texts(view, &texts)))
    }

    /// The predictions of `predict` and `predict_names`.
    fn predictions(
        &self,
        x: &Bound<'_, PyAny>,
        k: usize,
        threads: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Prediction>> {
        let opts = self::options(k, options)?;
        let rows = self.rows(x)?;
        self.predict_rows(x.py(), &rows, &opts, threads)
    }

    /// Predicts every row, without the GIL: one row on this thread, more on the pool.
    fn predict_rows(
        &self,
        py: Python<'_>,
        rows: &Rows<'_>,
        opts: &PredictOptions,
        threads: Option<usize>,
    ) -> PyResult<Vec<Prediction>> {
        let rows = rows.slices();
        let n = rows.len();
        let mut out = vec![Prediction::default(); n];
        let model = &self.inner;
        let result = if n == 1 {
            let (idx, val) = rows.row(0);
            let out = &mut out[0];
            py.detach(|| {
                SCRATCH.with(|s| {
                    let mut scratch = s.borrow_mut();
                    model
                        .predict_into(idx, val, opts, &mut scratch, out)
                        .map_err(|e| (0, e))
                })
            })
        } else {
            let out_ref = &mut out;
            let row = move |i: usize| rows.row(i);
            py.detach(|| on_pool(threads, || predict_rows(model, out_ref, row, opts)))?
        };
        result.map_err(|(i, e)| DataError::new_err(format!("X row {i}: {e}")))?;
        Ok(out)
    }
}

/// `texts` through `view`, as `xmc` vectorizes a JSON Lines file: one row a text.
fn vectorize_texts(view: &xmc::text::TextView, texts: &[String]) -> Dataset {
    use rayon::prelude::*;
    let rows: Vec<(Vec<u32>, Vec<f32>)> = texts
        .par_iter()
        .map_init(xmc::text::TextScratch::default, |scratch, t| {
            let (mut idx, mut val) = (Vec::new(), Vec::new());
            view.vectorize(t, scratch, &mut idx, &mut val);
            (idx, val)
        })
        .collect();
    let mut ptr = Vec::with_capacity(rows.len() + 1);
    ptr.push(0);
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for (i, v) in rows {
        idx.extend(i);
        val.extend(v);
        ptr.push(idx.len());
    }
    let n = ptr.len() - 1;
    Dataset {
        features: data::SparseMatrix::new((n, view.n_features()), ptr, idx, val),
        labels: data::SparseMatrix::new((n, 0), vec![0; n + 1], Vec::new(), Vec::new()),
    }
}

#[pymethods]
impl Model {
    /// Opens the bundle at `path`: memory-mapped, its structure checked in time that does not
    /// grow with the weights. ``verify=True`` also checks every checksum and weight entry
    /// (reads the whole file), as ``xmc predict`` does.
    #[staticmethod]
    #[pyo3(signature = (path, *, verify = false))]
    fn open(py: Python<'_>, path: PathBuf, verify: bool) -> PyResult<Model> {
        let opts = OpenOptions {
            verify_checksums: verify,
            ..OpenOptions::default()
        };
        let inner = py
            .detach(|| xmc::model::Model::open(&path, &opts))
            .map_err(|e| bundle_err(format!("{}: {e}", path.display())))?;
        Ok(Model { inner })
    }

    /// Writes the bundle to `path` (a temporary file beside it, then renamed over it).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let bytes = self.inner.bundle().as_bytes();
        py.detach(|| write_atomic(&path, bytes))
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))
    }

    /// The top `k` labels of every row of `X` (a scipy CSR matrix, a string or a list of
    /// strings for a model trained from text), best first: ``(labels, scores)``, an int64 array
    /// and a float32 array of shape ``[n, k]``; a row with fewer than `k` labels is padded with
    /// label -1 and score 0. Further options are those of ``xmc predict --set`` (``beam``,
    /// ``early_stop``, ...); ``threads`` sizes the pool that predicts a batch (default: one
    /// thread per core).
    #[pyo3(signature = (x, k = 5, *, threads = None, **options))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        k: usize,
        threads: Option<usize>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let preds = self.predictions(x, k, threads, options)?;
        let n = preds.len();
        let mut labels = vec![-1i64; n * k];
        let mut scores = vec![0f32; n * k];
        for (i, p) in preds.iter().enumerate() {
            for (j, (l, s)) in p.labels.iter().zip(&p.scores).take(k).enumerate() {
                labels[i * k + j] = i64::from(l.0);
                scores[i * k + j] = *s;
            }
        }
        // Built as [n, k] arrays directly: no `reshape` call back into NumPy.
        let shape_err = |e: numpy::ndarray::ShapeError| PyRuntimeError::new_err(e.to_string());
        let labels = Array2::from_shape_vec((n, k), labels).map_err(shape_err)?;
        let scores = Array2::from_shape_vec((n, k), scores).map_err(shape_err)?;
        Ok((
            labels.into_pyarray(py).into_any(),
            scores.into_pyarray(py).into_any(),
        ))
    }

    /// The names of the top `k` labels of every row of `X`, best first (a list of lists).
    #[pyo3(signature = (x, k = 5, *, threads = None, **options))]
    fn predict_names(
        &self,
        x: &Bound<'_, PyAny>,
        k: usize,
        threads: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Vec<String>>> {
        let names = self
            .inner
            .label_names()
            .ok_or_else(|| PyValueError::new_err("the model has no label names"))?;
        let preds = self.predictions(x, k, threads, options)?;
        Ok(preds
            .iter()
            .map(|p| {
                p.labels
                    .iter()
                    .map(|l| names.get(l.0 as usize).unwrap_or_default().to_string())
                    .collect()
            })
            .collect())
    }

    /// Scores the model on `X` with true labels `Y` (a CSR matrix, or label-id or label-name
    /// lists; names the model does not know count as misses): a dict of P@k, nDCG@k, PSP@k,
    /// coverage@k and more for k in 1, 3, 5 and `k`, computed as ``xmc eval`` does.
    #[pyo3(signature = (x, y, k = 5, **options))]
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        k: usize,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ks = cutoffs(k);
        let opts = self::options(ks.iter().copied().max().unwrap_or(5), options)?;
        let rows = self.rows(x)?;
        let n_labels = self.inner.meta().n_labels;
        let label_rows = match convert::label_lists(y)? {
            LabelLists::Ids(rows, width) => {
                if width > n_labels {
                    return Err(DataError::new_err(format!(
                        "Y has {width} labels but the model knows {n_labels}"
                    )));
                }
                rows
            }
            LabelLists::Names(names) => {
                let known = self.inner.label_names().ok_or_else(|| {
                    DataError::new_err("Y holds label names, but the model has none")
                })?;
                let map = LabelMap::from_names(known.iter());
                names
                    .iter()
                    .map(|row| row.iter().filter_map(|n| map.id(n)).collect())
                    .collect()
            }
        };
        if label_rows.len() != rows.len() {
            return Err(DataError::new_err(format!(
                "X has {} rows but Y has {}",
                rows.len(),
                label_rows.len()
            )));
        }
        let labels = convert::label_matrix(&label_rows, n_labels)?;
        let features = match rows {
            Rows::Csr(m) => m.to_matrix("X")?,
            Rows::Owned(ds) => ds.features,
        };
        let ds = Dataset { features, labels };
        let model = &self.inner;
        let report = py
            .detach(|| evaluate_model(model, &ds, &opts, &ks))
            .map_err(|(i, e)| DataError::new_err(format!("X row {i}: {e}")))?;
        convert::json_to_py(py, &report.quality_json())
    }

    /// The model's text vectorizer applied to `texts`: a float32 ``scipy.sparse.csr_matrix``
    /// with one row a text and ``n_features`` columns.
    fn vectorize<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let texts = match texts.extract::<String>() {
            Ok(t) => vec![t],
            Err(_) => convert::texts(texts, "texts")?,
        };
        let ds = self.vectorized(py, texts)?;
        convert::to_scipy(py, &ds.features)
    }

    /// The model's metadata, as a dict (what ``xmc inspect`` shows).
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = serde_json::to_value(self.inner.meta())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        convert::json_to_py(py, &v)
    }

    /// The label names by id, or None for a model without them.
    #[getter]
    fn label_names(&self) -> Option<Vec<String>> {
        self.inner
            .label_names()
            .map(|n| n.iter().map(str::to_string).collect())
    }

    /// The number of input features.
    #[getter]
    fn n_features(&self) -> usize {
        self.inner.meta().n_features
    }

    /// The number of labels.
    #[getter]
    fn n_labels(&self) -> usize {
        self.inner.meta().n_labels
    }

    /// Every section's name and CRC32, as the bundle records them (for comparing bundles).
    fn _section_crcs(&self) -> Vec<(String, u32)> {
        self.inner
            .bundle()
            .sections()
            .iter()
            .map(|s| (s.name.clone(), s.crc32))
            .collect()
    }

    /// Times `repeats` predictions of row 0 of `X` in Rust, with one reused scratch, and returns
    /// the mean seconds per prediction: the baseline the Python call's overhead is measured
    /// against.
    #[pyo3(signature = (x, k = 5, repeats = 1000))]
    fn _time_rust_predict(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        k: usize,
        repeats: usize,
    ) -> PyResult<f64> {
        let opts = self::options(k, None)?;
        let rows = self.rows(x)?;
        if rows.len() == 0 {
            return Err(DataError::new_err("X: no rows"));
        }
        let (idx, val) = rows.slices().row(0);
        let model = &self.inner;
        py.detach(|| {
            let mut scratch = Scratch::default();
            let mut out = Prediction::default();
            model
                .predict_into(idx, val, &opts, &mut scratch, &mut out)
                .map_err(data_err)?;
            let start = std::time::Instant::now();
            for _ in 0..repeats {
                model
                    .predict_into(
                        std::hint::black_box(idx),
                        val,
                        &opts,
                        &mut scratch,
                        &mut out,
                    )
                    .map_err(data_err)?;
            }
            Ok(start.elapsed().as_secs_f64() / repeats.max(1) as f64)
        })
    }

    fn __repr__(&self) -> String {
        let m = self.inner.meta();
        format!(
            "xmc.Model(version={:?}, n_features={}, n_labels={}, text={})",
            m.version,
            m.n_features,
            m.n_labels,
            self.inner.text().is_some()
        )
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".into());
    let tmp = dir
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.tmp{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Trains a model on `X` (a scipy CSR matrix of float32 or float64, or a list of strings) and
/// `Y` (a CSR label matrix, or one list of label ids or label names per row).
///
/// `config` is a TOML file whose `[train]` table sets the configuration; `settings` override
/// its keys as ``xmc train --set key=value`` does (``text__min_df=2`` for ``text.min_df``).
/// An unknown key or a bad value raises ValueError naming the key. Training releases the GIL,
/// runs on ``threads`` threads and logs its phases to the ``xmc`` logger.
#[pyfunction]
#[pyo3(signature = (x, y, config = None, *, label_names = None, feature_names = None, **settings))]
fn train(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    config: Option<PathBuf>,
    label_names: Option<Vec<String>>,
    feature_names: Option<Vec<String>>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Model> {
    let cfg = TrainConfig::load(config.as_deref(), &overrides(settings)?)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut labels = convert::label_lists(y)?;
    // Label names count the labels, some of which the training rows may not hold.
    if let (LabelLists::Ids(_, width), Some(names)) = (&mut labels, &label_names) {
        *width = (*width).max(names.len());
    }
    let log = progress::Log::new(py)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads)
        .build()
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let (ds, inputs) = if convert::is_texts(x) {
        if feature_names.is_some() {
            return Err(PyValueError::new_err(
                "feature_names are for CSR data: the vocabulary names a text model's features",
            ));
        }
        let texts = convert::texts(x, "X")?;
        check_rows(texts.len(), &labels)?;
        let t = match &labels {
            LabelLists::Names(names) => {
                if label_names.is_some() {
                    return Err(PyValueError::new_err(
                        "label_names are for label ids: Y already names its labels",
                    ));
                }
                let names: Vec<Vec<&str>> = names
                    .iter()
                    .map(|r| r.iter().map(String::as_str).collect())
                    .collect();
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                py.detach(|| {
                    pool.install(|| fit_and_vectorize_texts(&texts, Some(&names), &cfg.text))
                })
            }
            LabelLists::Ids(..) => py.detach(|| {
                pool.install(|| fit_and_vectorize_texts::<String>(&texts, None, &cfg.text))
            }),
        }
        .map_err(data_err)?;
        log.info(py, &text_summary(&t));
        let (mut ds, mut inputs) =
            text_inputs(t, cfg.normalize).map_err(|e| data_err(chain(&e)))?;
        if let LabelLists::Ids(rows, width) = &labels {
            ds.labels = convert::label_matrix(rows, *width)?;
            let fitted = inputs.text.take();
            inputs = xc_inputs(&ds, label_names, None).map_err(|e| data_err(chain(&e)))?;
            inputs.text = fitted;
        }
        (ds, inputs)
    } else if convert::is_sparse(x) {
        let m = Csr::read(x, "X")?;
        check_rows(m.shape.0, &labels)?;
        let (rows, width) = match labels {
            LabelLists::Ids(rows, width) => (rows, width),
            LabelLists::Names(_) => {
                return Err(DataError::new_err(
                    "Y: label names need text X (a list of strings); give label ids with a \
                     CSR X, and their names with label_names=",
                ));
            }
        };
        let mut ds = Dataset {
            features: m.to_matrix("X")?,
            labels: convert::label_matrix(&rows, width)?,
        };
        if cfg.normalize {
            data::l2_normalize_rows(&mut ds.features);
        }
        let inputs = xc_inputs(&ds, label_names, feature_names).map_err(|e| data_err(chain(&e)))?;
        (ds, inputs)
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "X: expected a scipy CSR matrix or a list of strings, got {}",
            x.get_type().name()?
        )));
    };
    let bytes = py.detach(|| {
        pool.install(|| {
            xmc::train::train(&ds, &cfg, inputs, &log)
                .map_err(|e| match e {
                    xmc::train::TrainError::Data(m) => data_err(m),
                    e => PyValueError::new_err(e.to_string()),
                })
                .and_then(|t| t.to_bytes().map_err(bundle_err))
        })
    })?;
    log.finish(py);
    let inner = Bundle::from_bytes(&bytes)
        .map_err(bundle_err)
        .and_then(|b| xmc::model::Model::from_bundle(b).map_err(bundle_err))?;
    Ok(Model { inner })
}

/// Refuses labels given for a different number of rows than X has.
fn check_rows(n: usize, labels: &LabelLists) -> PyResult<()> {
    let m = match labels {
        LabelLists::Ids(rows, _) => rows.len(),
        LabelLists::Names(rows) => rows.len(),
    };
    if m != n {
        return Err(DataError::new_err(format!(
            "X has {n} rows but Y has {m} label lists"
        )));
    }
    Ok(())
}

/// Reads a data file, plain or gzip: XC format gives ``(X, Y)`` as float32 scipy CSR matrices;
/// JSON Lines gives ``(texts, label_names)``, two lists. ``format`` is ``"xc"`` or ``"jsonl"``
/// (default: detected from the content, as ``xmc`` does).
#[pyfunction]
#[pyo3(signature = (path, format = None))]
fn read_data<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: Option<&str>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let format = match format {
        Some("xc") => DataFormat::Xc,
        Some("jsonl") => DataFormat::Jsonl,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "`format`: {other:?} is not \"xc\" or \"jsonl\""
            )));
        }
        None => py.detach(|| detect_format(&path)).map_err(data_err)?,
    };
    match format {
        DataFormat::Xc => {
            let ds = py.detach(|| data::read_xc_file(&path)).map_err(data_err)?;
            Ok((
                convert::to_scipy(py, &ds.features)?,
                convert::to_scipy(py, &ds.labels)?,
            ))
        }
        DataFormat::Jsonl => {
            let (texts, labels) = py.detach(|| read_records(&path, false)).map_err(data_err)?;
            Ok((
                texts.into_pyobject(py)?.into_any(),
                labels.into_pyobject(py)?.into_any(),
            ))
        }
    }
}

/// The native module, `xmc._xmc`; the package `xmc` re-exports it.
#[pymodule]
fn _xmc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(read_data, m)?)?;
    m.add("BundleError", py.get_type::<BundleError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

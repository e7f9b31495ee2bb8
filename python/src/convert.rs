//! Python values in and out: scipy CSR matrices read in place through their NumPy arrays, label
//! lists, and results handed back as NumPy arrays, scipy matrices and plain Python objects.

use crate::DataError;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use xmc::data::SparseMatrix;

/// A 1-D array of `T` read from NumPy: borrowed in place when its dtype and layout already fit,
/// else converted once.
pub enum Slice<'py, T: numpy::Element, O = T> {
    /// The array itself, of the wanted dtype and contiguous.
    Borrowed(PyReadonlyArray1<'py, T>),
    /// A converted copy.
    Owned(Vec<O>),
}

/// Feature or label ids: int32 arrays are read in place (as `u32`, after a check that none is
/// negative), int64 ones converted.
pub type Ids<'py> = Slice<'py, i32, u32>;
/// Feature values: float32 read in place, float64 converted.
pub type Values<'py> = Slice<'py, f32, f32>;

impl Ids<'_> {
    /// The ids.
    pub fn as_slice(&self) -> &[u32] {
        match self {
            Slice::Borrowed(a) => bytemuck::cast_slice(a.as_slice().unwrap_or(&[])),
            Slice::Owned(v) => v,
        }
    }
}

impl Values<'_> {
    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        match self {
            Slice::Borrowed(a) => a.as_slice().unwrap_or(&[]),
            Slice::Owned(v) => v,
        }
    }
}

/// The dtype of a NumPy array, for errors.
fn dtype_name(a: &Bound<'_, PyAny>) -> String {
    a.getattr("dtype")
        .and_then(|d| d.str().map(|s| s.to_string()))
        .unwrap_or_else(|_| "unknown".into())
}

/// Reads an id array (`what` names it in errors): int32 in place, int64 (or another integer
/// dtype) converted; a negative id or one beyond `u32` is refused.
pub fn ids<'py>(a: &Bound<'py, PyAny>, what: &str) -> PyResult<Ids<'py>> {
    if let Ok(arr) = a.extract::<PyReadonlyArray1<'py, i32>>() {
        if arr.as_slice().is_ok() {
            if let Some(&v) = arr.as_slice()?.iter().find(|&&v| v < 0) {
                return Err(DataError::new_err(format!("{what}: negative id {v}")));
            }
            return Ok(Slice::Borrowed(arr));
        }
    }
    let is_int = a
        .getattr("dtype")
        .and_then(|d| d.getattr("kind"))
        .and_then(|k| k.extract::<String>())
        .is_ok_and(|k| k == "i" || k == "u");
    if !is_int {
        return Err(DataError::new_err(format!(
            "{what}: expected an integer array, got dtype {}",
            dtype_name(a)
        )));
    }
    let wide = a.call_method1("astype", ("int64",))?;
    let arr = wide.extract::<PyReadonlyArray1<'py, i64>>()?;
    let view = arr.as_array();
    let mut out = Vec::with_capacity(view.len());
    for &v in view.iter() {
        let id = u32::try_from(v)
            .map_err(|_| DataError::new_err(format!("{what}: id {v} is negative or too large")))?;
        out.push(id);
    }
    Ok(Slice::Owned(out))
}

/// Reads a value array: float32 in place, float64 converted; other dtypes are refused.
pub fn values<'py>(a: &Bound<'py, PyAny>, what: &str) -> PyResult<Values<'py>> {
    if let Ok(arr) = a.extract::<PyReadonlyArray1<'py, f32>>() {
        if arr.as_slice().is_ok() {
            return Ok(Slice::Borrowed(arr));
        }
        return Ok(Slice::Owned(arr.as_array().iter().copied().collect()));
    }
    if let Ok(arr) = a.extract::<PyReadonlyArray1<'py, f64>>() {
        return Ok(Slice::Owned(
            arr.as_array().iter().map(|&v| v as f32).collect(),
        ));
    }
    Err(DataError::new_err(format!(
        "{what}: expected float32 or float64 values, got dtype {}",
        dtype_name(a)
    )))
}

/// A scipy CSR matrix, its arrays read in place where their dtypes allow.
pub struct Csr<'py> {
    /// Rows and columns.
    pub shape: (usize, usize),
    /// Row pointers, checked: they start at 0, never decrease and end within the arrays.
    pub indptr: Vec<usize>,
    /// Column ids.
    pub indices: Ids<'py>,
    /// Values.
    pub data: Values<'py>,
}

/// Whether `x` looks like a scipy sparse matrix or array.
pub fn is_sparse(x: &Bound<'_, PyAny>) -> bool {
    x.hasattr("format").unwrap_or(false) && x.hasattr("indptr").unwrap_or(false)
}

impl<'py> Csr<'py> {
    /// Reads `x`, a scipy CSR matrix (`what` names it in errors).
    pub fn read(x: &Bound<'py, PyAny>, what: &str) -> PyResult<Csr<'py>> {
        let format: String = x
            .getattr("format")
            .and_then(|f| f.extract())
            .map_err(|_| not_csr(x, what))?;
        if format != "csr" {
            return Err(DataError::new_err(format!(
                "{what}: expected a CSR matrix, got format {format:?} (convert with .tocsr())"
            )));
        }
        let shape: (usize, usize) = x.getattr("shape")?.extract().map_err(|_| {
            DataError::new_err(format!("{what}: the shape is not two non-negative sizes"))
        })?;
        let indices = ids(&x.getattr("indices")?, &format!("{what}.indices"))?;
        let data = values(&x.getattr("data")?, &format!("{what}.data"))?;
        let ptr = ids_usize(&x.getattr("indptr")?, &format!("{what}.indptr"))?;
        let nnz = indices.as_slice().len();
        if data.as_slice().len() != nnz {
            return Err(DataError::new_err(format!(
                "{what}: {nnz} indices but {} values",
                data.as_slice().len()
            )));
        }
        if ptr.len() != shape.0 + 1 {
            return Err(DataError::new_err(format!(
                "{what}: indptr has {} entries for {} rows (expected rows + 1)",
                ptr.len(),
                shape.0
            )));
        }
        if ptr.first().is_some_and(|&p| p != 0)
            || ptr.windows(2).any(|w| w[0] > w[1])
            || ptr.last().is_some_and(|&p| p > nnz)
        {
            return Err(DataError::new_err(format!(
                "{what}: indptr does not rise from 0 to at most the {nnz} stored entries"
            )));
        }
        Ok(Csr {
            shape,
            indptr: ptr,
            indices,
            data,
        })
    }

    /// Row `i`'s ids and values.
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let (s, e) = (self.indptr[i], self.indptr[i + 1]);
        (&self.indices.as_slice()[s..e], &self.data.as_slice()[s..e])
    }

    /// The matrix as the library's CSR: every row sorted by column, duplicates summed, every
    /// value finite and every column below the width.
    pub fn to_matrix(&self, what: &str) -> PyResult<SparseMatrix> {
        let (n, d) = self.shape;
        let mut ptr = Vec::with_capacity(n + 1);
        ptr.push(0);
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        let mut pairs: Vec<(u32, f32)> = Vec::new();
        for i in 0..n {
            let (ri, rv) = self.row(i);
            for (&c, &v) in ri.iter().zip(rv) {
                if c as usize >= d {
                    return Err(DataError::new_err(format!(
                        "{what} row {i}: column {c} is not below the width {d}"
                    )));
                }
                if !v.is_finite() {
                    return Err(DataError::new_err(format!(
                        "{what} row {i}: the value of column {c} is not finite"
                    )));
                }
            }
            if ri.windows(2).all(|w| w[0] < w[1]) {
                idx.extend_from_slice(ri);
                val.extend_from_slice(rv);
            } else {
                pairs.clear();
                pairs.extend(ri.iter().copied().zip(rv.iter().copied()));
                pairs.sort_by_key(|p| p.0);
                for &(c, v) in &pairs {
                    if idx.len() > *ptr.last().unwrap_or(&0) && idx.last() == Some(&c) {
                        if let Some(last) = val.last_mut() {
                            *last += v;
                        }
                    } else {
                        idx.push(c);
                        val.push(v);
                    }
                }
            }
            ptr.push(idx.len());
        }
        SparseMatrix::try_new((n, d), ptr, idx, val)
            .map_err(|(_, _, _, e)| DataError::new_err(format!("{what}: {e}")))
    }
}

fn not_csr(x: &Bound<'_, PyAny>, what: &str) -> PyErr {
    let ty = x
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    PyTypeError::new_err(format!(
        "{what}: expected a scipy CSR matrix or a list of strings, got {ty}"
    ))
}

/// Row pointers as `usize`, from an int32 or int64 array.
fn ids_usize(a: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
    fn convert<T: Copy + numpy::Element>(
        a: &Bound<'_, PyAny>,
        what: &str,
    ) -> Option<PyResult<Vec<usize>>>
    where
        usize: TryFrom<T>,
    {
        let arr = a.extract::<PyReadonlyArray1<'_, T>>().ok()?;
        let out = arr
            .as_array()
            .iter()
            .map(|&v| usize::try_from(v).ok())
            .collect::<Option<_>>();
        Some(out.ok_or_else(|| DataError::new_err(format!("{what}: a negative entry"))))
    }
    convert::<i32>(a, what)
        .or_else(|| convert::<i64>(a, what))
        .unwrap_or_else(|| {
            Err(DataError::new_err(format!(
                "{what}: expected an int32 or int64 array, got dtype {}",
                dtype_name(a)
            )))
        })
}

/// Whether `x` is a list or tuple of strings (a text corpus).
pub fn is_texts(x: &Bound<'_, PyAny>) -> bool {
    (x.is_instance_of::<PyList>() || x.is_instance_of::<PyTuple>())
        && x.try_iter()
            .ok()
            .and_then(|mut it| it.next())
            .is_some_and(|first| first.is_ok_and(|f| f.is_instance_of::<PyString>()))
}

/// The strings of a list or tuple.
pub fn texts(x: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<String>> {
    x.extract::<Vec<String>>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: expected a list of strings")))
}

/// Labels given per point, as ids or as names.
pub enum LabelLists {
    /// Label ids per point, and the label count (the matrix width, or the largest id + 1).
    Ids(Vec<Vec<u32>>, usize),
    /// Label names per point.
    Names(Vec<Vec<String>>),
}

/// Reads `y`: a scipy CSR label matrix, or one list of label ids or of label names per point.
pub fn label_lists(y: &Bound<'_, PyAny>) -> PyResult<LabelLists> {
    if is_sparse(y) {
        let m = Csr::read(y, "Y")?;
        let rows = (0..m.shape.0).map(|i| m.row(i).0.to_vec()).collect();
        return Ok(LabelLists::Ids(rows, m.shape.1));
    }
    if !(y.is_instance_of::<PyList>() || y.is_instance_of::<PyTuple>()) {
        return Err(PyTypeError::new_err(
            "Y: expected a scipy CSR matrix or a list of label lists",
        ));
    }
    let first = y
        .try_iter()?
        .filter_map(Result::ok)
        .find_map(|row| row.try_iter().ok()?.next()?.ok());
    if first.is_some_and(|f| f.is_instance_of::<PyString>()) {
        let names = y.extract::<Vec<Vec<String>>>().map_err(|_| {
            DataError::new_err("Y: every item of a list of label names must be a string")
        })?;
        return Ok(LabelLists::Names(names));
    }
    let mut rows = Vec::new();
    let mut width = 0usize;
    for (i, row) in y.try_iter()?.enumerate() {
        let row = row?;
        let ids: Vec<i64> = row.extract().map_err(|_| {
            DataError::new_err(format!("Y row {i}: expected a list of integer label ids"))
        })?;
        let mut out = Vec::with_capacity(ids.len());
        for v in ids {
            let id = u32::try_from(v)
                .ok()
                .filter(|&id| id < u32::MAX)
                .ok_or_else(|| {
                    DataError::new_err(format!("Y row {i}: label id {v} is negative or too large"))
                })?;
            width = width.max(id as usize + 1);
            out.push(id);
        }
        rows.push(out);
    }
    Ok(LabelLists::Ids(rows, width))
}

/// The label matrix of `rows` ids, `width` labels wide: rows sorted, duplicates dropped, values
/// 1. An id not below `width` is refused.
pub fn label_matrix(rows: &[Vec<u32>], width: usize) -> PyResult<SparseMatrix> {
    let mut ptr = Vec::with_capacity(rows.len() + 1);
    ptr.push(0);
    let mut idx = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let start = idx.len();
        for &l in row {
            if l as usize >= width {
                return Err(DataError::new_err(format!(
                    "Y row {i}: label id {l} is not below the label count {width}"
                )));
            }
            idx.push(l);
        }
        idx[start..].sort_unstable();
        let mut w = start;
        for r in start..idx.len() {
            if r == start || idx[r] != idx[w - 1] {
                idx[w] = idx[r];
                w += 1;
            }
        }
        idx.truncate(w);
        ptr.push(idx.len());
    }
    let ones = vec![1.0f32; idx.len()];
    SparseMatrix::try_new((rows.len(), width), ptr, idx, ones)
        .map_err(|(_, _, _, e)| DataError::new_err(format!("Y: {e}")))
}

/// A scipy `csr_matrix` over the given arrays (int32 indices when they fit, else int64).
pub fn csr_matrix<'py>(
    py: Python<'py>,
    shape: (usize, usize),
    indptr: Vec<usize>,
    indices: Vec<u32>,
    data: Vec<f32>,
) -> PyResult<Bound<'py, PyAny>> {
    let small = indptr.last().is_none_or(|&n| n <= i32::MAX as usize)
        && indices.iter().all(|&c| c <= i32::MAX as u32)
        && shape.1 <= i32::MAX as usize;
    let (ptr, idx): (Bound<'py, PyAny>, Bound<'py, PyAny>) = if small {
        (
            PyArray1::from_vec(py, indptr.iter().map(|&p| p as i32).collect()).into_any(),
            PyArray1::from_vec(py, indices.iter().map(|&c| c as i32).collect()).into_any(),
        )
    } else {
        (
            PyArray1::from_vec(py, indptr.iter().map(|&p| p as i64).collect()).into_any(),
            PyArray1::from_vec(py, indices.iter().map(|&c| i64::from(c)).collect()).into_any(),
        )
    };
    let data = PyArray1::from_vec(py, data);
    let sparse = py.import("scipy.sparse")?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("shape", shape)?;
    sparse.call_method("csr_matrix", ((data, idx, ptr),), Some(&kwargs))
}

/// A library CSR matrix as a scipy `csr_matrix`.
pub fn to_scipy<'py>(py: Python<'py>, m: &SparseMatrix) -> PyResult<Bound<'py, PyAny>> {
    csr_matrix(
        py,
        (m.rows(), m.cols()),
        m.indptr().raw_storage().to_vec(),
        m.indices().to_vec(),
        m.data().to_vec(),
    )
}

/// A JSON value as the Python object `json.loads` makes of it.
pub fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

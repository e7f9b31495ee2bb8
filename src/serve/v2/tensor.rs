//! The Open Inference Protocol's tensors for xmc, independent of the wire: which inputs a model
//! takes, how a batch of queries is read from them, and how predictions become output tensors.
//! The REST layer ([`super`]) only turns JSON and binary sections into [`InputTensor`]s and
//! [`OutputTensor`]s back; a gRPC layer would do the same from its messages.
//!
//! Inputs: `text`, `BYTES` of shape `[batch]` (or `[batch, 1]`), one UTF-8 document per row; or
//! the ragged triple `feature_ids` (`INT64`, `INT32`, `UINT32` or `UINT64`, `[n]`),
//! `feature_values` (`FP32` or `FP64`, `[n]`) and `row_offsets` (`INT64` or `INT32`,
//! `[batch + 1]`), row `i` being entries `row_offsets[i]..row_offsets[i + 1]`. Outputs: `labels`
//! (`INT64`), `scores` (`FP32`) and, for a model with label names, `names` (`BYTES`), each
//! `[batch, k]`; a row with fewer than k labels is padded with label -1, score 0 and name "".

use std::fmt;

/// A tensor element type, as the protocol names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datatype {
    /// `BOOL`
    Bool,
    /// `UINT8`
    U8,
    /// `UINT16`
    U16,
    /// `UINT32`
    U32,
    /// `UINT64`
    U64,
    /// `INT8`
    I8,
    /// `INT16`
    I16,
    /// `INT32`
    I32,
    /// `INT64`
    I64,
    /// `FP16`
    F16,
    /// `FP32`
    F32,
    /// `FP64`
    F64,
    /// `BYTES`: length-prefixed byte strings.
    Bytes,
}

const NAMES: [(Datatype, &str); 13] = [
    (Datatype::Bool, "BOOL"),
    (Datatype::U8, "UINT8"),
    (Datatype::U16, "UINT16"),
    (Datatype::U32, "UINT32"),
    (Datatype::U64, "UINT64"),
    (Datatype::I8, "INT8"),
    (Datatype::I16, "INT16"),
    (Datatype::I32, "INT32"),
    (Datatype::I64, "INT64"),
    (Datatype::F16, "FP16"),
    (Datatype::F32, "FP32"),
    (Datatype::F64, "FP64"),
    (Datatype::Bytes, "BYTES"),
];

impl Datatype {
    /// The type named `s` (the protocol's names).
    pub fn parse(s: &str) -> Result<Datatype, String> {
        NAMES
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(d, _)| *d)
            .ok_or_else(|| format!("unknown datatype {s:?}"))
    }

    /// The protocol's name.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(d, _)| *d == self)
            .map_or("BYTES", |(_, n)| n)
    }

    /// The bytes of one element in a raw (binary) tensor; `None` for `BYTES`.
    pub fn width(self) -> Option<usize> {
        Some(match self {
            Datatype::Bool | Datatype::U8 | Datatype::I8 => 1,
            Datatype::U16 | Datatype::I16 | Datatype::F16 => 2,
            Datatype::U32 | Datatype::I32 | Datatype::F32 => 4,
            Datatype::U64 | Datatype::I64 | Datatype::F64 => 8,
            Datatype::Bytes => return None,
        })
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An input tensor's elements, widened: integers to `i64`, floats to `f64` (an `FP32` value
/// widens exactly), strings as bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Integer elements.
    Int(Vec<i64>),
    /// Floating-point elements.
    Float(Vec<f64>),
    /// `BYTES` elements.
    Bytes(Vec<Vec<u8>>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bytes(v) => v.len(),
        }
    }
}

/// One decoded input tensor.
#[derive(Clone, Debug)]
pub struct InputTensor {
    /// Its name.
    pub name: String,
    /// Its datatype as the request gave it.
    pub datatype: Datatype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its elements, row-major.
    pub values: Values,
}

/// A query read from the input tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// A sparse vector.
    Features {
        /// Feature ids.
        idx: Vec<u32>,
        /// Their values.
        val: Vec<f32>,
    },
    /// A document for the model's vectorizer.
    Text(String),
}

/// The input names a model takes.
pub const TEXT: &str = "text";
/// The ragged triple's ids.
pub const FEATURE_IDS: &str = "feature_ids";
/// The ragged triple's values.
pub const FEATURE_VALUES: &str = "feature_values";
/// The ragged triple's row offsets.
pub const ROW_OFFSETS: &str = "row_offsets";
/// The output names.
pub const LABELS: &str = "labels";
/// Scores.
pub const SCORES: &str = "scores";
/// Label names.
pub const NAMES_OUTPUT: &str = "names";

/// A tensor a model takes or gives, as the metadata routes describe it.
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec {
    /// Its name.
    pub name: &'static str,
    /// Its datatype (an input also takes the others [`decode_queries`] lists).
    pub datatype: Datatype,
    /// Its shape, -1 for a dimension of any size.
    pub shape: &'static [i64],
}

/// The inputs of a model: `text` if it has a vectorizer (`has_text`), and the ragged triple.
pub fn model_inputs(has_text: bool) -> Vec<TensorSpec> {
    let spec = |name, datatype| TensorSpec {
        name,
        datatype,
        shape: &[-1],
    };
    let mut inputs = Vec::with_capacity(4);
    if has_text {
        inputs.push(spec(TEXT, Datatype::Bytes));
    }
    inputs.push(spec(FEATURE_IDS, Datatype::I64));
    inputs.push(spec(FEATURE_VALUES, Datatype::F32));
    inputs.push(spec(ROW_OFFSETS, Datatype::I64));
    inputs
}

/// The outputs of a model: `labels`, `scores`, and `names` if it has label names.
pub fn model_outputs(has_names: bool) -> Vec<TensorSpec> {
    let spec = |name, datatype| TensorSpec {
        name,
        datatype,
        shape: &[-1, -1],
    };
    let mut outputs = vec![spec(LABELS, Datatype::I64), spec(SCORES, Datatype::F32)];
    if has_names {
        outputs.push(spec(NAMES_OUTPUT, Datatype::Bytes));
    }
    outputs
}

/// The element count a shape describes (`None` on overflow).
pub fn elements(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

/// Reads the batch of queries from `inputs`: `text`, or the three feature tensors. `has_text`
/// says whether the model has a vectorizer; `max_batch` bounds the rows.
pub fn decode_queries(
    inputs: Vec<InputTensor>,
    has_text: bool,
    max_batch: usize,
) -> Result<Vec<Query>, String> {
    let mut text = None;
    let mut ids = None;
    let mut values = None;
    let mut offsets = None;
    for t in inputs {
        let n = elements(&t.shape).ok_or_else(|| format!("input {:?}: shape overflows", t.name))?;
        if n != t.values.len() as u64 {
            return Err(format!(
                "input {:?}: shape {:?} holds {n} elements, its data {}",
                t.name,
                t.shape,
                t.values.len()
            ));
        }
        let slot = match t.name.as_str() {
            TEXT => &mut text,
            FEATURE_IDS => &mut ids,
            FEATURE_VALUES => &mut values,
            ROW_OFFSETS => &mut offsets,
            other => {
                return Err(format!(
                    "unknown input {other:?} (inputs: text, or feature_ids, feature_values and \
                     row_offsets)"
                ));
            }
        };
        if slot.is_some() {
            return Err(format!("input {:?} is given twice", t.name));
        }
        *slot = Some(t);
    }
    let queries = match (text, ids, values, offsets) {
        (Some(t), None, None, None) => text_queries(t, has_text)?,
        (None, Some(i), Some(v), Some(o)) => feature_queries(i, v, o)?,
        (Some(_), _, _, _) => {
            return Err("give either text or the feature tensors, not both".into());
        }
        (None, i, v, o) => {
            let missing: Vec<&str> = [(FEATURE_IDS, i), (FEATURE_VALUES, v), (ROW_OFFSETS, o)]
                .into_iter()
                .filter(|(_, t)| t.is_none())
                .map(|(n, _)| n)
                .collect();
            return Err(format!(
                "missing input {}: a request needs text, or feature_ids, feature_values and \
                 row_offsets",
                missing.join(", ")
            ));
        }
    };
    if queries.is_empty() {
        return Err("the batch is empty".into());
    }
    if queries.len() > max_batch {
        return Err(format!(
            "a batch of {} is over the limit of {max_batch}",
            queries.len()
        ));
    }
    Ok(queries)
}

fn expect_type(t: &InputTensor, allowed: &[Datatype]) -> Result<(), String> {
    if allowed.contains(&t.datatype) {
        return Ok(());
    }
    let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
    Err(format!(
        "input {:?} has datatype {}, not {}",
        t.name,
        t.datatype,
        names.join(" or ")
    ))
}

fn one_dim(t: &InputTensor) -> Result<u64, String> {
    match t.shape.as_slice() {
        [n] => Ok(*n),
        s => Err(format!("input {:?} must have shape [n], not {s:?}", t.name)),
    }
}

fn text_queries(t: InputTensor, has_text: bool) -> Result<Vec<Query>, String> {
    if !has_text {
        return Err(
            "this model has no text vectorizer (it was trained on feature vectors): send \
             feature_ids, feature_values and row_offsets"
                .into(),
        );
    }
    expect_type(&t, &[Datatype::Bytes])?;
    if !matches!(t.shape.as_slice(), [_] | [_, 1]) {
        return Err(format!(
            "input \"text\" must have shape [batch] or [batch, 1], not {:?}",
            t.shape
        ));
    }
    let Values::Bytes(docs) = t.values else {
        return Err("input \"text\" holds no strings".into());
    };
    docs.into_iter()
        .enumerate()
        .map(|(i, d)| {
            String::from_utf8(d)
                .map(Query::Text)
                .map_err(|_| format!("input \"text\" row {i} is not UTF-8"))
        })
        .collect()
}

fn feature_queries(
    ids: InputTensor,
    values: InputTensor,
    offsets: InputTensor,
) -> Result<Vec<Query>, String> {
    use Datatype::*;
    expect_type(&ids, &[I64, I32, U32, U64])?;
    expect_type(&values, &[F32, F64])?;
    expect_type(&offsets, &[I64, I32])?;
    let n = one_dim(&ids)?;
    let nv = one_dim(&values)?;
    let rows = one_dim(&offsets)?;
    if n != nv {
        return Err(format!(
            "feature_ids has {n} entries and feature_values {nv}: they must be as many"
        ));
    }
    if rows < 2 {
        return Err("row_offsets needs batch + 1 entries, at least 2".into());
    }
    let (Values::Int(ids), Values::Float(vals), Values::Int(offs)) =
        (ids.values, values.values, offsets.values)
    else {
        return Err("the feature tensors hold the wrong kind of elements".into());
    };
    if offs[0] != 0 || offs.windows(2).any(|w| w[1] < w[0]) || offs[offs.len() - 1] != n as i64 {
        return Err(format!(
            "row_offsets must start at 0, never decrease and end at the {n} entries of \
             feature_ids"
        ));
    }
    let mut out = Vec::with_capacity(offs.len() - 1);
    for (row, w) in offs.windows(2).enumerate() {
        let (a, b) = (w[0] as usize, w[1] as usize);
        let mut idx = Vec::with_capacity(b - a);
        let mut val = Vec::with_capacity(b - a);
        for j in a..b {
            let id = u32::try_from(ids[j])
                .map_err(|_| format!("row {row}: feature id {} is out of range", ids[j]))?;
            let v = vals[j] as f32;
            if !v.is_finite() {
                return Err(format!(
                    "row {row}: feature {id}: value {} is not a finite 32-bit float",
                    vals[j]
                ));
            }
            idx.push(id);
            val.push(v);
        }
        out.push(Query::Features { idx, val });
    }
    Ok(out)
}

/// One output tensor's elements.
#[derive(Clone, Debug, PartialEq)]
pub enum OutValues {
    /// `INT64`
    I64(Vec<i64>),
    /// `FP32`
    F32(Vec<f32>),
    /// `BYTES`
    Bytes(Vec<String>),
}

impl OutValues {
    /// The length of [`Self::write_raw`]'s bytes: 8 per INT64, 4 per FP32, and 4 plus its
    /// length per BYTES element.
    pub fn raw_len(&self) -> usize {
        match self {
            OutValues::I64(v) => 8 * v.len(),
            OutValues::F32(v) => 4 * v.len(),
            OutValues::Bytes(v) => v.iter().map(|s| 4 + s.len()).sum(),
        }
    }

    /// Appends the elements as raw bytes (the binary extension's section, gRPC's
    /// `raw_output_contents`): little-endian numbers, and each string as a 4-byte little-endian
    /// length followed by its bytes.
    pub fn write_raw(&self, out: &mut Vec<u8>) {
        out.reserve(self.raw_len());
        match self {
            OutValues::I64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            OutValues::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            OutValues::Bytes(v) => v.iter().for_each(|s| {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }),
        }
    }
}

/// One output tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputTensor {
    /// Its name.
    pub name: String,
    /// `[batch, k]`.
    pub shape: [u64; 2],
    /// Its elements, row-major.
    pub values: OutValues,
}

impl OutputTensor {
    /// The datatype of its elements.
    pub fn datatype(&self) -> Datatype {
        match self.values {
            OutValues::I64(_) => Datatype::I64,
            OutValues::F32(_) => Datatype::F32,
            OutValues::Bytes(_) => Datatype::Bytes,
        }
    }
}

/// What one output asks for: its name, and with Triton's classification extension the top
/// `classification` entries as `"score:index[:name]"` strings.
#[derive(Clone, Debug)]
pub struct OutputRequest {
    /// `labels`, `scores` or `names`.
    pub name: String,
    /// The classification count, if asked for.
    pub classification: Option<usize>,
}

/// One query's answer: label ids and scores, best first.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Label ids.
    pub labels: Vec<u32>,
    /// Their scores.
    pub scores: Vec<f32>,
}

/// Checks the requested outputs against what a model produces (`has_names`).
pub fn check_outputs(outputs: &[OutputRequest], has_names: bool) -> Result<(), String> {
    for (i, o) in outputs.iter().enumerate() {
        match o.name.as_str() {
            LABELS | SCORES => {}
            NAMES_OUTPUT if has_names => {}
            NAMES_OUTPUT => {
                return Err("output \"names\": this model has no label names".into());
            }
            other => {
                return Err(format!(
                    "unknown output {other:?} (outputs: labels, scores{})",
                    if has_names { ", names" } else { "" }
                ));
            }
        }
        if outputs[..i].iter().any(|p| p.name == o.name) {
            return Err(format!("output {:?} is asked for twice", o.name));
        }
        if o.classification == Some(0) {
            return Err(format!(
                "output {:?}: classification must be at least 1",
                o.name
            ));
        }
    }
    Ok(())
}

/// The output tensors of `rows` for `outputs`; `name_of` gives a label's name.
pub fn encode_outputs<'n>(
    rows: &[Row],
    outputs: &[OutputRequest],
    name_of: impl Fn(u32) -> Option<&'n str>,
) -> Vec<OutputTensor> {
    let name_of = &name_of;
    let batch = rows.len() as u64;
    let width = rows.iter().map(|r| r.labels.len()).max().unwrap_or(0);
    outputs
        .iter()
        .map(|o| {
            if let Some(c) = o.classification {
                let mut out = Vec::with_capacity(rows.len() * c);
                for r in rows {
                    for j in 0..c {
                        out.push(match (r.labels.get(j), r.scores.get(j)) {
                            (Some(&l), Some(s)) => match name_of(l) {
                                Some(n) => format!("{s}:{l}:{n}"),
                                None => format!("{s}:{l}"),
                            },
                            _ => String::new(),
                        });
                    }
                }
                return OutputTensor {
                    name: o.name.clone(),
                    shape: [batch, c as u64],
                    values: OutValues::Bytes(out),
                };
            }
            let shape = [batch, width as u64];
            let padded = |r: &Row, j: usize| r.labels.get(j).copied();
            let values = match o.name.as_str() {
                LABELS => OutValues::I64(
                    rows.iter()
                        .flat_map(|r| (0..width).map(move |j| padded(r, j).map_or(-1, i64::from)))
                        .collect(),
                ),
                SCORES => OutValues::F32(
                    rows.iter()
                        .flat_map(|r| {
                            (0..width).map(move |j| r.scores.get(j).copied().unwrap_or(0.0))
                        })
                        .collect(),
                ),
                _ => OutValues::Bytes(
                    rows.iter()
                        .flat_map(|r| {
                            (0..width).map(move |j| {
                                padded(r, j).and_then(name_of).unwrap_or("").to_string()
                            })
                        })
                        .collect(),
                ),
            };
            OutputTensor {
                name: o.name.clone(),
                shape,
                values,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_len_is_the_length_write_raw_appends() {
        let cases = [
            OutValues::I64(vec![3, -1, i64::MAX]),
            OutValues::F32(vec![0.5, -2.0]),
            OutValues::Bytes(vec!["".into(), "devel".into(), "é".into()]),
            OutValues::Bytes(vec![]),
        ];
        for v in cases {
            let mut out = vec![7u8];
            v.write_raw(&mut out);
            assert_eq!(out.len() - 1, v.raw_len(), "{v:?}");
        }
        let mut out = Vec::new();
        OutValues::Bytes(vec!["ab".into(), "é".into()]).write_raw(&mut out);
        assert_eq!(out, [2, 0, 0, 0, b'a', b'b', 2, 0, 0, 0, 0xc3, 0xa9]);
    }

    fn t(name: &str, datatype: Datatype, shape: Vec<u64>, values: Values) -> InputTensor {
        InputTensor {
            name: name.into(),
            datatype,
            shape,
            values,
        }
    }

    fn triple(ids: Vec<i64>, vals: Vec<f64>, offs: Vec<i64>) -> Vec<InputTensor> {
        vec![
            t(
                FEATURE_IDS,
                Datatype::I64,
                vec![ids.len() as u64],
                Values::Int(ids),
            ),
            t(
                FEATURE_VALUES,
                Datatype::F32,
                vec![vals.len() as u64],
                Values::Float(vals),
            ),
            t(
                ROW_OFFSETS,
                Datatype::I64,
                vec![offs.len() as u64],
                Values::Int(offs),
            ),
        ]
    }

    #[test]
    fn a_ragged_triple_splits_into_rows_and_bad_ones_are_refused() {
        let q = decode_queries(
            triple(vec![3, 5, 7], vec![1.0, 0.5, 0.25], vec![0, 2, 2, 3]),
            false,
            8,
        )
        .unwrap();
        assert_eq!(q.len(), 3);
        assert_eq!(
            q[0],
            Query::Features {
                idx: vec![3, 5],
                val: vec![1.0, 0.5]
            }
        );
        assert_eq!(
            q[1],
            Query::Features {
                idx: vec![],
                val: vec![]
            }
        );
        for (inputs, says) in [
            (
                triple(vec![3], vec![1.0, 2.0], vec![0, 1]),
                "must be as many",
            ),
            (
                triple(vec![3, 4], vec![1.0, 2.0], vec![0, 1]),
                "row_offsets must",
            ),
            (
                triple(vec![3, 4], vec![1.0, 2.0], vec![0, 2, 1]),
                "row_offsets must",
            ),
            (triple(vec![-3], vec![1.0], vec![0, 1]), "out of range"),
            (triple(vec![3], vec![1e300], vec![0, 1]), "not a finite"),
            (
                triple(vec![3], vec![1.0], vec![0, 1, 1, 1]),
                "over the limit",
            ),
        ] {
            let err = decode_queries(inputs, false, 2).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        let mut missing = triple(vec![3], vec![1.0], vec![0, 1]);
        missing.remove(2);
        let err = decode_queries(missing, false, 8).unwrap_err();
        assert!(err.contains("missing input row_offsets"), "{err}");
        let mut wrong = triple(vec![3], vec![1.0], vec![0, 1]);
        wrong[1].datatype = Datatype::I64;
        let err = decode_queries(wrong, false, 8).unwrap_err();
        assert!(err.contains("datatype INT64"), "{err}");
    }

    #[test]
    fn text_rows_need_a_vectorizer_and_a_matching_shape() {
        let docs = || Values::Bytes(vec![b"a b".to_vec(), b"c".to_vec()]);
        let q =
            decode_queries(vec![t(TEXT, Datatype::Bytes, vec![2, 1], docs())], true, 8).unwrap();
        assert_eq!(q[1], Query::Text("c".into()));
        let err =
            decode_queries(vec![t(TEXT, Datatype::Bytes, vec![3], docs())], true, 8).unwrap_err();
        assert!(err.contains("holds 3 elements"), "{err}");
        let err =
            decode_queries(vec![t(TEXT, Datatype::Bytes, vec![2], docs())], false, 8).unwrap_err();
        assert!(err.contains("no text vectorizer"), "{err}");
        let err =
            decode_queries(vec![t("txt", Datatype::Bytes, vec![2], docs())], true, 8).unwrap_err();
        assert!(err.contains("unknown input"), "{err}");
    }

    #[test]
    fn outputs_are_padded_rectangles_and_classification_strings() {
        let rows = vec![
            Row {
                labels: vec![4, 2],
                scores: vec![0.75, 0.5],
            },
            Row {
                labels: vec![1],
                scores: vec![0.25],
            },
        ];
        let asks = |n: &str, c| OutputRequest {
            name: n.into(),
            classification: c,
        };
        let names = ["a", "b", "c", "d", "e"];
        let out = encode_outputs(
            &rows,
            &[
                asks(LABELS, None),
                asks(SCORES, None),
                asks(NAMES_OUTPUT, None),
                asks(SCORES, Some(1)),
            ],
            |l| names.get(l as usize).copied(),
        );
        assert_eq!(out[0].values, OutValues::I64(vec![4, 2, 1, -1]));
        assert_eq!(out[0].shape, [2, 2]);
        assert_eq!(out[1].values, OutValues::F32(vec![0.75, 0.5, 0.25, 0.0]));
        assert_eq!(
            out[2].values,
            OutValues::Bytes(vec!["e".into(), "c".into(), "b".into(), String::new()])
        );
        assert_eq!(
            out[3].values,
            OutValues::Bytes(vec!["0.75:4:e".into(), "0.25:1:b".into()])
        );
        assert!(check_outputs(&[asks("probs", None)], true).is_err());
        assert!(check_outputs(&[asks(NAMES_OUTPUT, None)], false).is_err());
        assert!(check_outputs(&[asks(LABELS, Some(0))], true).is_err());
    }
}

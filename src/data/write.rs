//! Writing data sets in the XC text format, and row normalization.
//!
//! The writer always emits the `N D L` header, and formats every value with the shortest text
//! that parses back to the same `f32`, so read → write → read yields identical matrices. Rows are
//! formatted in parallel in fixed batches and written in order, so the output bytes do not depend
//! on the thread count.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use rayon::prelude::*;

use super::{DataError, Dataset, SparseMatrix, input};

/// Rows formatted per parallel task.
const ROWS_PER_TASK: usize = 4096;

/// Writes `ds` as XC text (with header) to `writer`.
pub fn write_xc<W: Write>(ds: &Dataset, writer: W) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, writer);
    writeln!(
        out,
        "{} {} {}",
        ds.n_points(),
        ds.n_features(),
        ds.n_labels()
    )?;
    let n = ds.n_points();
    let batch = ROWS_PER_TASK * rayon::current_num_threads().max(1) * 4;
    for batch_start in (0..n).step_by(batch) {
        let batch_end = (batch_start + batch).min(n);
        let texts: Vec<Vec<u8>> = (batch_start..batch_end)
            .step_by(ROWS_PER_TASK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| format_rows(ds, start, (start + ROWS_PER_TASK).min(batch_end)))
            .collect();
        for text in texts {
            out.write_all(&text)?;
        }
    }
    out.flush()
}

/// Writes `ds` to `path` as XC text, gzip-compressed when the path ends in `.gz`.
pub fn write_xc_file(ds: &Dataset, path: &Path) -> Result<(), DataError> {
    let io = |error| DataError::Io {
        file: input::display_name(path),
        error,
    };
    let file = File::create(path).map_err(io)?;
    let gz = path.extension().is_some_and(|e| e == "gz");
    if gz {
        let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        write_xc(ds, &mut enc).map_err(io)?;
        enc.finish().map_err(io)?.sync_all().map_err(io)
    } else {
        let mut file = file;
        write_xc(ds, &mut file).map_err(io)?;
        file.sync_all().map_err(io)
    }
}

fn format_rows(ds: &Dataset, start: usize, end: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity((end - start) * 64);
    for i in start..end {
        for (k, label) in ds.label_row(i).iter().enumerate() {
            if k > 0 {
                text.push(b',');
            }
            push_u32(&mut text, *label);
        }
        let (idx, val) = ds.feature_row(i);
        for (&id, &v) in idx.iter().zip(val) {
            text.push(b' ');
            push_u32(&mut text, id);
            text.push(b':');
            push_f32(&mut text, v);
        }
        text.push(b'\n');
    }
    text
}

fn push_u32(text: &mut Vec<u8>, mut v: u32) {
    let mut digits = [0u8; 10];
    let mut k = digits.len();
    loop {
        k -= 1;
        // The remainder is below 10, so the cast is lossless.
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    text.extend_from_slice(&digits[k..]);
}

/// Appends the shortest text that parses back to exactly `v`: small integers bare (`1`), other
/// values in Rust's shortest round-trip form (`0.25`, `1e-10`).
fn push_f32(text: &mut Vec<u8>, v: f32) {
    if v.fract() == 0.0 && v.abs() < 1e7 {
        if v < 0.0 {
            text.push(b'-');
        }
        // The value is integral and below 10^7 in magnitude, so the cast is exact.
        push_u32(text, v.abs() as u32);
    } else {
        // `Debug` for floats prints the shortest round-trip digits, switching to an exponent
        // for very large or small magnitudes, and `str::parse::<f32>` reads both forms.
        // Writing into a `Vec` cannot fail.
        let _ = write!(text, "{v:?}");
    }
}

/// Scales each row (each outer vector) of `m` to unit L2 norm; rows with zero norm stay zero.
pub fn l2_normalize_rows(m: &mut SparseMatrix) {
    let ranges: Vec<std::ops::Range<usize>> = (0..m.outer_dims())
        .map(|i| m.indptr().outer_inds_sz(i))
        .collect();
    let offset = ranges.first().map_or(0, |r| r.start);
    let mut rows = Vec::with_capacity(ranges.len());
    let data = m.data_mut();
    let len = data.len();
    let mut rest = &mut data[offset.min(len)..];
    let mut pos = offset;
    for r in &ranges {
        let (row, tail) = std::mem::take(&mut rest).split_at_mut(r.end - pos);
        rows.push(row);
        rest = tail;
        pos = r.end;
    }
    rows.into_par_iter().for_each(l2_normalize);
}

/// Drops a sparse query's zero and non-finite entries (ids and values in step), then, when
/// `normalize`, scales it to unit L2 norm by [`l2_normalize_query`]: the last step of preparing
/// a query, and of imputing one.
pub fn finish_query(idx: &mut Vec<u32>, val: &mut Vec<f32>, normalize: bool) {
    let mut w = 0;
    for r in 0..idx.len().min(val.len()) {
        if val[r] != 0.0 && val[r].is_finite() {
            idx[w] = idx[r];
            val[w] = val[r];
            w += 1;
        }
    }
    idx.truncate(w);
    val.truncate(w);
    if normalize {
        l2_normalize_query(val);
    }
}

/// Scales a query's values to unit L2 norm on the request path: in `f32` when the squares fit,
/// else as [`l2_normalize`] does, in `f64`. The squares overflow for a value beyond about
/// 1.8e19 and underflow when every value is below about 1e-19; with no values (norm 0) nothing
/// changes.
pub fn l2_normalize_query(val: &mut [f32]) {
    let norm = val.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        val.iter_mut().for_each(|v| *v /= norm);
    } else {
        l2_normalize(val);
    }
}

/// Scales `row` to unit L2 norm, with the norm and the quotients in `f64` (every `f32`'s square
/// fits); a row with zero norm stays zero.
pub fn l2_normalize(row: &mut [f32]) {
    let norm = row
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for v in row.iter_mut() {
            // The rounding to f32 is the point: values are stored as f32.
            *v = (f64::from(*v) / norm) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::row_slices;

    #[test]
    fn floats_are_short_and_exact() {
        for v in [
            1.0f32, -3.0, 0.1, 1e-10, 3.4e38, 1234567.0, 12345678.0, -0.5,
        ] {
            let mut t = Vec::new();
            push_f32(&mut t, v);
            let s = String::from_utf8(t).expect("ascii");
            assert_eq!(s.parse::<f32>().expect("parses"), v, "{s}");
        }
        let mut t = Vec::new();
        push_f32(&mut t, 1.0);
        assert_eq!(t, b"1");
    }

    #[test]
    fn normalize_rows() {
        let mut m = SparseMatrix::new(
            (3, 4),
            vec![0, 2, 2, 3],
            vec![0, 3, 1],
            vec![3.0, 4.0, -2.0],
        );
        l2_normalize_rows(&mut m);
        assert_eq!(row_slices(&m, 0).1, &[0.6, 0.8]);
        assert!(row_slices(&m, 1).1.is_empty());
        assert_eq!(row_slices(&m, 2).1, &[-1.0]);
    }
}

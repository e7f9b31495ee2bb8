//! Turning a request's features into the sparse vector the model scores.

use thiserror::Error;

/// Why a query was refused. These are the caller's mistakes (a 4xx at the HTTP boundary).
#[derive(Debug, Error, PartialEq)]
pub enum QueryError {
    /// A feature id is not below the model's feature count.
    #[error("feature id {id} is out of range: the model has {n_features} features")]
    FeatureOutOfRange {
        /// The id.
        id: u32,
        /// The model's feature count.
        n_features: usize,
    },
    /// A value is NaN or infinite.
    #[error("the value of feature {id} is not finite")]
    NonFinite {
        /// The feature id.
        id: u32,
    },
    /// An option asks for a stage the model does not have.
    #[error("`{option}` is not available: this model has no {stage}")]
    Unavailable {
        /// The option.
        option: &'static str,
        /// The missing stage.
        stage: &'static str,
    },
    /// Ids and values differ in length.
    #[error("{ids} feature ids but {values} values")]
    LengthMismatch {
        /// Number of ids.
        ids: usize,
        /// Number of values.
        values: usize,
    },
}

/// Validates a query, sums duplicate ids, sorts by id, drops zeros and optionally L2-normalizes,
/// writing the result into the reusable `out_idx`/`out_val`.
pub fn prepare(
    idx: &[u32],
    val: &[f32],
    n_features: usize,
    normalize: bool,
    out_idx: &mut Vec<u32>,
    out_val: &mut Vec<f32>,
) -> Result<(), QueryError> {
    if idx.len() != val.len() {
        return Err(QueryError::LengthMismatch {
            ids: idx.len(),
            values: val.len(),
        });
    }
    for (&id, &v) in idx.iter().zip(val) {
        if id as usize >= n_features {
            return Err(QueryError::FeatureOutOfRange { id, n_features });
        }
        if !v.is_finite() {
            return Err(QueryError::NonFinite { id });
        }
    }
    out_idx.clear();
    out_val.clear();
    if idx.windows(2).all(|w| w[0] < w[1]) {
        out_idx.extend_from_slice(idx);
        out_val.extend_from_slice(val);
    } else {
        // Sort a permutation in the output buffers' place: pair up, sort, merge duplicates.
        out_idx.extend(0..idx.len() as u32);
        out_idx.sort_unstable_by_key(|&p| (idx[p as usize], p));
        out_val.extend(out_idx.iter().map(|&p| val[p as usize]));
        for p in out_idx.iter_mut() {
            *p = idx[*p as usize];
        }
        let mut w = 0;
        for r in 0..out_idx.len() {
            if w > 0 && out_idx[w - 1] == out_idx[r] {
                out_val[w - 1] += out_val[r];
            } else {
                out_idx[w] = out_idx[r];
                out_val[w] = out_val[r];
                w += 1;
            }
        }
        out_idx.truncate(w);
        out_val.truncate(w);
    }
    // Sums of finite values can overflow to infinity; such a query is as bad as a non-finite one.
    if let Some(p) = out_val.iter().position(|v| !v.is_finite()) {
        return Err(QueryError::NonFinite { id: out_idx[p] });
    }
    let mut w = 0;
    for r in 0..out_idx.len() {
        if out_val[r] != 0.0 {
            out_idx[w] = out_idx[r];
            out_val[w] = out_val[r];
            w += 1;
        }
    }
    out_idx.truncate(w);
    out_val.truncate(w);
    if normalize {
        let norm = out_val.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 && norm.is_finite() {
            out_val.iter_mut().for_each(|v| *v /= norm);
        } else {
            // The squares overflowed (a value beyond about 1.8e19) or underflowed (every value
            // below about 1e-19) in `f32`, or there are no values: normalize as training does,
            // in `f64`, which holds every `f32`'s square.
            crate::data::l2_normalize(out_val);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sums_duplicates_sorts_and_normalizes() {
        let (mut i, mut v) = (Vec::new(), Vec::new());
        prepare(&[5, 2, 5], &[1.0, 4.0, 2.0], 10, true, &mut i, &mut v).unwrap();
        assert_eq!(i, vec![2, 5]);
        assert_eq!(v, vec![0.8, 0.6]);
    }

    #[test]
    fn refuses_bad_ids_and_values() {
        let (mut i, mut v) = (Vec::new(), Vec::new());
        assert_eq!(
            prepare(&[10], &[1.0], 10, false, &mut i, &mut v),
            Err(QueryError::FeatureOutOfRange {
                id: 10,
                n_features: 10
            })
        );
        assert_eq!(
            prepare(&[1], &[f32::NAN], 10, false, &mut i, &mut v),
            Err(QueryError::NonFinite { id: 1 })
        );
        assert_eq!(
            prepare(&[1, 1], &[f32::MAX, f32::MAX], 10, false, &mut i, &mut v),
            Err(QueryError::NonFinite { id: 1 })
        );
    }

    #[test]
    fn normalizes_values_whose_squares_overflow_or_underflow_in_f32() {
        let (mut i, mut v) = (Vec::new(), Vec::new());
        let close = |v: &[f32], want: [f32; 2]| {
            assert!(v.len() == 2 && v.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
        };
        prepare(&[3, 17], &[3e38, 4e37], 20, true, &mut i, &mut v).unwrap();
        assert_eq!(i, vec![3, 17]);
        let (mut i2, mut v2) = (Vec::new(), Vec::new());
        prepare(&[3, 17], &[3.0, 0.4], 20, true, &mut i2, &mut v2).unwrap();
        close(&v, [v2[0], v2[1]]);
        prepare(&[3, 17], &[3e-30, 4e-30], 20, true, &mut i, &mut v).unwrap();
        close(&v, [0.6, 0.8]);
        // The ordinary path is untouched.
        prepare(&[3, 17], &[3.0, 4.0], 20, true, &mut i, &mut v).unwrap();
        assert_eq!(v, vec![0.6, 0.8]);
    }

    proptest! {
        #[test]
        fn output_is_sorted_unique_and_nonzero(
            pairs in proptest::collection::vec((0u32..50, -3.0f32..3.0), 0..40)
        ) {
            let idx: Vec<u32> = pairs.iter().map(|p| p.0).collect();
            let val: Vec<f32> = pairs.iter().map(|p| p.1).collect();
            let (mut i, mut v) = (Vec::new(), Vec::new());
            prepare(&idx, &val, 50, false, &mut i, &mut v).unwrap();
            prop_assert!(i.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(v.iter().all(|&x| x != 0.0));
            prop_assert_eq!(i.len(), v.len());
        }
    }
}

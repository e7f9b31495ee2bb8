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
    /// In a model that does not normalize queries, the values of the features of one DEFRAG
    /// cluster sum beyond `f32`'s range.
    #[error(
        "the values of feature {id}'s cluster sum beyond f32's range (this model does not \
         normalize queries)"
    )]
    ClusterOverflow {
        /// The query's first feature in that cluster.
        id: u32,
    },
    /// A per-request weight of a reranker is out of its range.
    #[error("`{option}` must be {range}, got {value}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// Its range, in words.
        range: &'static str,
        /// The value given.
        value: f32,
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
        // Each id's values are summed in `f64`, which no sum of `f32`s overflows. A sum can still
        // be beyond `f32`'s range. A query that is normalized next keeps only its direction, so
        // its sums are first scaled by a power of two (exact) into range; one that is not is
        // refused below.
        let mut scale = 1.0f64;
        if normalize {
            let (mut largest, mut r) = (0f64, 0);
            while r < out_idx.len() {
                let (end, sum) = run_at(out_idx, out_val, r);
                largest = largest.max(sum.abs());
                r = end;
            }
            while largest * scale > f64::from(f32::MAX) {
                scale *= 0.5;
            }
        }
        let (mut w, mut r) = (0, 0);
        while r < out_idx.len() {
            let (end, sum) = run_at(out_idx, out_val, r);
            // `w` trails `r`, so this writes over values already summed.
            out_idx[w] = out_idx[r];
            out_val[w] = (sum * scale) as f32;
            (w, r) = (w + 1, end);
        }
        out_idx.truncate(w);
        out_val.truncate(w);
    }
    // A sum beyond `f32`'s range in a query that is not normalized: it cannot be scored.
    if let Some(p) = out_val.iter().position(|v| !v.is_finite()) {
        return Err(QueryError::NonFinite { id: out_idx[p] });
    }
    // Every value is finite here, so this drops the zeros.
    crate::data::finish_query(out_idx, out_val, normalize);
    Ok(())
}

/// The run of equal ids in sorted `idx` that starts at `r`: where it ends, and the `f64` sum of
/// its values in `val`.
fn run_at(idx: &[u32], val: &[f32], r: usize) -> (usize, f64) {
    let mut end = r;
    let mut sum = 0f64;
    while end < idx.len() && idx[end] == idx[r] {
        sum += f64::from(val[end]);
        end += 1;
    }
    (end, sum)
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
    fn a_sum_beyond_f32_is_kept_when_the_query_is_normalized() {
        // Feature 1158 twice at 2.47e38 (schemathesis's example): 4.93e38 as an `f32` is infinite,
        // but a normalized query keeps only the direction, which `f64` holds.
        let (mut i, mut v) = (Vec::new(), Vec::new());
        let idx = [167, 1158, 331, 1158];
        let val = [-4.416_42e37, 2.465_648e38, 1.43e16, 2.465_648e38];
        prepare(&idx, &val, 2000, true, &mut i, &mut v).unwrap();
        assert_eq!(i, vec![167, 331, 1158]);
        let sums = [-4.416_42e37f64, 1.43e16, 2.0 * 2.465_648e38];
        let norm = sums.iter().map(|x| x * x).sum::<f64>().sqrt();
        for (got, want) in v.iter().zip(sums) {
            assert!((f64::from(*got) - want / norm).abs() < 1e-6, "{v:?}");
        }
        // Unnormalized, the sum has no `f32`: refused, as before.
        assert_eq!(
            prepare(&idx, &val, 2000, false, &mut i, &mut v),
            Err(QueryError::NonFinite { id: 1158 })
        );
        // Three of one id at the top of the range: halved until in range, then normalized.
        prepare(&[4, 4, 4, 9], &[f32::MAX; 4], 10, true, &mut i, &mut v).unwrap();
        assert!(
            (v[0] - 0.948_683_3).abs() < 1e-6 && (v[1] - 0.316_227_8).abs() < 1e-6,
            "{v:?}"
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

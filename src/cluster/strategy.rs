//! How a bisection turns each row's preference for one centroid over the other into an assignment.
//!
//! The alternating optimisation of a two-way split has two steps: fit centroids to an assignment,
//! and assign rows given centroids. The second step is where split objectives differ (balanced
//! 2-means cuts the ranking in half; the λ-weighted split of Baharav et al. 2021 fills the first side
//! up to half of the label mass), so it is an enum that the bisection loop consults.
//!
//! Only the balanced rule exists so far. The λ-weighted split (eq. 4-5 and Lemma 1 of Baharav et
//! al.) will be a second variant carrying λ: it also needs per-row weights f(λ), which will enter
//! the centroid refit (weighted sums) and the objective as well as this step (sort by β/f and fill
//! the first side up to its share of the mass), so its variant will come with a weights argument to
//! [`partition`](super::partition). With λ = 0 the weights are uniform and it must reduce to
//! [`SplitStrategy::Balanced`].

use std::cmp::Ordering;

/// The rule that assigns rows to the two sides of a bisection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SplitStrategy {
    /// Parabel's balanced split: the rows with the largest margin (similarity to the first
    /// centroid minus similarity to the second) fill the first side up to its target size, ties
    /// going to the earlier row.
    #[default]
    Balanced,
}

impl SplitStrategy {
    /// Returns, for each row, whether it goes to the first side, given its `margins` and the
    /// first side's target size `left_len` (at most `margins.len()`).
    pub(crate) fn assign(self, margins: &[f32], left_len: usize) -> Vec<bool> {
        match self {
            SplitStrategy::Balanced => balanced_assign(margins, left_len),
        }
    }
}

/// Puts the `left_len` rows of largest margin on the first side.
///
/// The order (margin descending, then position ascending) is total, so the chosen set is unique
/// even with ties or NaN margins, and a linear-time selection suffices.
fn balanced_assign(margins: &[f32], left_len: usize) -> Vec<bool> {
    let mut left = vec![false; margins.len()];
    let left_len = left_len.min(margins.len());
    if left_len == 0 {
        return left;
    }
    let mut order: Vec<u32> = (0..margins.len() as u32).collect();
    let by_margin = |a: &u32, b: &u32| -> Ordering {
        margins[*b as usize]
            .total_cmp(&margins[*a as usize])
            .then(a.cmp(b))
    };
    order.select_nth_unstable_by(left_len - 1, by_margin);
    for &k in &order[..left_len] {
        left[k as usize] = true;
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_takes_largest_margins() {
        let left = SplitStrategy::Balanced.assign(&[0.1, 0.9, -0.5, 0.3], 2);
        assert_eq!(left, vec![false, true, false, true]);
    }

    #[test]
    fn balanced_breaks_ties_by_position() {
        let left = SplitStrategy::Balanced.assign(&[0.0; 5], 3);
        assert_eq!(left, vec![true, true, true, false, false]);
    }

    #[test]
    fn balanced_handles_nan_and_extremes() {
        let left = SplitStrategy::Balanced.assign(&[f32::NAN, 1.0, f32::NEG_INFINITY], 1);
        assert_eq!(left.iter().filter(|&&l| l).count(), 1);
        assert_eq!(
            SplitStrategy::Balanced.assign(&[1.0, 2.0], 0),
            vec![false; 2]
        );
        assert_eq!(
            SplitStrategy::Balanced.assign(&[1.0, 2.0], 5),
            vec![true; 2]
        );
    }
}

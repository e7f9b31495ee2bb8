//! How a bisection turns each row's preference for one centroid over the other into an assignment.
//!
//! The alternating optimisation of a two-way split has two steps: fit centroids to an assignment,
//! and assign rows given centroids. The second step is where split objectives differ, so it is an
//! enum that the bisection loop consults:
//!
//! - [`SplitStrategy::Balanced`] (Parabel): the rows of largest margin fill the first side up to
//!   its share of the *count*.
//! - [`SplitStrategy::Weighted`] (Baharav et al. 2021, eq. 4-5): every row carries a weight
//!   f_ℓ(λ) that sums to 1 over the split, and the first side is filled, in decreasing order of
//!   β_ℓ/f_ℓ(λ) = (2 − λ)/2 · margin_ℓ + (λ − 1)₊ · f_ℓ(λ), up to its share of the *mass*
//!   (Lemma 1). The one fractional row of the LP optimum is rounded, as the paper's implementation
//!   does after every iteration. Its weights enter the centroid refit and the objective too, so
//!   it needs row frequencies ([`partition_weighted`](super::partition_weighted)).
//!
//! With λ = 0 the weights are uniform and the weighted rule is the balanced one up to rounding; the
//! tree builder maps λ = 0 to [`SplitStrategy::Balanced`] so that such trees stay bit-identical.

use std::cmp::Ordering;

/// The rule that assigns rows to the two sides of a bisection.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum SplitStrategy {
    /// Parabel's balanced split: the rows with the largest margin (similarity to the first
    /// centroid minus similarity to the second) fill the first side up to its target size, ties
    /// going to the earlier row.
    #[default]
    Balanced,
    /// The λ-interpolated split of Baharav et al.: λ = 0 is balanced 2-means, 1 weighted 2-means,
    /// 2 Fano coding. `gamma` is the additive smoothing of f(λ).
    Weighted {
        /// λ, in [0, 2].
        lambda: f32,
        /// γ ≥ 0.
        gamma: f32,
    },
}

impl SplitStrategy {
    /// Returns, for each row, whether it goes to the first side, given its `margins` and the
    /// first side's target size `left_len` (at most `margins.len()`). This is the balanced rule;
    /// the weighted one is [`weighted_assign`].
    pub(crate) fn assign(self, margins: &[f32], left_len: usize) -> Vec<bool> {
        balanced_assign(margins, left_len)
    }
}

/// The sort-and-fill of Lemma 1, rounded: rows in decreasing order of `keys` (β/f; ties to the
/// earlier row) go to the first side while the side's mass is below `target`; the row that
/// crosses `target` goes there when at least half of it is needed (the LP's one fractional α,
/// rounded). The side's size is then clamped to `min_left..=max_left` along the same order, so
/// that both sides can still yield their parts.
///
/// Callers guarantee `min_left <= max_left <= keys.len() == mass.len()`.
pub(crate) fn weighted_assign(
    keys: &[f32],
    mass: &[f32],
    target: f64,
    min_left: usize,
    max_left: usize,
) -> Vec<bool> {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_unstable_by(|a, b| {
        keys[*b as usize]
            .total_cmp(&keys[*a as usize])
            .then(a.cmp(b))
    });
    let mut taken = 0;
    let mut filled = 0.0f64;
    for &k in &order {
        if filled >= target {
            break;
        }
        let m = f64::from(mass[k as usize]);
        if filled + m >= target {
            // The crossing row: α* = (target − filled)/m of it belongs to the first side.
            if m > 0.0 && (target - filled) / m >= 0.5 {
                taken += 1;
            }
            break;
        }
        filled += m;
        taken += 1;
    }
    let taken = taken.clamp(min_left, max_left);
    let mut left = vec![false; keys.len()];
    for &k in &order[..taken] {
        left[k as usize] = true;
    }
    left
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
    fn weighted_fills_mass_and_rounds_the_crossing_row() {
        // Order by key: rows 1, 3, 0, 2. Masses 0.4 + 0.3 cross 0.5 at row 3, which is needed
        // for (0.5 − 0.4)/0.3 = 1/3 < 1/2 of it: rounded away.
        let keys = [0.5, 2.0, -1.0, 1.0];
        let mass = [0.1, 0.4, 0.2, 0.3];
        assert_eq!(
            weighted_assign(&keys, &mass, 0.5, 1, 3),
            vec![false, true, false, false]
        );
        // A target of 0.6 needs 2/3 of row 3: rounded in.
        assert_eq!(
            weighted_assign(&keys, &mass, 0.6, 1, 3),
            vec![false, true, false, true]
        );
    }

    #[test]
    fn weighted_keeps_both_sides_able_to_yield_their_parts() {
        // One row holds almost all the mass; it alone would overfill, and rounding would leave
        // the first side empty without the clamp.
        let keys = [3.0, 2.0, 1.0];
        let mass = [0.98, 0.01, 0.01];
        assert_eq!(
            weighted_assign(&keys, &mass, 0.3, 1, 2),
            vec![true, false, false]
        );
        // Massless rows ahead of the cut are taken along; the clamp then stops at two.
        assert_eq!(
            weighted_assign(&[3.0, 2.0, 1.0], &[0.0, 0.0, 1.0], 1.0, 1, 2),
            vec![true, true, false]
        );
    }

    #[test]
    fn weighted_with_uniform_mass_is_balanced() {
        let margins = [0.3, -0.2, 0.9, 0.1, -0.7, 0.0];
        let mass = [1.0 / 6.0; 6];
        for left_len in 1..6 {
            let target = left_len as f64 / 6.0;
            assert_eq!(
                weighted_assign(&margins, &mass, target, 1, 5),
                balanced_assign(&margins, left_len),
                "left_len {left_len}"
            );
        }
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

//! Summary statistics of a data set, as printed by `xmc data stats` and stored in model metadata.

use serde::{Deserialize, Serialize};

use super::{Dataset, SparseMatrix};

/// How many rows hold each label, in a label matrix (any CSR whose column indices are label ids):
/// the training-set counts a model stores and the counts propensities are computed from.
pub fn label_counts(labels: &SparseMatrix) -> Vec<u32> {
    let mut counts = vec![0u32; labels.cols()];
    for &l in labels.indices() {
        counts[l as usize] = counts[l as usize].saturating_add(1);
    }
    counts
}

/// Shape and label-distribution figures of a data set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataStats {
    /// The number of points.
    pub n: usize,
    /// The number of features.
    pub d: usize,
    /// The number of labels.
    pub l: usize,
    /// The mean number of stored features per point.
    pub avg_features_per_point: f64,
    /// The mean number of labels per point.
    pub avg_labels_per_point: f64,
    /// The mean number of points per label (over all `l` labels).
    pub avg_points_per_label: f64,
    /// How many labels make up the top 1%: `ceil(l / 100)`.
    pub top1pct_labels: usize,
    /// The share of all label occurrences taken by the `top1pct_labels` most frequent labels.
    pub top1pct_label_share: f64,
    /// The number of points with no label.
    pub points_without_labels: usize,
    /// The number of labels that occur at least once.
    pub labels_seen: usize,
}

impl DataStats {
    /// Computes the statistics of `ds` in one pass over its label matrix.
    pub fn of(ds: &Dataset) -> Self {
        let (n, d, l) = (ds.n_points(), ds.n_features(), ds.n_labels());
        let mut counts = vec![0usize; l];
        for &j in ds.labels.indices() {
            // Label ids are below `l` by the CSR invariant of `Dataset`.
            if let Some(c) = counts.get_mut(j as usize) {
                *c += 1;
            }
        }
        let occurrences: usize = counts.iter().sum();
        let labels_seen = counts.iter().filter(|&&c| c > 0).count();
        let top = l.div_ceil(100);
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top_sum: usize = counts.iter().take(top).sum();
        let points_without_labels = (0..n).filter(|&i| ds.label_row(i).is_empty()).count();
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Self {
            n,
            d,
            l,
            avg_features_per_point: ratio(ds.features.nnz(), n),
            avg_labels_per_point: ratio(occurrences, n),
            avg_points_per_label: ratio(occurrences, l),
            top1pct_labels: top,
            top1pct_label_share: ratio(top_sum, occurrences),
            points_without_labels,
            labels_seen,
        }
    }
}

impl std::fmt::Display for DataStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows: [(&str, String); 9] = [
            ("points (N)", self.n.to_string()),
            ("features (D)", self.d.to_string()),
            ("labels (L)", self.l.to_string()),
            (
                "avg features/point",
                format!("{:.2}", self.avg_features_per_point),
            ),
            (
                "avg labels/point",
                format!("{:.3}", self.avg_labels_per_point),
            ),
            (
                "avg points/label",
                format!("{:.2}", self.avg_points_per_label),
            ),
            (
                "top-1% labels share",
                format!(
                    "{:.2}% ({} labels)",
                    100.0 * self.top1pct_label_share,
                    self.top1pct_labels
                ),
            ),
            (
                "points without labels",
                self.points_without_labels.to_string(),
            ),
            ("labels seen", self.labels_seen.to_string()),
        ];
        for (name, value) in rows {
            writeln!(f, "{name:<24}{value:>16}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::read_xc;

    #[test]
    fn counts_a_tiny_data_set() {
        let ds = read_xc("3 4 200\n0,1 0:1\n 1:1 2:1\n0 3:1\n".as_bytes(), "t").expect("valid");
        let s = DataStats::of(&ds);
        assert_eq!((s.n, s.d, s.l), (3, 4, 200));
        assert_eq!(
            (s.points_without_labels, s.labels_seen, s.top1pct_labels),
            (1, 2, 2)
        );
        assert!((s.avg_labels_per_point - 1.0).abs() < 1e-12);
        assert!((s.top1pct_label_share - 1.0).abs() < 1e-12);
        assert!((s.avg_points_per_label - 3.0 / 200.0).abs() < 1e-12);
    }
}

//! Data sets: sparse feature and label matrices, and the files they come from.
//!
//! A [`Dataset`] is two CSR matrices with the same rows: `features` (n × d, `f32`) and `labels`
//! (n × L, every stored value `1.0`). Rows are sorted by column and hold no duplicates.

mod error;
mod ids;
mod input;
pub mod names;
pub mod stats;
pub mod synth;
pub mod write;
pub mod xc;

pub use error::{DataError, LineProblem};
pub use ids::{FeatureId, LabelId};
pub(crate) use input::open as open_input;
pub use names::read_names;
pub use stats::{DataStats, label_counts};
pub use synth::{SynthParams, generate, generate_split};
pub use write::{
    finish_query, l2_normalize, l2_normalize_query, l2_normalize_rows, write_xc, write_xc_file,
};
pub use xc::{read_xc, read_xc_file};

/// A CSR (or, where noted, CSC) matrix of `f32` with `u32` column indices and `usize` row pointers.
pub type SparseMatrix = sprs::CsMatI<f32, u32, usize>;

/// A labelled data set: features and labels, one row per point.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// n × d feature matrix, CSR, rows sorted and unique.
    pub features: SparseMatrix,
    /// n × L label indicator matrix, CSR, rows sorted and unique, values `1.0`.
    pub labels: SparseMatrix,
}

impl Dataset {
    /// The number of points (rows).
    pub fn n_points(&self) -> usize {
        self.features.rows()
    }

    /// The number of features (columns of `features`).
    pub fn n_features(&self) -> usize {
        self.features.cols()
    }

    /// The number of labels (columns of `labels`).
    pub fn n_labels(&self) -> usize {
        self.labels.cols()
    }

    /// The feature ids and values of point `i`.
    ///
    /// # Panics
    /// If `i >= self.n_points()`.
    pub fn feature_row(&self, i: usize) -> (&[u32], &[f32]) {
        row_slices(&self.features, i)
    }

    /// The label ids of point `i`.
    ///
    /// # Panics
    /// If `i >= self.n_points()`.
    pub fn label_row(&self, i: usize) -> &[u32] {
        row_slices(&self.labels, i).0
    }
}

/// The column indices and values stored in row `i` of a CSR matrix (or column `i` of a CSC one).
///
/// # Panics
/// If `i` is not below the number of outer dimensions.
#[inline]
pub fn row_slices(m: &SparseMatrix, i: usize) -> (&[u32], &[f32]) {
    let ptr = m.indptr();
    let range = ptr.outer_inds_sz(i);
    (&m.indices()[range.clone()], &m.data()[range])
}

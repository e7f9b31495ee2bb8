//! A subset of the rows of a CSR matrix, seen in a column space no wider than it needs.
//!
//! A split keeps dense centroids. Deep in a tree a node holds a few hundred rows that touch a few
//! thousand of, say, 500,000 columns; zeroing and scanning 500,000-wide centroids there would cost
//! far more than the rows themselves. So when a subset's non-zeros are fewer than the matrix's
//! columns, its columns are renumbered to `0..u` (u = the distinct columns it uses) once per split.
//! Wide subsets keep the original numbering and pay nothing. Either way the arithmetic a split does
//! touches the same values in the same order, so results are bit-identical between the two views.

use crate::data::{SparseMatrix, row_slices};

/// Rows `rows` of `vectors`, with column indices in a space of width [`Subset::dim`].
pub(crate) struct Subset<'a> {
    vectors: &'a SparseMatrix,
    rows: &'a [u32],
    dim: usize,
    /// For a compacted view: per-row offsets into the renumbered column indices, and those indices.
    compact: Option<(Vec<usize>, Vec<u32>)>,
}

impl<'a> Subset<'a> {
    /// Views `rows` of `vectors`. Callers guarantee every row index is in range.
    pub(crate) fn new(vectors: &'a SparseMatrix, rows: &'a [u32]) -> Self {
        let nnz: usize = rows
            .iter()
            .map(|&r| row_slices(vectors, r as usize).0.len())
            .sum();
        Self::with_view(vectors, rows, nnz < vectors.cols())
    }

    /// Views `rows` of `vectors`, compacting the column space exactly when `compact` is set.
    pub(crate) fn with_view(vectors: &'a SparseMatrix, rows: &'a [u32], compact: bool) -> Self {
        if !compact {
            return Subset {
                vectors,
                rows,
                dim: vectors.cols(),
                compact: None,
            };
        }
        let mut cols: Vec<u32> = Vec::new();
        for &r in rows {
            cols.extend_from_slice(row_slices(vectors, r as usize).0);
        }
        cols.sort_unstable();
        cols.dedup();
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        let mut local = Vec::with_capacity(cols.capacity());
        offsets.push(0);
        for &r in rows {
            for c in row_slices(vectors, r as usize).0 {
                // Every column of the subset was collected into `cols`, so the search always hits.
                let slot = cols.binary_search(c).unwrap_or_else(|p| p);
                local.push(slot as u32);
            }
            offsets.push(local.len());
        }
        Subset {
            vectors,
            rows,
            dim: cols.len(),
            compact: Some((offsets, local)),
        }
    }

    /// The number of rows in the subset.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The width of the column space that [`Subset::row`] indexes into.
    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    /// The column indices (below [`Subset::dim`]) and values of the subset's `k`-th row.
    pub(crate) fn row(&self, k: usize) -> (&[u32], &[f32]) {
        let (cols, vals) = row_slices(self.vectors, self.rows[k] as usize);
        match &self.compact {
            None => (cols, vals),
            Some((offsets, local)) => (&local[offsets[k]..offsets[k + 1]], vals),
        }
    }
}

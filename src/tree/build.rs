//! Building a label tree: PIFA label embeddings, then recursive clustering.
//!
//! A label's PIFA embedding is the L2-normalized sum of the L2-normalized feature rows of the
//! training points that carry it; labels that share points end up close. [`build_tree`] cuts the
//! labels into `branching` balanced parts with [`crate::cluster::partition`] and recurses until a
//! node holds at most `max_leaf` labels. [`build_tree_weighted`] does the same with the
//! λ-interpolated split ([`crate::cluster::partition_weighted`]) over label frequencies
//! ([`super::freq`]): frequent labels then land in small subtrees, so leaves sit at different
//! depths. Sibling subtrees are built in parallel, and each node's
//! seed is derived from the tree seed and the path of child indices that leads to it, so the tree
//! is the same whatever the number of threads.
//!
//! Memory stays proportional to the embeddings: a split holds two dense centroids over the columns
//! its labels use, and only splits that are running hold any.

use std::collections::VecDeque;

use rayon::prelude::*;

use super::freq::LabelFrequencies;
use super::{TreeError, TreeLayout};
use crate::cluster::{self, ClusterParams, RowFrequencies, SplitStrategy};
use crate::data::{Dataset, LabelId, SparseMatrix, row_slices};

/// Labels per rayon task when embedding; each task reuses one dense accumulator.
const PIFA_CHUNK: usize = 256;

/// The hyper-parameters of tree construction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeParams {
    /// Children per internal node (at least 2). Values above 2 use recursive bisection (see
    /// [`crate::cluster`]); with balanced splits children sizes differ by at most one.
    pub branching: usize,
    /// The most labels a leaf may hold (at least 1).
    pub max_leaf: usize,
    /// The seed every random choice derives from.
    pub seed: u64,
    /// The most rounds of each 2-means split.
    pub max_iter: usize,
    /// Stop a split once its mean similarity improves by less than this.
    pub tol: f32,
    /// How each split assigns labels to sides.
    pub strategy: SplitStrategy,
}

impl TreeParams {
    /// Parabel's defaults: binary tree, at most 100 labels per leaf, seed 0, up to 20 rounds per
    /// split, tolerance 1e-4, balanced splits.
    pub const DEFAULT: TreeParams = TreeParams {
        branching: 2,
        max_leaf: 100,
        seed: 0,
        max_iter: ClusterParams::DEFAULT.max_iter,
        tol: ClusterParams::DEFAULT.tol,
        strategy: ClusterParams::DEFAULT.strategy,
    };

    /// Checks every field, naming the first bad one.
    pub fn validate(&self) -> Result<(), TreeError> {
        if self.branching < 2 || self.branching > u32::MAX as usize {
            return Err(TreeError::InvalidParam {
                name: "branching",
                reason: format!("must be at least 2, got {}", self.branching),
            });
        }
        if self.max_leaf == 0 {
            return Err(TreeError::InvalidParam {
                name: "max_leaf",
                reason: "must be at least 1".into(),
            });
        }
        self.cluster_params().validate()?;
        Ok(())
    }

    /// The per-split parameters.
    fn cluster_params(&self) -> ClusterParams {
        ClusterParams {
            max_iter: self.max_iter,
            tol: self.tol,
            strategy: self.strategy,
        }
    }
}

impl Default for TreeParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The PIFA embeddings of all labels: an L × d CSR matrix whose row `l` is the L2-normalized sum
/// of the L2-normalized feature rows of the points carrying label `l`.
///
/// Labels with no points, or whose points have no features, get an empty row. Points with a label
/// row but no feature row (a malformed data set) are skipped rather than trusted.
pub fn pifa_embeddings(ds: &Dataset) -> SparseMatrix {
    let features = as_csr(&ds.features);
    let by_label = ds.labels.to_csc();
    let (n_labels, dim) = (ds.n_labels(), ds.n_features());
    let inv_norms: Vec<f32> = (0..features.rows())
        .map(|i| inverse_norm(row_slices(&features, i).1))
        .collect();

    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..n_labels)
        .into_par_iter()
        .with_min_len(PIFA_CHUNK)
        .map_init(
            || Accumulator::new(dim),
            |acc, label| {
                for &point in row_slices(&by_label, label).0 {
                    let point = point as usize;
                    if point < features.rows() {
                        let (cols, vals) = row_slices(&features, point);
                        acc.add(cols, vals, inv_norms[point]);
                    }
                }
                acc.take_normalized()
            },
        )
        .collect();

    let mut indptr = Vec::with_capacity(n_labels + 1);
    indptr.push(0usize);
    let nnz = rows.iter().map(|r| r.0.len()).sum();
    let (mut indices, mut data) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for (cols, vals) in rows {
        indices.extend_from_slice(&cols);
        data.extend_from_slice(&vals);
        indptr.push(indices.len());
    }
    // Each row's columns come sorted and unique from the accumulator and are below `dim`, and
    // `indptr` is the running total of row lengths, so the structure is valid by construction.
    SparseMatrix::try_new((n_labels, dim), indptr, indices, data)
        .expect("PIFA rows are sorted, unique and in range by construction")
}

/// A dense scratch vector that remembers which entries it touched, so resetting it costs only
/// those entries.
struct Accumulator {
    sum: Vec<f32>,
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl Accumulator {
    fn new(dim: usize) -> Self {
        Accumulator {
            sum: vec![0.0; dim],
            touched: Vec::new(),
            is_touched: vec![false; dim],
        }
    }

    /// Adds `scale` times the sparse row `(cols, vals)`.
    fn add(&mut self, cols: &[u32], vals: &[f32], scale: f32) {
        for (&c, &v) in cols.iter().zip(vals) {
            let c = c as usize;
            if !self.is_touched[c] {
                self.is_touched[c] = true;
                self.touched.push(c as u32);
            }
            self.sum[c] += v * scale;
        }
    }

    /// Returns the accumulated vector, L2-normalized, as sorted sparse entries without zeros, and
    /// resets the accumulator.
    fn take_normalized(&mut self) -> (Vec<u32>, Vec<f32>) {
        self.touched.sort_unstable();
        let mut cols = Vec::with_capacity(self.touched.len());
        let mut vals = Vec::with_capacity(self.touched.len());
        for &c in &self.touched {
            let v = std::mem::take(&mut self.sum[c as usize]);
            self.is_touched[c as usize] = false;
            if v != 0.0 {
                cols.push(c);
                vals.push(v);
            }
        }
        self.touched.clear();
        let inv = inverse_norm(&vals);
        for v in &mut vals {
            *v *= inv;
        }
        (cols, vals)
    }
}

/// 1/‖v‖₂, or 0 for a zero or non-finite norm (so such rows contribute nothing).
fn inverse_norm(v: &[f32]) -> f32 {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        1.0 / norm
    } else {
        0.0
    }
}

/// `m` itself if it is CSR, otherwise a CSR copy.
fn as_csr(m: &SparseMatrix) -> std::borrow::Cow<'_, SparseMatrix> {
    if m.is_csr() {
        std::borrow::Cow::Borrowed(m)
    } else {
        std::borrow::Cow::Owned(m.to_csr())
    }
}

/// Builds the label tree over the rows of `embeddings` (one row per label, ideally unit-norm).
///
/// Every label lands in exactly one leaf of at most `max_leaf` labels; each leaf lists its labels in
/// increasing order. With no labels the tree is a single empty root leaf.
pub fn build_tree(embeddings: &SparseMatrix, params: &TreeParams) -> Result<TreeLayout, TreeError> {
    build(embeddings, params, None)
}

/// Builds the label tree with frequency-weighted splits when `params.strategy` is
/// [`SplitStrategy::Weighted`] (`freqs` has one entry per row of `embeddings`); with
/// [`SplitStrategy::Balanced`] the frequencies are ignored and this is [`build_tree`].
pub fn build_tree_weighted(
    embeddings: &SparseMatrix,
    params: &TreeParams,
    freqs: &LabelFrequencies,
) -> Result<TreeLayout, TreeError> {
    let rows = embeddings.rows();
    if freqs.f.len() != rows || freqs.f_tilde.len() != rows {
        return Err(TreeError::InvalidParam {
            name: "freqs",
            reason: format!(
                "{} / {} frequencies for {rows} labels",
                freqs.f.len(),
                freqs.f_tilde.len()
            ),
        });
    }
    build(
        embeddings,
        params,
        Some(&RowFrequencies {
            f: &freqs.f,
            f_tilde: &freqs.f_tilde,
        }),
    )
}

fn build(
    embeddings: &SparseMatrix,
    params: &TreeParams,
    freqs: Option<&RowFrequencies<'_>>,
) -> Result<TreeLayout, TreeError> {
    params.validate()?;
    let embeddings = as_csr(embeddings);
    let n_labels = embeddings.rows();
    // A tree over L labels with non-empty leaves has fewer than 2L nodes, and node ids are 32-bit.
    if n_labels > (u32::MAX / 2) as usize {
        return Err(TreeError::InvalidParam {
            name: "embeddings",
            reason: format!("{n_labels} labels are too many for 32-bit node ids"),
        });
    }
    let all: Vec<u32> = (0..n_labels as u32).collect();
    let root = grow(
        &embeddings,
        all,
        params,
        &params.cluster_params(),
        freqs,
        params.seed,
    )?;
    flatten(root, n_labels)
}

/// A subtree under construction.
enum Subtree {
    Leaf(Vec<u32>),
    Internal(Vec<Subtree>),
}

/// Recursively splits `labels` until every part fits in a leaf.
fn grow(
    embeddings: &SparseMatrix,
    labels: Vec<u32>,
    params: &TreeParams,
    cluster_params: &ClusterParams,
    freqs: Option<&RowFrequencies<'_>>,
    seed: u64,
) -> Result<Subtree, TreeError> {
    if labels.len() <= params.max_leaf {
        return Ok(Subtree::Leaf(labels));
    }
    let n_parts = params.branching.min(labels.len());
    let parts = match freqs {
        Some(freqs) => {
            cluster::partition_weighted(embeddings, &labels, n_parts, cluster_params, freqs, seed)?
        }
        None => cluster::partition(embeddings, &labels, n_parts, cluster_params, seed)?,
    };
    drop(labels);
    let children = parts
        .into_par_iter()
        .enumerate()
        .map(|(i, part)| {
            let child_seed = crate::seed::derive_seed(seed, i as u64);
            grow(embeddings, part, params, cluster_params, freqs, child_seed)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Subtree::Internal(children))
}

/// Numbers the nodes of `root` in breadth-first order and lays them out flat.
fn flatten(root: Subtree, n_labels: usize) -> Result<TreeLayout, TreeError> {
    let (mut first_child, mut n_children, mut depth) = (Vec::new(), Vec::new(), Vec::new());
    let mut label_offsets = vec![0u32];
    let mut labels = Vec::with_capacity(n_labels);
    let mut queue = VecDeque::from([(root, 0u32)]);
    let mut next_id: u32 = 1;
    while let Some((node, d)) = queue.pop_front() {
        depth.push(d);
        match node {
            Subtree::Leaf(own) => {
                first_child.push(0);
                n_children.push(0);
                labels.extend(own.into_iter().map(LabelId));
            }
            Subtree::Internal(children) => {
                let count = children.len() as u32;
                first_child.push(next_id);
                n_children.push(count);
                next_id += count;
                queue.extend(children.into_iter().map(|c| (c, d + 1)));
            }
        }
        label_offsets.push(labels.len() as u32);
    }
    TreeLayout::from_parts(
        first_child,
        n_children,
        depth,
        label_offsets,
        labels,
        n_labels,
    )
}

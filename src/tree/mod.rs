//! Label trees: the partition of the label set that a probabilistic label tree searches.
//!
//! A Parabel-style tree routes a query from the root towards the leaves; each leaf holds at most
//! `max_leaf` labels. This module builds the *structure* of that tree: [`build`] embeds labels
//! (PIFA) and clusters them recursively with the balanced or λ-weighted splits of
//! [`crate::cluster`] (weighted by the label frequencies of [`freq`]), and
//! [`layout`] stores the result as a flat, breadth-first [`TreeLayout`] that the node classifiers,
//! the bundle and the search index into. [`train`] fits the node classifiers, [`chunk`] stores
//! their weights feature-major, and [`view`] is the stored tree and its search.

pub mod build;
pub mod chunk;
pub mod flat;
pub mod freq;
pub mod layout;
pub mod train;
pub mod view;

pub use build::{TreeParams, build_tree, build_tree_weighted, pifa_embeddings};
pub use freq::{FreqKind, LabelFrequencies, label_frequencies};
pub use layout::{DepthCount, LeafSizeStats, TreeLayout};

use crate::cluster::ClusterError;

/// Which model family to train: the tree's shape (a flat model is a single-leaf tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A probabilistic label tree (Parabel-style), the default.
    Tree,
    /// Flat one-vs-all: every label scored by its own classifier.
    Flat,
}

/// Why a tree could not be built, or why stored tree arrays are not a valid tree.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    /// A tree parameter is outside its valid range.
    #[error("invalid tree parameter `{name}`: {reason}")]
    InvalidParam {
        /// The parameter's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A split failed.
    #[error("clustering failed: {0}")]
    Cluster(#[from] ClusterError),
    /// The tree has no nodes; even an empty label set needs a root.
    #[error("a tree needs at least a root node")]
    NoNodes,
    /// Two arrays that must have related lengths do not.
    #[error("`{array}` has length {found}, expected {expected}")]
    LengthMismatch {
        /// The array whose length is wrong.
        array: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },
    /// A node's children are not the next unused ids in breadth-first order.
    #[error("node {node}: children start at {found}, expected {expected} (breadth-first order)")]
    NotBreadthFirst {
        /// The node whose children are misplaced.
        node: usize,
        /// Where its children must start.
        expected: usize,
        /// Where they start.
        found: usize,
    },
    /// A node is not the child of any earlier node, or the children run past the last node.
    #[error("node {node} is not reachable from the root")]
    Unreachable {
        /// The unreachable node (or the first id past the end that a child range names).
        node: usize,
    },
    /// A leaf stores a child pointer other than zero.
    #[error("leaf {node} has first_child {found}, expected 0")]
    LeafWithChildPointer {
        /// The leaf.
        node: usize,
        /// The stored value.
        found: u32,
    },
    /// A node's depth is not its parent's depth plus one (or the root's is not zero).
    #[error("node {node} has depth {found}, expected {expected}")]
    DepthMismatch {
        /// The node.
        node: usize,
        /// The depth it must have.
        expected: u32,
        /// The depth stored.
        found: u32,
    },
    /// The label offsets are not non-decreasing or do not end at the number of stored labels.
    #[error("label offsets are malformed at node {node}")]
    BadLabelOffsets {
        /// The first node whose offsets are wrong.
        node: usize,
    },
    /// An internal node owns labels; only leaves may.
    #[error("internal node {node} owns labels")]
    InternalNodeWithLabels {
        /// The node.
        node: usize,
    },
    /// A leaf owns no label although the tree has labels.
    #[error("leaf {node} owns no labels")]
    EmptyLeaf {
        /// The leaf.
        node: usize,
    },
    /// A stored label id is not below the number of labels.
    #[error("label {label} is out of range for {n_labels} labels")]
    LabelOutOfRange {
        /// The label id.
        label: u32,
        /// The number of labels.
        n_labels: usize,
    },
    /// A label is stored in more than one place.
    #[error("label {label} appears more than once")]
    DuplicateLabel {
        /// The label id.
        label: u32,
    },
}

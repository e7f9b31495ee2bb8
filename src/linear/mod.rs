//! Sparse one-vs-all linear classifiers.

//! xmc: extreme multi-label classification, from training to a sub-millisecond request path.
//!
//! Given one sparse feature vector (or a text, through the model's own vectorizer), xmc picks the
//! few right labels out of a universe of up to millions. The crate is organised by stage, and each stage owns both how it trains and how it
//! applies at query time:
//!
//! - [`data`]: the Extreme Classification Repository text format, sparse matrices, the
//!   [`data::FeatureId`] and [`data::LabelId`] newtypes, name files, and a seeded synthetic
//!   generator.
//! - [`eval`]: P@k, nDCG@k, PSP@k, PSnDCG@k, recall@k, coverage@k and expected depth@k, one
//!   implementation for every caller.
//! - [`linear`]: the PPDSparse one-vs-all solver and its liblinear-style reference.
//! - [`cluster`]: balanced spherical 2-means and the λ-weighted split, shared by the label tree
//!   and DEFRAG.
//! - [`defrag`]: DEFRAG feature agglomeration, FIAT imputation and REFRAG reranking: the
//!   feature clustering at training time and the validated view the request path applies.
//! - [`tree`]: label trees: PIFA embeddings, the tree's construction, node classifiers, the
//!   chunk layout of a node's weights, and the early-stopping and beam searches.
//! - [`router`]: the BP instance router: block-wise partitioning of points and labels, the
//!   linear router over the blocks, and one model per block.
//! - [`bundle`]: the memory-mapped model container: header, section table, checksums, atomic write.
//!   It is the only module allowed `unsafe`.
//! - [`rerank`]: the candidate-then-rerank stage shared by REFRAG and the OVA reranker, and the
//!   OVA reranker's training on the search's hard negatives.
//! - [`model`]: the request path: one immutable model over one bundle, validated at open,
//!   answering `predict(query, options)`.
//! - [`train`]: the trainer, composing the stage trainers into one bundle.
//! - [`config`]: the training configuration: defaults, a TOML file's `[train]` table, `--set`.
//! - [`settings`]: the layering behind both train and serve settings (defaults, a file, the
//!   environment, `--set`), and its error that names the key.
//! - [`serve`]: the HTTP server: routes, errors, the swappable model, loading, metrics.
//! - [`text`]: the tf-idf vectorizer, fitted by the trainer, stored in the bundle and applied to
//!   every text query, and JSON Lines text data.
//! - [`seed`]: the seed mixers that turn one seed into many, fixed bit for bit.
//! - [`sweep`]: one model per λ of the label-tree split, with precision, expected depth and
//!   latency side by side (`xmc sweep`).
//! - [`cli`]: the `xmc` subcommands' arguments and what each runs.
//!
//! The binary `xmc` (in `main.rs` and [`cli`]) parses arguments and calls into these modules.

#![warn(missing_docs)]

pub mod bundle;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod data;
pub mod defrag;
pub mod eval;
pub mod linear;
pub mod model;
pub mod rerank;
pub mod router;
pub mod seed;
pub mod serve;
pub mod settings;
pub mod sweep;
pub mod text;
pub mod train;
pub mod tree;

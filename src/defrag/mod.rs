//! DEFRAG feature agglomeration, FIAT imputation and REFRAG reranking (Jalan & Kar, 2019).
//!
//! DEFRAG clusters the d input features into K balanced groups of at most d0 features and sums
//! each group into one super-feature, so every later stage (label tree, classifiers, bundle, request path) works
//! in K dimensions. The clusters also give a block-diagonal pseudo co-occurrence matrix
//! C^F = Σ_k X_{F_k} X_{F_k}ᵀ, which never leaves a cluster. Two things are built from it:
//!
//! - **FIAT** imputes a query as C^F·x. Agglomerated, (Aᵀ C^F x)_k = Σ_{j∈F_k} s_j x_j with
//!   s_j the column sum of C^F's block at j, so in the agglomerated space imputation is one
//!   stored scale per feature ([`train::fiat_scale`]).
//! - **REFRAG** keeps one prototype per label, ξ_l = normalize(Aᵀ C^F X y_l), and mixes the tree's
//!   probability b_l with the affinity a_l = exp(−γ(1 − ⟨x, ξ_l⟩)) as α·log b_l + (1−α)·log a_l.
//!   A model without clusters can have REFRAG too: its prototypes are then over the input
//!   features, normalize(X y_l) cut to its largest entries ([`train::input_prototypes`]).
//!
//! [`train`] builds all of it at training time; [`view`] is the read-only, validated view over
//! the bundle sections that the request path applies. [`ndcg`] is the DEFRAG-N split.

pub mod fiat;
pub mod ndcg;
pub mod train;
pub mod view;

use crate::data::{Dataset, SparseMatrix};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which feature representation DEFRAG clusters, or none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DefragKind {
    /// No agglomeration (the default).
    #[default]
    Off,
    /// DEFRAG-X: each feature is its column over the most voluminous training points.
    X,
    /// DEFRAG-XY: each feature is Σᵢ x_j^i y^i over the most popular labels.
    Xy,
    /// DEFRAG-N: the XY representation cut by the balanced nDCG split (Alg. 3).
    N,
}

impl DefragKind {
    /// Parses a config value.
    pub fn parse(s: &str) -> Option<DefragKind> {
        Some(match s {
            "off" => DefragKind::Off,
            "x" => DefragKind::X,
            "xy" => DefragKind::Xy,
            "n" => DefragKind::N,
            _ => return None,
        })
    }
}

/// Every DEFRAG, FIAT and REFRAG setting of a model. The train keys are flat names
/// (`crate::config::ALIASES`: `d0`, `defrag_points`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DefragParams {
    /// The representation clustered, or off.
    pub kind: DefragKind,
    /// The largest number of features in a cluster (d0), as in the authors' code: the features
    /// are halved until every part holds at most d0 of them, which gives
    /// K = [`n_clusters`]`(d, d0)` ≈ 2^⌈log2(d/d0)⌉ clusters of about d0/2 to d0 features.
    pub d0: usize,
    /// The share ñ/n of most voluminous (largest ‖x‖₁) points that represent features.
    pub points_frac: f32,
    /// The share L̃/L of most popular labels that represent features (XY and N).
    pub labels_frac: f32,
    /// Give a feature that the sampled points and labels leave without a representation one
    /// over all points (and with XY, all labels), rather than letting it tie.
    pub fill: bool,
    /// Average, rather than sum, the features of a cluster (App. A.4).
    pub average: bool,
    /// FIAT imputation by default at prediction (and on the training rows).
    pub fiat: bool,
    /// REFRAG reranking by default at prediction; stores the prototypes (over the clusters, or
    /// over the input features when `kind` is off).
    pub refrag: bool,
    /// Choose α and γ_r on a held-out fold of the training set (when `refrag` is on); off keeps
    /// `alpha` and `gamma_r` as given. Left out of the metadata when default (on).
    #[serde(default, skip_serializing_if = "crate::settings::omit_default")]
    pub search: RefragSearch,
    /// REFRAG's α: the weight of the tree's log-probability.
    pub alpha: f32,
    /// REFRAG's γ_r: the scale of the prototype affinity.
    pub gamma_r: f32,
    /// How many candidates the tree search returns for reranking (at least k).
    pub candidates: usize,
    /// The most entries each label's prototype keeps (its largest), over the clusters with
    /// DEFRAG and over the input features without; 0 keeps them all. Left out of the metadata
    /// when default.
    #[serde(default, skip_serializing_if = "crate::settings::omit_default")]
    pub prototype_entries: PrototypeEntries,
}

/// Whether the trainer chooses REFRAG's α and γ_r on a held-out fold (a type of its own so that
/// its default, on, is also `Default`, and bundles trained before it keep their bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RefragSearch(pub bool);

impl Default for RefragSearch {
    fn default() -> Self {
        RefragSearch(true)
    }
}

/// The most entries a prototype over the input features keeps, 0 for all (a type of its own so
/// that its default, chosen by measurement, is also `Default`, and bundles that keep it are
/// unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrototypeEntries(pub usize);

impl PrototypeEntries {
    /// The default (docs/decisions/0024-refrag-on-plain-models.md).
    pub const DEFAULT: PrototypeEntries = PrototypeEntries(100);
}

impl Default for PrototypeEntries {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl DefragParams {
    /// The defaults: off; when on, d0 = 4, ñ = n (every point), L̃ = 0.05L, the fill on, sums,
    /// α = 0.8. d0 and ñ were chosen on citeulike-t and debian-deps
    /// (docs/decisions/0021-defrag-authors-cluster-count-and-defaults.md).
    pub const DEFAULT: DefragParams = DefragParams {
        kind: DefragKind::Off,
        d0: 4,
        points_frac: 1.0,
        labels_frac: 0.05,
        fill: true,
        average: false,
        fiat: false,
        refrag: false,
        search: RefragSearch(true),
        alpha: 0.8,
        gamma_r: 20.0,
        candidates: 20,
        prototype_entries: PrototypeEntries::DEFAULT,
    };

    /// Whether the model has feature clusters.
    pub fn on(&self) -> bool {
        self.kind != DefragKind::Off
    }

    /// Checks ranges and combinations, naming the key at fault.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.d0 == 0 {
            return Err(("d0", "must be at least 1".into()));
        }
        for (key, v) in [
            ("defrag_points", self.points_frac),
            ("defrag_labels", self.labels_frac),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err((key, format!("must be in (0, 1], got {v}")));
            }
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err((
                "refrag_alpha",
                format!("must be in [0, 1], got {}", self.alpha),
            ));
        }
        if !self.gamma_r.is_finite() || self.gamma_r < 0.0 {
            return Err((
                "refrag_gamma",
                format!("must be finite and >= 0, got {}", self.gamma_r),
            ));
        }
        if self.candidates == 0 {
            return Err(("refrag_candidates", "must be at least 1".into()));
        }
        if !self.on() && self.fiat {
            return Err((
                "fiat",
                "needs `defrag` = x, xy or n: C^F is built from the feature clusters".into(),
            ));
        }
        Ok(())
    }
}

impl Default for DefragParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The number of clusters DEFRAG cuts `d` features into for `d0`: the leaves of the authors'
/// halving tree, where a part of n > d0 features splits into ⌊n/2⌋ and ⌈n/2⌉ and a part of at
/// most d0 features is a leaf. That is 2^⌈log2(d/d0)⌉ unless a part of exactly d0 features
/// stops one level early (d = 17, d0 = 8 gives 3); at least 1, and 0 for no features.
///
/// xmc then cuts the features into that many parts of sizes that differ by at most one, so
/// every cluster still holds at most d0 features (the leaves hold d features in K parts of at
/// most d0 each, so ⌈d/K⌉ ≤ d0).
pub fn n_clusters(d: usize, d0: usize) -> usize {
    if d == 0 {
        return 0;
    }
    let d0 = d0.max(1);
    // Each level of the halving tree holds parts of at most two sizes, ⌊m⌋ and ⌈m⌉, so it is
    // walked as a short list of (size, count) pairs.
    let mut level: Vec<(usize, usize)> = vec![(d, 1)];
    let mut leaves = 0;
    while !level.is_empty() {
        let mut next: Vec<(usize, usize)> = Vec::with_capacity(4);
        for (size, count) in level {
            if size <= d0 {
                leaves += count;
                continue;
            }
            for half in [size / 2, size - size / 2] {
                match next.iter_mut().find(|(s, _)| *s == half) {
                    Some(entry) => entry.1 += count,
                    None => next.push((half, count)),
                }
            }
        }
        level = next;
    }
    leaves
}

/// A copy of `ds` with `round(frac·nnz)` of each point's features erased, chosen uniformly at
/// random (seeded per point from `seed`), as in the paper's FIAT experiment (App. C.2, Fig. 5).
pub fn erase_features(ds: &Dataset, frac: f64, seed: u64) -> Dataset {
    let mut indptr = Vec::with_capacity(ds.n_points() + 1);
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    indptr.push(0usize);
    let mut order: Vec<usize> = Vec::new();
    for i in 0..ds.n_points() {
        let (fi, fv) = ds.feature_row(i);
        let erase = ((fi.len() as f64) * frac).round() as usize;
        order.clear();
        order.extend(0..fi.len());
        let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::derive_seed(seed, i as u64));
        order.shuffle(&mut rng);
        let mut keep: Vec<usize> = order[erase.min(fi.len())..].to_vec();
        keep.sort_unstable();
        for p in keep {
            idx.push(fi[p]);
            val.push(fv[p]);
        }
        indptr.push(idx.len());
    }
    Dataset {
        features: SparseMatrix::new((ds.n_points(), ds.n_features()), indptr, idx, val),
        labels: ds.labels.clone(),
    }
}

/// The balance factor max_k |F_k| / min_k |F_k| (App. C.1), infinite with an empty cluster.
pub fn balance_factor(sizes: &[u32]) -> f64 {
    let max = sizes.iter().copied().max().unwrap_or(0);
    let min = sizes.iter().copied().min().unwrap_or(0);
    if min == 0 {
        f64::INFINITY
    } else {
        f64::from(max) / f64::from(min)
    }
}

/// The normalized entropy −Σ_k p_k ln p_k / ln K with p_k = |F_k|/d: 1 for equal clusters.
///
/// App. C.1 writes the normaliser as ln d, but the entropy of K clusters is at most ln K, so
/// ln K is what makes the stated range [0, 1] hold; one cluster gives 1 by convention.
pub fn normalized_entropy(sizes: &[u32]) -> f64 {
    let d: f64 = sizes.iter().map(|&s| f64::from(s)).sum();
    if sizes.len() <= 1 || d == 0.0 {
        return 1.0;
    }
    let h: f64 = sizes
        .iter()
        .filter(|&&s| s > 0)
        .map(|&s| {
            let p = f64::from(s) / d;
            -p * p.ln()
        })
        .sum();
    h / (sizes.len() as f64).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_and_entropy_of_known_sizes() {
        assert_eq!(balance_factor(&[4, 4, 4]), 1.0);
        assert_eq!(balance_factor(&[8, 7]), 8.0 / 7.0);
        assert!(balance_factor(&[3, 0]).is_infinite());
        assert!((normalized_entropy(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!(normalized_entropy(&[97, 1, 1, 1]) < 0.2);
    }

    #[test]
    fn cluster_count_follows_the_authors_halving_rule() {
        // The authors' Bibtex run: d = 1836, d0 = 8 gives 256 groups of 7 or 8.
        assert_eq!(n_clusters(1836, 8), 256);
        // Powers of two of d/d0 and the cases in between round K up to the next power of two.
        assert_eq!(n_clusters(20_000, 8), 4096);
        assert_eq!(n_clusters(45_268, 8), 8192);
        assert_eq!(n_clusters(1000, 8), 128);
        assert_eq!(n_clusters(1024, 8), 128);
        // 1025 halves to 127 parts of 8 and one of 9 at depth 7, and only the 9 splits again.
        assert_eq!(n_clusters(1025, 8), 129);
        // A part of exactly d0 features stops a level early: 17 → 8 | 9 → 8 | 4, 5.
        assert_eq!(n_clusters(17, 8), 3);
        assert_eq!(n_clusters(8, 8), 1);
        assert_eq!(n_clusters(3, 8), 1);
        assert_eq!(n_clusters(0, 8), 0);
        assert_eq!(n_clusters(5, 1), 5);
        // The count agrees with a direct recursion over the halving tree, and its parts fit.
        fn leaves(n: usize, d0: usize) -> usize {
            if n <= d0 {
                1
            } else {
                leaves(n / 2, d0) + leaves(n - n / 2, d0)
            }
        }
        for d in 1..300 {
            for d0 in [1, 2, 3, 4, 7, 8, 16, 32] {
                let k = n_clusters(d, d0);
                assert_eq!(k, leaves(d, d0), "d = {d}, d0 = {d0}");
                assert!(d.div_ceil(k) <= d0, "d = {d}, d0 = {d0}, K = {k}");
            }
        }
    }

    #[test]
    fn fiat_needs_clusters_and_refrag_does_not() {
        let p = DefragParams {
            refrag: true,
            ..DefragParams::DEFAULT
        };
        assert_eq!(p.validate(), Ok(()));
        let p = DefragParams {
            fiat: true,
            ..DefragParams::DEFAULT
        };
        assert_eq!(p.validate().unwrap_err().0, "fiat");
        let p = DefragParams {
            kind: DefragKind::Xy,
            d0: 0,
            ..DefragParams::DEFAULT
        };
        assert_eq!(p.validate().unwrap_err().0, "d0");
    }
}

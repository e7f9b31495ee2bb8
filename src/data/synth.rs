//! A seeded synthetic data generator with a power-law label distribution.
//!
//! Real XMC data sets are large and few; tests and benchmarks need data of any size whose
//! structure a linear model can learn. The generative model:
//!
//! - label `j` (0-based, most frequent first) is drawn with probability ∝ `1 / (j + 1)^zipf`;
//! - each label has a fixed sparse *profile* of `features_per_label` feature ids, drawn from its
//!   own seeded stream, so profiles need no storage even for millions of labels;
//! - a point draws about `labels_per_point` distinct labels (1 + Poisson), then
//!   `features_per_point` feature draws: with probability `noise` a uniform random feature,
//!   otherwise an entry of one of its labels' profiles (earlier profile entries are likelier);
//! - a feature's value is how often it was drawn, and each row is L2-normalized.
//!
//! Every point takes its own `ChaCha8Rng` seeded from `(seed, point index)`, so generation is
//! parallel and bit-identical whatever the thread count, and a test split drawn from later point
//! indices follows the same model as the training split.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::{Dataset, SparseMatrix, l2_normalize_rows};
use crate::seed::task_seed;

/// Parameters of the synthetic generative model.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SynthParams {
    /// The number of points.
    pub n: usize,
    /// The number of features.
    pub d: usize,
    /// The number of labels.
    pub l: usize,
    /// The exponent of the power law of label frequencies.
    pub zipf: f64,
    /// The mean number of labels per point (at least 1).
    pub labels_per_point: f64,
    /// The size of each label's feature profile.
    pub features_per_label: usize,
    /// The number of feature draws per point (duplicates are summed).
    pub features_per_point: usize,
    /// The probability that a feature draw is uniform noise, in [0, 1].
    pub noise: f64,
    /// The random seed.
    pub seed: u64,
}

impl SynthParams {
    /// The defaults: a small, quickly learnable data set.
    pub const DEFAULT: SynthParams = SynthParams {
        n: 10_000,
        d: 10_000,
        l: 1_000,
        zipf: 1.0,
        labels_per_point: 5.0,
        features_per_label: 20,
        features_per_point: 40,
        noise: 0.2,
        seed: 0,
    };
}

impl Default for SynthParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Generates `params.n` points.
pub fn generate(params: &SynthParams) -> Dataset {
    Generator::new(params).points(0, params.n)
}

/// Generates a training split of `n_train` points and a test split of `n_test` points from the
/// same model (same label frequencies and profiles); `params.n` is ignored.
pub fn generate_split(params: &SynthParams, n_train: usize, n_test: usize) -> (Dataset, Dataset) {
    let g = Generator::new(params);
    (
        g.points(0, n_train),
        g.points(n_train, n_train.saturating_add(n_test)),
    )
}

/// Points generated per parallel task.
const POINTS_PER_TASK: usize = 2048;
/// Stream tags, so point and profile seeds never coincide.
const POINT_TAG: u64 = 0x0070_6f69_6e74;
const PROFILE_TAG: u64 = 0x0070_726f_6669_6c65;

struct Generator<'a> {
    params: &'a SynthParams,
    /// The cumulative label distribution (unnormalized), one entry per label.
    label_cdf: Vec<f64>,
}

/// One task's rows, in CSR pieces.
#[derive(Default)]
struct Rows {
    feat_len: Vec<usize>,
    feat_idx: Vec<u32>,
    feat_val: Vec<f32>,
    lab_len: Vec<usize>,
    lab_idx: Vec<u32>,
}

impl<'a> Generator<'a> {
    fn new(params: &'a SynthParams) -> Self {
        let mut total = 0.0;
        let label_cdf = (0..params.l)
            .map(|j| {
                let w = (j as f64 + 1.0).powf(-params.zipf);
                total += if w.is_finite() && w > 0.0 { w } else { 0.0 };
                total
            })
            .collect();
        Self { params, label_cdf }
    }

    /// Generates points `start..end` (by global point index).
    fn points(&self, start: usize, end: usize) -> Dataset {
        let p = self.params;
        let tasks: Vec<Rows> = (start..end)
            .step_by(POINTS_PER_TASK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|s| {
                let mut rows = Rows::default();
                for i in s..(s + POINTS_PER_TASK).min(end) {
                    self.point(i, &mut rows);
                }
                rows
            })
            .collect();
        let mut f_ptr = vec![0usize];
        let mut l_ptr = vec![0usize];
        let (mut f_idx, mut f_val, mut l_idx) = (Vec::new(), Vec::new(), Vec::new());
        for rows in tasks {
            for len in rows.feat_len {
                f_ptr.push(f_ptr[f_ptr.len() - 1] + len);
            }
            for len in rows.lab_len {
                l_ptr.push(l_ptr[l_ptr.len() - 1] + len);
            }
            f_idx.extend(rows.feat_idx);
            f_val.extend(rows.feat_val);
            l_idx.extend(rows.lab_idx);
        }
        let n = end - start;
        let n_labels = l_idx.len();
        // Each row is built sorted, unique and in range by `point`, so `new` cannot fail.
        let mut features = SparseMatrix::new((n, p.d), f_ptr, f_idx, f_val);
        l2_normalize_rows(&mut features);
        let labels = SparseMatrix::new((n, p.l), l_ptr, l_idx, vec![1.0; n_labels]);
        Dataset { features, labels }
    }

    /// Appends point `i` to `rows`.
    fn point(&self, i: usize, rows: &mut Rows) {
        let p = self.params;
        let mut rng = ChaCha8Rng::seed_from_u64(task_seed(p.seed, POINT_TAG, i as u64));
        let mut labels = self.draw_labels(&mut rng);
        let profiles: Vec<Vec<u32>> = labels.iter().map(|&j| self.profile(j)).collect();
        let mut feats: Vec<u32> = Vec::with_capacity(p.features_per_point);
        if p.d > 0 {
            for _ in 0..p.features_per_point {
                let noise = profiles.is_empty() || rng.random_bool(p.noise.clamp(0.0, 1.0));
                let f = if noise {
                    rng.random_range(0..p.d) as u32
                } else {
                    let prof = &profiles[rng.random_range(0..profiles.len())];
                    // Squaring a uniform skews draws towards the start of the profile.
                    let u: f64 = rng.random();
                    prof[((u * u) * prof.len() as f64) as usize % prof.len()]
                };
                feats.push(f);
            }
        }
        feats.sort_unstable();
        let before = rows.feat_idx.len();
        for f in feats {
            if rows.feat_idx.len() > before && rows.feat_idx[rows.feat_idx.len() - 1] == f {
                let last = rows.feat_val.len() - 1;
                rows.feat_val[last] += 1.0;
            } else {
                rows.feat_idx.push(f);
                rows.feat_val.push(1.0);
            }
        }
        rows.feat_len.push(rows.feat_idx.len() - before);
        labels.sort_unstable();
        rows.lab_len.push(labels.len());
        rows.lab_idx.extend(labels);
    }

    /// Draws 1 + Poisson(`labels_per_point` − 1) distinct labels from the power law.
    fn draw_labels(&self, rng: &mut ChaCha8Rng) -> Vec<u32> {
        let l = self.label_cdf.len();
        let total = self.label_cdf.last().copied().unwrap_or(0.0);
        if l == 0 || total <= 0.0 {
            return Vec::new();
        }
        let want = (1 + poisson(rng, (self.params.labels_per_point - 1.0).max(0.0))).min(l);
        let mut labels: Vec<u32> = Vec::with_capacity(want);
        // A steep power law repeats head labels; the attempt cap keeps this bounded.
        for _ in 0..want.saturating_mul(50) {
            if labels.len() == want {
                break;
            }
            let u = rng.random::<f64>() * total;
            let j = self.label_cdf.partition_point(|&c| c <= u).min(l - 1) as u32;
            if !labels.contains(&j) {
                labels.push(j);
            }
        }
        labels
    }

    /// The feature profile of label `j`: a pure function of `(seed, j)`.
    fn profile(&self, j: u32) -> Vec<u32> {
        let p = self.params;
        if p.d == 0 {
            return Vec::new();
        }
        let mut rng = ChaCha8Rng::seed_from_u64(task_seed(p.seed, PROFILE_TAG, u64::from(j)));
        (0..p.features_per_label.max(1))
            .map(|_| rng.random_range(0..p.d) as u32)
            .collect()
    }
}

/// A Poisson draw by inversion; `mean` is small (a few labels), so the loop is short.
fn poisson(rng: &mut ChaCha8Rng, mean: f64) -> usize {
    if !mean.is_finite() || mean <= 0.0 {
        return 0;
    }
    let mut k = 0usize;
    let mut p = (-mean).exp();
    let mut cdf = p;
    let u: f64 = rng.random();
    while u > cdf && k < 10_000 {
        k += 1;
        p *= mean / k as f64;
        cdf += p;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SynthParams {
        SynthParams {
            n: 1500,
            d: 500,
            l: 200,
            ..SynthParams::DEFAULT
        }
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        let p = small();
        assert_eq!(generate(&p), generate(&p));
        let other = SynthParams { seed: 1, ..small() };
        assert_ne!(generate(&p), generate(&other));
    }

    #[test]
    fn thread_count_does_not_matter() {
        let p = small();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool")
            .install(|| generate(&p));
        assert_eq!(one, generate(&p));
    }

    #[test]
    fn split_matches_generate_on_train_part() {
        let p = small();
        let (train, test) = generate_split(&p, 1500, 500);
        assert_eq!(train, generate(&p));
        assert_eq!(test.n_points(), 500);
        assert_eq!(test.n_features(), 500);
    }

    #[test]
    fn shape_and_label_statistics() {
        let ds = generate(&small());
        assert_eq!(
            (ds.n_points(), ds.n_features(), ds.n_labels()),
            (1500, 500, 200)
        );
        let lpp = ds.labels.nnz() as f64 / 1500.0;
        assert!((lpp - 5.0).abs() < 0.3, "labels per point {lpp}");
        let mut counts = vec![0usize; 200];
        for &j in ds.labels.indices() {
            counts[j as usize] += 1;
        }
        // The power law: label 0 is far more frequent than label 100.
        assert!(
            counts[0] > 10 * counts[100].max(1),
            "{} vs {}",
            counts[0],
            counts[100]
        );
        for i in 0..ds.n_points() {
            let (idx, val) = ds.feature_row(i);
            assert!(idx.windows(2).all(|w| w[0] < w[1]));
            let norm: f32 = val.iter().map(|v| v * v).sum();
            assert!((norm - 1.0).abs() < 1e-4);
        }
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        for p in [
            SynthParams { d: 0, ..small() },
            SynthParams { l: 0, ..small() },
            SynthParams {
                zipf: f64::NAN,
                ..small()
            },
            SynthParams {
                labels_per_point: 1000.0,
                l: 3,
                ..small()
            },
        ] {
            let ds = generate(&SynthParams { n: 50, ..p });
            assert_eq!(ds.n_points(), 50);
        }
    }
}

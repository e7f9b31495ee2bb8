//! Ranking metrics for multi-label predictions, one implementation for every caller.
//!
//! An [`Evaluator`] takes one query at a time (its ranked labels, its true labels and, from a tree
//! model, per-label depths and search statistics) and [`Evaluator::finish`] gives an
//! [`EvalReport`]. The definitions, for a query with true labels T and ranking r₁, r₂, …:
//!
//! - **P@k** = |{r₁..r_k} ∩ T| / k.
//! - **nDCG@k** = DCG@k / IDCG@k, with DCG@k = Σ_{i≤k, rᵢ∈T} 1/log₂(i+1) and IDCG@k the DCG of
//!   min(k, |T|) hits.
//! - **PSP@k** and **PSnDCG@k** weight a hit on label l by 1/p_l, with the propensities of Jain et
//!   al. 2016: p_l = 1 / (1 + C·e^(−A·ln(N_l + B))), C = (ln N − 1)(B + 1)^A, N the number of
//!   training points and N_l those carrying l. Defaults A = 0.55, B = 1.5; the paper uses
//!   A = 0.6, B = 2.6 for Amazon and A = 0.5, B = 0.4 for Wikipedia. They are reported
//!   *normalised* as in the XC repository's tools: the sum over queries divided by the sum of the
//!   best achievable values (the k true labels of largest 1/p_l, ranked first).
//! - **recall@k** = |{r₁..r_k} ∩ T| / |T|.
//! - **coverage@k**: the share of distinct labels that occur in some query's truth which some query
//!   predicts correctly in its top k.
//! - **expected depth@k**: the mean over queries of the depth of the deepest label among the top k
//!   (Baharav et al. 2021).
//!
//! A query without true labels counts in `n` and scores 0 on every precision-type metric, as in
//! the XC repository's convention; the report also gives how many there were.

pub mod predfile;

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The parameters A and B of the Jain et al. propensity model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PropensityParams {
    /// A.
    pub a: f64,
    /// B.
    pub b: f64,
}

impl PropensityParams {
    /// A = 0.55, B = 1.5, the values used for data sets without their own.
    pub const DEFAULT: PropensityParams = PropensityParams { a: 0.55, b: 1.5 };
}

/// p_l for every label, from training counts `counts` over `n_train` points.
pub fn propensities(counts: &[u32], n_train: usize, params: PropensityParams) -> Vec<f64> {
    let n = (n_train.max(1)) as f64;
    let c = (n.ln() - 1.0) * (params.b + 1.0).powf(params.a);
    counts
        .iter()
        .map(|&nl| 1.0 / (1.0 + c * (-params.a * (f64::from(nl) + params.b).ln()).exp()))
        .collect()
}

/// Search statistics of one query, from a tree model.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueryStats {
    /// Node classifiers evaluated.
    pub nodes_evaluated: u32,
    /// Classifiers evaluated (every output of every node scored, the BP router's included).
    pub outputs_evaluated: u32,
    /// Whether the early-stopping bound cut the search short.
    pub early_stopped: bool,
    /// Whether the beam cap dropped a node (the answer may differ from exhaustive search).
    pub beam_capped: bool,
}

/// Accumulates metrics one query at a time.
#[derive(Clone, Debug)]
pub struct Evaluator {
    ks: Vec<usize>,
    inv_prop: Vec<f64>,
    n: usize,
    no_labels: usize,
    p: Vec<f64>,
    ndcg: Vec<f64>,
    recall: Vec<f64>,
    psp: Vec<f64>,
    psp_best: Vec<f64>,
    psndcg: Vec<f64>,
    psndcg_best: Vec<f64>,
    covered: Vec<BTreeSet<u32>>,
    truth_labels: BTreeSet<u32>,
    depth: Vec<f64>,
    depth_n: usize,
    nodes: f64,
    outputs: f64,
    early: usize,
    capped: usize,
    stats_n: usize,
    scratch: Vec<f64>,
}

fn log2_discount(rank0: usize) -> f64 {
    1.0 / ((rank0 + 2) as f64).log2()
}

impl Evaluator {
    /// An evaluator for the cut-offs `ks` (sorted and deduplicated here), with propensities
    /// `propensities[l]` = p_l (empty: PSP is computed with p_l = 1, i.e. equals P).
    pub fn new(ks: &[usize], propensities: &[f64]) -> Self {
        let mut ks: Vec<usize> = ks.iter().copied().filter(|&k| k > 0).collect();
        ks.sort_unstable();
        ks.dedup();
        let m = ks.len();
        Evaluator {
            ks,
            inv_prop: propensities.iter().map(|&p| 1.0 / p.max(1e-12)).collect(),
            n: 0,
            no_labels: 0,
            p: vec![0.0; m],
            ndcg: vec![0.0; m],
            recall: vec![0.0; m],
            psp: vec![0.0; m],
            psp_best: vec![0.0; m],
            psndcg: vec![0.0; m],
            psndcg_best: vec![0.0; m],
            covered: vec![BTreeSet::new(); m],
            truth_labels: BTreeSet::new(),
            depth: vec![0.0; m],
            depth_n: 0,
            nodes: 0.0,
            outputs: 0.0,
            early: 0,
            capped: 0,
            stats_n: 0,
            scratch: Vec::new(),
        }
    }

    fn inv_p(&self, l: u32) -> f64 {
        self.inv_prop.get(l as usize).copied().unwrap_or(1.0)
    }

    /// Adds one query: `ranked` best first (repeats after the first occurrence are ignored),
    /// `truth` its true labels (any order), and optionally each ranked label's depth and the
    /// search statistics.
    pub fn add(
        &mut self,
        ranked: &[u32],
        truth: &[u32],
        depths: Option<&[u32]>,
        stats: Option<QueryStats>,
    ) {
        self.n += 1;
        let mut truth_sorted: Vec<u32> = truth.to_vec();
        truth_sorted.sort_unstable();
        truth_sorted.dedup();
        if truth_sorted.is_empty() {
            self.no_labels += 1;
        }
        self.truth_labels.extend(truth_sorted.iter().copied());
        // The best achievable propensity-scored gains: true labels by 1/p descending.
        self.scratch.clear();
        let gains: Vec<f64> = truth_sorted.iter().map(|&l| self.inv_p(l)).collect();
        self.scratch.extend(gains);
        self.scratch.sort_unstable_by(|a, b| b.total_cmp(a));
        let max_k = self.ks.last().copied().unwrap_or(0);
        let mut seen: Vec<u32> = Vec::with_capacity(max_k);
        let (mut hits, mut dcg, mut ps, mut psdcg) = (0usize, 0.0, 0.0, 0.0);
        let mut rank = 0;
        let mut ki = 0;
        let mut deepest = 0u32;
        for (pos, &l) in ranked.iter().enumerate() {
            if rank >= max_k {
                break;
            }
            if seen.contains(&l) {
                continue;
            }
            seen.push(l);
            if let Some(d) = depths.and_then(|d| d.get(pos)) {
                deepest = deepest.max(*d);
            }
            if truth_sorted.binary_search(&l).is_ok() {
                hits += 1;
                dcg += log2_discount(rank);
                let g = self.inv_p(l);
                ps += g;
                psdcg += g * log2_discount(rank);
                for c in &mut self.covered[ki..] {
                    c.insert(l);
                }
            }
            rank += 1;
            while ki < self.ks.len() && rank == self.ks[ki] {
                self.record(
                    ki,
                    hits,
                    dcg,
                    ps,
                    psdcg,
                    deepest,
                    &truth_sorted,
                    depths.is_some(),
                );
                ki += 1;
            }
        }
        // Rankings shorter than k: the missing positions are misses.
        while ki < self.ks.len() {
            self.record(
                ki,
                hits,
                dcg,
                ps,
                psdcg,
                deepest,
                &truth_sorted,
                depths.is_some(),
            );
            ki += 1;
        }
        if depths.is_some() {
            self.depth_n += 1;
        }
        if let Some(s) = stats {
            self.stats_n += 1;
            self.nodes += f64::from(s.nodes_evaluated);
            self.outputs += f64::from(s.outputs_evaluated);
            self.early += usize::from(s.early_stopped);
            self.capped += usize::from(s.beam_capped);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        ki: usize,
        hits: usize,
        dcg: f64,
        ps: f64,
        psdcg: f64,
        deepest: u32,
        truth: &[u32],
        has_depth: bool,
    ) {
        let k = self.ks[ki];
        let t = truth.len();
        self.p[ki] += hits as f64 / k as f64;
        if t > 0 {
            let idcg: f64 = (0..k.min(t)).map(log2_discount).sum();
            self.ndcg[ki] += dcg / idcg;
            self.recall[ki] += hits as f64 / t as f64;
        }
        self.psp[ki] += ps / k as f64;
        self.psp_best[ki] += self.scratch.iter().take(k).sum::<f64>() / k as f64;
        self.psndcg[ki] += psdcg;
        self.psndcg_best[ki] += self
            .scratch
            .iter()
            .take(k)
            .enumerate()
            .map(|(r, g)| g * log2_discount(r))
            .sum::<f64>();
        if has_depth {
            self.depth[ki] += f64::from(deepest);
        }
    }

    /// The report over every query added.
    pub fn finish(&self) -> EvalReport {
        let n = self.n.max(1) as f64;
        let mut metrics = Map::new();
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        for (ki, &k) in self.ks.iter().enumerate() {
            metrics.insert(format!("p@{k}"), (self.p[ki] / n).into());
            metrics.insert(format!("ndcg@{k}"), (self.ndcg[ki] / n).into());
            metrics.insert(
                format!("psp@{k}"),
                ratio(self.psp[ki], self.psp_best[ki]).into(),
            );
            metrics.insert(
                format!("psndcg@{k}"),
                ratio(self.psndcg[ki], self.psndcg_best[ki]).into(),
            );
            metrics.insert(format!("recall@{k}"), (self.recall[ki] / n).into());
            metrics.insert(
                format!("coverage@{k}"),
                ratio(
                    self.covered[ki].len() as f64,
                    self.truth_labels.len() as f64,
                )
                .into(),
            );
            if self.depth_n > 0 {
                metrics.insert(
                    format!("expected_depth@{k}"),
                    (self.depth[ki] / self.depth_n as f64).into(),
                );
            }
        }
        if self.stats_n > 0 {
            let s = self.stats_n as f64;
            metrics.insert("nodes_evaluated_mean".into(), (self.nodes / s).into());
            metrics.insert("classifier_evals_mean".into(), (self.outputs / s).into());
            metrics.insert("early_stopped_frac".into(), (self.early as f64 / s).into());
            metrics.insert("beam_capped_frac".into(), (self.capped as f64 / s).into());
        }
        metrics.insert("n".into(), self.n.into());
        metrics.insert("n_without_labels".into(), self.no_labels.into());
        EvalReport { metrics }
    }
}

/// The metrics of one evaluation, as a flat map from names like `p@5` to values.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalReport {
    /// Metric name → value.
    pub metrics: Map<String, Value>,
}

impl EvalReport {
    /// One metric, if present.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.get(key).and_then(Value::as_f64)
    }

    /// The flat JSON object (`{"n": .., "p@1": .., ...}`).
    pub fn quality_json(&self) -> Value {
        Value::Object(self.metrics.clone())
    }
}

impl std::fmt::Display for EvalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.metrics {
            match v.as_u64() {
                Some(u) if !k.contains('@') => writeln!(f, "{k:<24} {u}")?,
                _ => writeln!(f, "{k:<24} {:.4}", v.as_f64().unwrap_or(f64::NAN))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn precision_ndcg_recall_by_hand() {
        let mut e = Evaluator::new(&[1, 3], &[]);
        // Query 1: truth {1, 2}, ranking 1, 5, 2 → hits at ranks 1 and 3.
        e.add(&[1, 5, 2], &[2, 1], None, None);
        // Query 2: truth {7}, ranking 3, 7 (only two labels) → hit at rank 2.
        e.add(&[3, 7], &[7], None, None);
        let r = e.finish();
        // P@1 = (1 + 0) / 2; P@3 = (2/3 + 1/3) / 2.
        assert!(close(r.get("p@1").unwrap(), 0.5));
        assert!(close(r.get("p@3").unwrap(), 0.5));
        // nDCG@3: q1 = (1 + 1/log2 4) / (1 + 1/log2 3); q2 = (1/log2 3) / 1.
        let q1 = (1.0 + 0.5) / (1.0 + 1.0 / 3f64.log2());
        let q2 = 1.0 / 3f64.log2();
        assert!(close(r.get("ndcg@3").unwrap(), (q1 + q2) / 2.0));
        // recall@1 = (1/2 + 0) / 2; recall@3 = (1 + 1) / 2.
        assert!(close(r.get("recall@1").unwrap(), 0.25));
        assert!(close(r.get("recall@3").unwrap(), 1.0));
        // coverage@1: labels in truths {1, 2, 7}; correct in a top-1: {1} → 1/3. @3: all → 1.
        assert!(close(r.get("coverage@1").unwrap(), 1.0 / 3.0));
        assert!(close(r.get("coverage@3").unwrap(), 1.0));
        assert_eq!(r.metrics["n"], 2);
    }

    #[test]
    fn propensity_formula_by_hand() {
        // N = 100, A = 0.55, B = 1.5: C = (ln 100 − 1)·2.5^0.55.
        let p = propensities(&[0, 10, 1000], 100, PropensityParams::DEFAULT);
        let c = (100f64.ln() - 1.0) * 2.5f64.powf(0.55);
        for (i, nl) in [0.0f64, 10.0, 1000.0].iter().enumerate() {
            let want = 1.0 / (1.0 + c * (nl + 1.5).powf(-0.55));
            assert!(close(p[i], want), "{} vs {want}", p[i]);
        }
        // Rarer labels have smaller propensities.
        assert!(p[0] < p[1] && p[1] < p[2]);
    }

    #[test]
    fn psp_with_known_propensities() {
        // p = [0.5, 0.25, 1.0] → 1/p = [2, 4, 1].
        let props = [0.5, 0.25, 1.0];
        let mut e = Evaluator::new(&[1, 2], &props);
        // Truth {0, 1}; ranking 0, 2. Top-1 gain 2, best top-1 gain 4 (label 1).
        // Top-2 gain 2 (label 2 is wrong), best top-2 gains 4 + 2 = 6.
        e.add(&[0, 2], &[0, 1], None, None);
        let r = e.finish();
        assert!(close(r.get("psp@1").unwrap(), 2.0 / 4.0));
        assert!(close(r.get("psp@2").unwrap(), (2.0 / 2.0) / (6.0 / 2.0)));
        // PSnDCG@2: 2·1 / (4·1 + 2/log2 3).
        assert!(close(
            r.get("psndcg@2").unwrap(),
            2.0 / (4.0 + 2.0 / 3f64.log2())
        ));
    }

    #[test]
    fn expected_depth_and_search_stats() {
        let mut e = Evaluator::new(&[1, 2], &[]);
        e.add(
            &[1, 2],
            &[1],
            Some(&[3, 5]),
            Some(QueryStats {
                nodes_evaluated: 10,
                outputs_evaluated: 30,
                early_stopped: true,
                beam_capped: true,
            }),
        );
        e.add(
            &[4, 2],
            &[9],
            Some(&[2, 2]),
            Some(QueryStats {
                nodes_evaluated: 20,
                outputs_evaluated: 50,
                early_stopped: false,
                beam_capped: false,
            }),
        );
        let r = e.finish();
        // depth@1 = (3 + 2) / 2; depth@2 = (5 + 2) / 2.
        assert!(close(r.get("expected_depth@1").unwrap(), 2.5));
        assert!(close(r.get("expected_depth@2").unwrap(), 3.5));
        assert!(close(r.get("nodes_evaluated_mean").unwrap(), 15.0));
        assert!(close(r.get("classifier_evals_mean").unwrap(), 40.0));
        assert!(close(r.get("early_stopped_frac").unwrap(), 0.5));
        assert!(close(r.get("beam_capped_frac").unwrap(), 0.5));
    }

    #[test]
    fn queries_without_labels_count_as_misses() {
        let mut e = Evaluator::new(&[1], &[]);
        e.add(&[1], &[1], None, None);
        e.add(&[1], &[], None, None);
        let r = e.finish();
        assert!(close(r.get("p@1").unwrap(), 0.5));
        assert_eq!(r.metrics["n_without_labels"], 1);
    }

    #[test]
    fn repeated_labels_count_once() {
        let mut e = Evaluator::new(&[2], &[]);
        e.add(&[1, 1, 2], &[1, 2], None, None);
        assert!(close(e.finish().get("p@2").unwrap(), 1.0));
    }
}

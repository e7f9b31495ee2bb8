//! The candidate-then-rerank stage of a prediction: which rerankers a request turns on (REFRAG,
//! the OVA reranker, FIAT's imputation), how many candidates the search must propose for them,
//! the rescoring itself, shared by both rerankers through [`crate::rerank::mix`].

use super::{Model, PredictOptions, QueryError, Scratch, scatter, unscatter};
use crate::linear::score_to_log_prob;
use crate::tree::view::SearchLimits;
use std::time::Instant;

/// Which rerankers a prediction applies, with their settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct RerankStage {
    /// REFRAG's (α, γ_r), when on.
    pub(super) refrag: Option<(f32, f32)>,
    /// The OVA reranker's α, when on.
    pub(super) ova: Option<f32>,
}

impl Model {
    /// The rerankers and imputation a request asks for, each defaulting to the model's
    /// training-time setting, or the option the model cannot honour. Returns the stage and
    /// whether FIAT imputes.
    pub(super) fn stage_for(
        &self,
        options: &PredictOptions,
    ) -> Result<(RerankStage, bool), QueryError> {
        let dp = &self.meta.config.defrag;
        let rp = &self.meta.config.rerank;
        // The weights a request may set, in the ranges training accepts for them.
        let unit = |option, value: Option<f32>| match value {
            Some(v) if !(0.0..=1.0).contains(&v) => Err(QueryError::OutOfRange {
                option,
                range: "in [0, 1]",
                value: v,
            }),
            _ => Ok(()),
        };
        unit("rerank_alpha", options.rerank_alpha)?;
        unit("rerank_ova_alpha", options.rerank_ova_alpha)?;
        if let Some(g) = options.rerank_gamma {
            if !g.is_finite() || g < 0.0 {
                return Err(QueryError::OutOfRange {
                    option: "rerank_gamma",
                    range: "finite and at least 0",
                    value: g,
                });
            }
        }
        if let Some(w) = options.impute_weight {
            if !w.is_finite() || w < 0.0 {
                return Err(QueryError::OutOfRange {
                    option: "impute_weight",
                    range: "finite and at least 0",
                    value: w,
                });
            }
        }
        let rerank = options.rerank.unwrap_or(dp.refrag);
        let rerank_ova = options.rerank_ova.unwrap_or(rp.on());
        let impute = options
            .impute
            .unwrap_or(dp.fiat || (self.meta.config.fiat.input && self.meta.config.fiat.impute));
        if rerank && !self.can_rerank() {
            return Err(QueryError::Unavailable {
                option: "rerank",
                stage: "REFRAG prototypes",
            });
        }
        if rerank_ova && !self.can_rerank_ova() {
            return Err(QueryError::Unavailable {
                option: "rerank_ova",
                stage: "OVA reranker",
            });
        }
        if impute && !self.can_impute() {
            return Err(QueryError::Unavailable {
                option: "impute",
                stage: "FIAT scales or C^F",
            });
        }
        let stage = RerankStage {
            refrag: rerank.then(|| {
                (
                    options.rerank_alpha.unwrap_or(dp.alpha),
                    options.rerank_gamma.unwrap_or(dp.gamma_r),
                )
            }),
            ova: rerank_ova.then(|| options.rerank_ova_alpha.unwrap_or(rp.alpha)),
        };
        Ok((stage, impute))
    }

    /// How many candidates the search proposes: the most any reranker that is on asks for,
    /// unless the request says, and never fewer than k.
    pub(super) fn search_k(&self, stage: &RerankStage, options: &PredictOptions) -> usize {
        let dp = &self.meta.config.defrag;
        let rp = &self.meta.config.rerank;
        // The stage's candidates: the most any reranker on asks for, unless the request says.
        let wanted = [
            stage.refrag.map(|_| dp.candidates),
            stage.ova.map(|_| rp.query_candidates),
        ]
        .into_iter()
        .flatten()
        .max();
        match wanted {
            Some(c) => options.k.max(options.candidates.unwrap_or(c)),
            None => options.k,
        }
    }

    /// The search's limits for `stage`: BP's blocks (and, without REFRAG alone, the trees) find
    /// the exact top [`Model::search_k`]; with REFRAG the only reranker, the trees find the exact
    /// top k and take the candidates past them from the leaves that search scored anyway
    /// ([`SearchLimits::keep`]). Returns (BP's limits, the trees' limits).
    pub(super) fn search_limits(
        &self,
        stage: &RerankStage,
        options: &PredictOptions,
        beam: usize,
        deadline: Option<Instant>,
    ) -> (SearchLimits, SearchLimits) {
        let search_k = self.search_k(stage, options);
        let exact = SearchLimits {
            k: search_k,
            keep: 0,
            beam,
            deadline,
        };
        let trees = match (stage.refrag, stage.ova) {
            (Some(_), None) => SearchLimits {
                k: options.k,
                keep: search_k,
                ..exact
            },
            _ => exact,
        };
        (exact, trees)
    }

    /// The candidate-then-rerank stage: every reranker `stage` turns on rescores the merged
    /// candidates in turn, REFRAG then OVA, each through [`crate::rerank::mix`]. Returns the
    /// candidates rescored (per reranker).
    pub(super) fn rerank_stage(&self, stage: &RerankStage, scratch: &mut Scratch) -> u32 {
        let mut reranked = 0u32;
        let n = u32::try_from(scratch.merged.len()).unwrap_or(u32::MAX);
        if let Some((alpha, gamma)) = stage.refrag {
            self.refrag_scores(gamma, scratch);
            crate::rerank::mix(&mut scratch.merged, &scratch.affinity, alpha);
            reranked = reranked.saturating_add(n);
        }
        if let (Some(alpha), Some(ova)) = (stage.ova, &self.ova) {
            let loss = self.meta.loss;
            score_query(scratch, |l, dense| {
                score_to_log_prob(loss, ova.score(l, dense))
            });
            crate::rerank::mix(&mut scratch.merged, &scratch.affinity, alpha);
            reranked = reranked.saturating_add(n);
        }
        reranked
    }

    /// REFRAG's log-score of each merged candidate into `scratch.affinity`:
    /// log a_l = −γ_r(1 − ⟨x, ξ_l⟩). With DEFRAG, the affinity is averaged over the members
    /// (each compares its own agglomerated query, kept by the tree search, with its own
    /// prototype); without, the prepared query meets the prototype over the input features.
    fn refrag_scores(&self, gamma: f32, scratch: &mut Scratch) {
        if let Some(protos) = &self.protos {
            score_query(scratch, |l, dense| -gamma * (1.0 - protos.dot(l, dense)));
            return;
        }
        scratch.affinity.clear();
        scratch.affinity.resize(scratch.merged.len(), 0.0);
        debug_assert_eq!(scratch.kept.len(), self.defrag.len());
        for (view, (qi, qv)) in self.defrag.iter().zip(scratch.kept.iter()) {
            scatter(&mut scratch.dense, qi, qv);
            for (a, c) in scratch.affinity.iter_mut().zip(&scratch.merged) {
                *a += view.affinity(c.label, &scratch.dense);
            }
            unscatter(&mut scratch.dense, qi);
        }
        let inv = 1.0 / self.defrag.len().max(1) as f32;
        for a in scratch.affinity.iter_mut() {
            *a = -gamma * (1.0 - *a * inv);
        }
    }
}

/// Sets `scratch.affinity` to `score(label, dense)` for each merged candidate, with the prepared
/// query held densely in `dense` meanwhile: the input-space rerankers' one pass.
fn score_query(scratch: &mut Scratch, score: impl Fn(u32, &[f32]) -> f32) {
    let Scratch {
        dense,
        q_idx,
        q_val,
        merged,
        affinity,
        ..
    } = scratch;
    scatter(dense, q_idx, q_val);
    affinity.clear();
    affinity.extend(merged.iter().map(|c| score(c.label, dense)));
    unscatter(dense, q_idx);
}

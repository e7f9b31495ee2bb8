//! REFRAG's (α, γ_r) chosen on a held-out fold of the training set: the trainer holds out a
//! seeded tenth of the points, trains the same model on the rest, and scores a small grid of
//! pairs on the fold against the same model without REFRAG. The pair with the highest PSP@5
//! whose P@1 is within [`P1_TOLERANCE`] of the model without REFRAG becomes the model's
//! default; the fold's figures go into the metadata (`meta.refrag`).

use super::{Progress, TrainError, TrainInputs, train_model};
use crate::config::TrainConfig;
use crate::data::Dataset;
use crate::eval::{Evaluator, PropensityParams};
use crate::model::{FoldFigures, GridPoint, Model, PredictOptions, RefragChoice};
use crate::rerank::RerankModel;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// The stream of `seed` that draws the fold.
const FOLD_SEED_STREAM: u64 = 0x004E_F01D;

/// One point in `FOLD_SHARE` is held out.
const FOLD_SHARE: usize = 10;

/// The most P@1 a chosen pair may lose on the fold against the model without REFRAG.
pub const P1_TOLERANCE: f64 = 0.01;

/// The α values of the grid, in order of preference on ties (the tree's score weighted most
/// first).
const GRID_ALPHA: [f32; 5] = [0.95, 0.9, 0.8, 0.65, 0.5];

/// The γ_r values of the grid.
const GRID_GAMMA: [f32; 5] = [2.0, 5.0, 10.0, 20.0, 40.0];

/// The (α, γ_r) pairs scored: [`GRID_ALPHA`] × [`GRID_GAMMA`], leaving out a pair whose
/// κ = γ_r(1 − α)/α an earlier pair already has (the rerank's order depends on κ alone, so such
/// a pair gives the same figures).
pub fn grid() -> Vec<(f32, f32)> {
    let mut pairs: Vec<(f32, f32)> = Vec::new();
    let kappa = |(a, g): (f32, f32)| g * (1.0 - a) / a;
    for a in GRID_ALPHA {
        for g in GRID_GAMMA {
            let k = kappa((a, g));
            if pairs.iter().all(|&p| (kappa(p) - k).abs() > 1e-4 * k) {
                pairs.push((a, g));
            }
        }
    }
    pairs
}

/// The pair of `grid` with the highest PSP@5 among those whose P@1 is at least the baseline's
/// less [`P1_TOLERANCE`] (the first in grid order on ties), or `None` when none is.
pub fn choose(baseline: &FoldFigures, grid: &[GridPoint]) -> Option<usize> {
    let floor = baseline.p1 - P1_TOLERANCE - 1e-12;
    let mut best: Option<usize> = None;
    for (i, g) in grid.iter().enumerate() {
        if g.figures.p1 < floor {
            continue;
        }
        if best.is_none_or(|b| g.figures.psp5 > grid[b].figures.psp5) {
            best = Some(i);
        }
    }
    best
}

/// The held-out fold of `n` points: a seeded, sorted `n / FOLD_SHARE` of them, and the rest
/// (sorted). Empty when `n` is too small for both parts.
fn split(n: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let held = n / FOLD_SHARE;
    if held == 0 {
        return (Vec::new(), Vec::new());
    }
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let (mut fold, mut rest) = (order[..held].to_vec(), order[held..].to_vec());
    fold.sort_unstable();
    rest.sort_unstable();
    (fold, rest)
}

/// Chooses REFRAG's (α, γ_r) for `cfg` on a fold of `ds`, or `None` when `ds` has too few
/// points to hold one out (the configured pair is kept).
pub(super) fn search(
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
) -> Result<Option<RefragChoice>, TrainError> {
    let (fold_rows, rest_rows) = split(
        ds.n_points(),
        crate::seed::derive_seed(cfg.seed, FOLD_SEED_STREAM),
    );
    if fold_rows.is_empty() {
        return Ok(None);
    }
    let fold = super::bp::subset(ds, &fold_rows);
    let rest = super::bp::subset(ds, &rest_rows);
    // The same model on the rest, without the search and without the OVA reranker (whose
    // training searches every point again): only REFRAG is weighed here.
    let mut fold_cfg = cfg.clone();
    fold_cfg.defrag.search = crate::defrag::RefragSearch(false);
    fold_cfg.rerank.model = RerankModel::Off;
    let trained = train_model(&rest, &fold_cfg, TrainInputs::default(), progress)?;
    let bundle = crate::bundle::Bundle::from_bytes(&trained.to_bytes()?)?;
    drop(trained);
    let model =
        Model::from_bundle_structure(bundle).map_err(|e| TrainError::Open(e.to_string()))?;
    let pairs = grid();
    progress.phase(
        "REFRAG weights on the held-out fold",
        pairs.len() as u64 + 1,
    );
    let base = PredictOptions {
        k: 5,
        rerank: Some(false),
        ..PredictOptions::default()
    };
    let baseline = figures(&model, &fold, &base)?;
    progress.step();
    let mut grid = Vec::with_capacity(pairs.len());
    for (alpha, gamma) in pairs {
        let options = PredictOptions {
            rerank: Some(true),
            rerank_alpha: Some(alpha),
            rerank_gamma: Some(gamma),
            ..base
        };
        grid.push(GridPoint {
            alpha,
            gamma,
            figures: figures(&model, &fold, &options)?,
        });
        progress.step();
    }
    let chosen = choose(&baseline, &grid);
    let (alpha, gamma) = chosen.map_or((1.0, cfg.defrag.gamma_r), |i| {
        (grid[i].alpha, grid[i].gamma)
    });
    Ok(Some(RefragChoice {
        alpha,
        gamma,
        within_tolerance: chosen.is_some(),
        train_points: rest_rows.len(),
        fold_points: fold_rows.len(),
        baseline,
        grid,
    }))
}

/// P@1, PSP@5 and coverage@5 of `model` on `fold` with `options` (propensities from the
/// model's own training counts).
fn figures(
    model: &Model,
    fold: &Dataset,
    options: &PredictOptions,
) -> Result<FoldFigures, TrainError> {
    let predictions = crate::model::evaluate::predict_all(model, fold, options)
        .map_err(|(point, source)| TrainError::RefragSearch { point, source })?;
    let props = crate::eval::propensities(
        model.train_label_counts(),
        model.train_points(),
        PropensityParams::DEFAULT,
    );
    let mut evaluator = Evaluator::new(&[1, 5], &props);
    let mut labels = Vec::with_capacity(5);
    for (i, p) in predictions.iter().enumerate() {
        labels.clear();
        labels.extend(p.labels.iter().map(|l| l.0));
        evaluator.add(&labels, fold.label_row(i), None, None);
    }
    let report = evaluator.finish();
    let get = |k: &str| report.get(k).unwrap_or(0.0);
    Ok(FoldFigures {
        p1: get("p@1"),
        psp5: get("psp@5"),
        coverage5: get("coverage@5"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(alpha: f32, p1: f64, psp5: f64) -> GridPoint {
        GridPoint {
            alpha,
            gamma: 10.0,
            figures: FoldFigures {
                p1,
                psp5,
                coverage5: 0.0,
            },
        }
    }

    #[test]
    fn the_grid_has_one_pair_per_kappa() {
        let g = grid();
        assert_eq!(g.len(), 23);
        assert!(g.contains(&(0.8, 20.0)));
        // (0.5, 5) and (0.5, 10) repeat κ = 5 and 10 of (0.8, 20) and (0.8, 40).
        assert!(!g.contains(&(0.5, 5.0)) && !g.contains(&(0.5, 10.0)));
    }

    #[test]
    fn choice_keeps_p1_within_the_tolerance() {
        let base = FoldFigures {
            p1: 0.60,
            psp5: 0.20,
            coverage5: 0.1,
        };
        let grid = [
            point(0.9, 0.605, 0.21),
            point(0.8, 0.595, 0.25),
            point(0.65, 0.585, 0.30),
            point(0.5, 0.595, 0.25),
        ];
        // The best PSP@5 loses 1.5 points of P@1; of the two tied next, the first wins.
        assert_eq!(choose(&base, &grid), Some(1));
        assert_eq!(choose(&base, &grid[2..3]), None);
    }

    #[test]
    fn the_fold_is_seeded_and_a_tenth() {
        let (fold, rest) = split(105, 7);
        assert_eq!((fold.len(), rest.len()), (10, 95));
        assert_eq!(split(105, 7), (fold.clone(), rest.clone()));
        assert_ne!(split(105, 8).0, fold);
        let mut all: Vec<u32> = fold.iter().chain(&rest).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..105).collect::<Vec<u32>>());
        assert!(split(9, 7).0.is_empty());
    }
}

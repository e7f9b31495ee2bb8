//! The OVA reranker's training step: it needs the finished model, whose search over the training
//! points proposes each label's hard negatives, so it composes stages and lives with the trainer.
//! The scorers themselves are trained by [`crate::rerank::train`].

use super::{Progress, TrainError, Trained};
use crate::config::TrainConfig;
use crate::data::Dataset;
use crate::model::{Model, PredictOptions};
use crate::rerank::RerankModel;
use crate::rerank::train::OvaArrays;

/// The OVA reranker of `trained` (whose reranker is not yet set): the model is opened in memory,
/// its search run over the training points, and one scorer trained per label on its hard
/// negatives ([`crate::rerank::train`]).
pub(super) fn train_rerank(
    trained: &mut Trained,
    ds: &Dataset,
    cfg: &TrainConfig,
    progress: &dyn Progress,
) -> Result<OvaArrays, TrainError> {
    // The model without its reranker: its metadata must not ask for the missing sections.
    trained.meta.config.rerank.model = RerankModel::Off;
    let bytes = trained.to_bytes();
    trained.meta.config.rerank.model = cfg.rerank.model;
    let bundle = crate::bundle::Bundle::from_bytes(&bytes?)?;
    let model =
        Model::from_bundle_structure(bundle).map_err(|e| TrainError::Open(e.to_string()))?;
    progress.phase("reranker candidates", 1);
    let cands = candidates(&model, ds, cfg.rerank.candidates)?;
    progress.step();
    drop(model);
    progress.phase("reranker scorers", ds.n_labels() as u64);
    let solver = crate::linear::SolverParams {
        seed: crate::seed::derive_seed(cfg.seed, 0x0FA_5C0E),
        ..cfg.solver
    };
    Ok(crate::rerank::train::train_scorers(
        ds,
        &cands,
        &solver,
        &|| progress.step(),
    )?)
}

/// Each training point's top `c` labels by `model`'s search, every reranker off (so the
/// candidates are the search's alone), as sorted label ids.
fn candidates(model: &Model, ds: &Dataset, c: usize) -> Result<Vec<Vec<u32>>, TrainError> {
    let options = PredictOptions {
        k: c,
        rerank: Some(false),
        rerank_ova: Some(false),
        ..PredictOptions::default()
    };
    let predictions = crate::model::evaluate::predict_all(model, ds, &options)
        .map_err(|(point, source)| TrainError::RerankSearch { point, source })?;
    Ok(predictions
        .into_iter()
        .map(|p| {
            let mut labels: Vec<u32> = p.labels.iter().map(|l| l.0).collect();
            labels.sort_unstable();
            labels
        })
        .collect())
}

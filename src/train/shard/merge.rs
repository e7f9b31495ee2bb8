//! The merge: shards read and checked against their plan, their classifiers laid out as
//! `train` lays them out, and the model assembled from the plan's facts of the data.

use super::super::{Parts, TrainInputs, Trained, assemble, bp, content_hash, tree_stats};
use super::{ColumnRef, Plan, ShardError, ShardFile, file_err, model_error, n_outputs};
use crate::router::{BlockArrays, BpArrays};
use crate::tree::train::lay_out;
use crate::tree::view::TreeArrays;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Merges the shards at `paths` (each read and checked against `plan`) into the model of the
/// plan's data with `inputs`, as `train` would have trained it: what the model holds of the data
/// itself (its shape, statistics and label counts) comes from the plan. `seconds` (e.g. the
/// checks of the data) go into the creation record beside each shard's time.
pub fn merge(
    plan: &Plan,
    inputs: TrainInputs,
    paths: &[PathBuf],
    mut seconds: serde_json::Map<String, serde_json::Value>,
) -> Result<Trained, ShardError> {
    let cfg = &plan.meta.config;
    super::super::check_shape(plan.meta.data.shape, &inputs)?;
    if paths.is_empty() {
        return Err(ShardError::Shards("no shard files given".into()));
    }
    let files = gather(plan, paths, &mut seconds)?;
    let start = Instant::now();
    let columns = place(plan, &files);
    let mut trees = Vec::new();
    let mut stats = Vec::new();
    for (t, (layout, nodes)) in plan.layouts.iter().zip(columns).enumerate() {
        let nodes: Vec<Vec<ColumnRef<'_>>> = nodes
            .into_iter()
            .map(|outs| outs.into_iter().collect::<Option<Vec<_>>>())
            .collect::<Option<_>>()
            .ok_or_else(|| ShardError::Shards(format!("model {t} lacks classifiers")))?;
        let arrays =
            lay_out(layout, &nodes).map_err(|source| model_error(plan.bp.as_ref(), t, source))?;
        stats.push(tree_stats(layout, &arrays));
        trees.push(arrays);
    }
    // With BP the models are the router and the blocks' models, and the statistics the blocks'.
    let bp = bp_trained(plan, &mut trees, &mut stats)?;
    for (k, v) in &plan.meta.seconds {
        seconds.insert(format!("plan_{k}"), (*v).into());
    }
    seconds.insert("merge".into(), start.elapsed().as_secs_f64().into());
    let facts = super::super::DataFacts {
        shape: plan.meta.data.shape,
        label_counts: plan.label_counts.clone(),
        stats: Some(plan.meta.data_stats.clone()),
    };
    let mut trained = assemble(
        facts,
        cfg,
        inputs,
        Parts {
            trees,
            tree_stats: stats,
            bp,
            defrag: Vec::new(),
            prototypes: None,
            fiat: None,
            seconds,
        },
    );
    trained.meta.version = content_hash(&trained)?;
    Ok(trained)
}

/// Every model's classifiers by node and output, borrowed from the shard files; `None` where no
/// file holds one.
type Placed<'a> = Vec<Vec<Vec<Option<ColumnRef<'a>>>>>;

/// The classifiers of `files` (checked by [`gather`]) at their places in the plan's models.
fn place<'a>(plan: &Plan, files: &'a [ShardFile]) -> Placed<'a> {
    let mut columns: Placed<'a> = plan
        .layouts
        .iter()
        .map(|l| {
            (0..l.n_nodes())
                .map(|n| (0..n_outputs(l, n)).map(|_| None).collect())
                .collect()
        })
        .collect();
    for file in files {
        for (c, [t, node, o]) in file.ids.iter().enumerate() {
            columns[*t as usize][*node as usize][*o as usize] = Some(file.column(c));
        }
    }
    columns
}

/// Reads and checks the shards at `paths` against `plan`: each of one plan and one shard count,
/// each index once, none missing, each holding exactly the classifiers the plan gives it.
/// Returns the files, and notes each shard's time in `seconds`.
fn gather(
    plan: &Plan,
    paths: &[PathBuf],
    seconds: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<ShardFile>, ShardError> {
    let mut of = None;
    let mut seen: BTreeMap<usize, &Path> = BTreeMap::new();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let shard = ShardFile::read(path)?;
        let m = &shard.meta;
        if m.plan != plan.meta.id {
            return Err(file_err(
                path,
                format!(
                    "this shard belongs to plan {}, not to plan {} (trained from another \
                     plan or data set)",
                    m.plan, plan.meta.id
                ),
            ));
        }
        match of {
            None => of = Some(m.of),
            Some(n) if n != m.of => {
                return Err(file_err(
                    path,
                    format!(
                        "this is shard {} of {}, but another is of {n}",
                        m.index, m.of
                    ),
                ));
            }
            Some(_) => {}
        }
        if m.index >= m.of {
            return Err(file_err(
                path,
                format!("shard index {} of {}", m.index, m.of),
            ));
        }
        if let Some(other) = seen.insert(m.index, path) {
            return Err(ShardError::Shards(format!(
                "{} and {} are both shard {} of {}",
                other.display(),
                path.display(),
                m.index,
                m.of
            )));
        }
        let expected: Vec<[u32; 3]> = plan
            .shard_units(m.index, m.of)
            .into_iter()
            .flat_map(|u| {
                let u = plan.units[u];
                (u.first..u.first + u.count).map(move |o| [u.tree, u.node, o])
            })
            .collect();
        if shard.ids != expected {
            return Err(file_err(
                path,
                format!(
                    "it does not hold the classifiers the plan gives shard {} of {}",
                    m.index, m.of
                ),
            ));
        }
        seconds.insert(
            format!("shard{}_train", m.index),
            m.seconds.get("train").copied().unwrap_or(0.0).into(),
        );
        files.push(shard);
    }
    let of = of.unwrap_or(0);
    let missing: Vec<String> = (0..of)
        .filter(|i| !seen.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(ShardError::Shards(format!(
            "missing shards of {of}: {} (each index 0..{of} must be given once)",
            missing.join(", ")
        )));
    }
    Ok(files)
}

/// With BP, the merged models as BP's parts: the first is the router, the rest the blocks'
/// models, whose statistics are the ones kept. `None` for a plan without BP.
fn bp_trained(
    plan: &Plan,
    trees: &mut Vec<TreeArrays<Vec<u32>, Vec<f32>>>,
    stats: &mut Vec<serde_json::Value>,
) -> Result<Option<bp::BpTrained>, ShardError> {
    Ok(match (&plan.bp, &plan.meta.bp) {
        (Some(blocks), Some(meta)) => {
            let mut models = std::mem::take(trees).into_iter();
            let router = models
                .next()
                .ok_or_else(|| ShardError::Shards("the plan has no BP router".into()))?;
            stats.remove(0);
            Some(bp::BpTrained {
                arrays: BpArrays {
                    router,
                    blocks: blocks
                        .clusters
                        .iter()
                        .zip(models)
                        .map(|(labels, tree)| BlockArrays {
                            labels: labels.clone(),
                            tree,
                        })
                        .collect(),
                },
                meta: meta.clone(),
                block_stats: stats.clone(),
                seconds: Vec::new(),
            })
        }
        _ => None,
    })
}

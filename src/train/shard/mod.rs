//! Training across processes: a plan computed once, shards trained apart, and a merge that writes
//! the bundle that one `train` call would have written.
//!
//! The plan holds what every shard must agree on: the configuration, the identity of the training
//! data, every ensemble member's label tree (the partition is computed once), and the work cut
//! into units with an estimated cost. A unit is one output of an internal node (a child's
//! classifier), one label of a flat model, or a whole leaf of a tree (its label classifiers share
//! one problem). Shard `i` of `n` trains the units that a longest-first greedy assignment of the
//! costs gives it, so shards get equal estimated work, not equal counts.
//!
//! Every classifier draws its random numbers from its member's seed and its own output number, and
//! sees the same points as in one process (teacher-forced negatives), so a column trained by a
//! shard is the column `train` trains; the merge lays them out in the same order, and the bundle
//! is the same bytes but for the creation record in its metadata.
//!
//! Plans and shards are bundle files (checksummed sections, written atomically), so a shard that
//! fails leaves nothing behind, and a damaged one is refused by its checksums.

use super::{TrainError, TrainInputs, bp};
use crate::bundle::{Bundle, BundleWriter, FormatError, OpenOptions};
use crate::config::{ModelKind, TrainConfig, TreeNegatives};
use crate::data::{Dataset, LabelId};
use crate::linear::PackedRows;
use crate::router::BpMeta;
use crate::tree::layout::TreeLayout;
use crate::tree::train::{
    NodeFeatures, NodePoints, TreeTrainError, point_lists_read, train_node_outputs,
};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

mod cost;
mod file;
mod merge;
mod spill;
pub use file::{ColumnRef, ShardFile};
pub use merge::merge;
use spill::{Spill, SpilledNode};

/// The `format` of a plan file.
pub const PLAN_FORMAT: &str = "xmc-train-plan/1";
/// The `format` of a shard file.
pub const SHARD_FORMAT: &str = "xmc-train-shard/1";

const PLAN: &str = "plan";
const UNITS: &str = "units";
const UNIT_COSTS: &str = "unit_costs";
const SHARD: &str = "shard";
const COLUMNS: &str = "columns";
const BIAS: &str = "bias";
const STARTS: &str = "starts";
const INDICES: &str = "indices";
const VALUES: &str = "values";
const LABEL_COUNTS: &str = "label_counts";
const BP_ASSIGN: &str = "bp.assign";
const BP_CLUSTER_OFFSETS: &str = "bp.cluster_offsets";
const BP_CLUSTER_LABELS: &str = "bp.cluster_labels";
const LAYOUT_PARTS: [&str; 5] = [
    "first_child",
    "n_children",
    "depth",
    "label_offsets",
    "labels",
];

/// Why a plan, a shard or a merge failed.
#[derive(Debug, Error)]
pub enum ShardError {
    /// The configuration cannot be trained in shards.
    #[error("sharded training does not support {0}; train this model with `xmc train`")]
    Unsupported(String),
    /// A plan or shard file cannot be read or is not what it claims.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The data differs from the data the plan was made on.
    #[error("{0}")]
    OtherData(String),
    /// The shard files given to the merge do not make up the plan's shards exactly once.
    #[error("{0}")]
    Shards(String),
    /// Training failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// A file could not be written.
    #[error(transparent)]
    Bundle(#[from] FormatError),
}

fn file_err(path: &Path, reason: impl std::fmt::Display) -> ShardError {
    ShardError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// What identifies the training data: SHA-256 digests of the files and the data's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataId {
    /// The training file's bytes.
    pub train_sha256: String,
    /// The label and feature names files' bytes (`none` for an absent one), in that order.
    pub names_sha256: String,
    /// Points, features and labels.
    pub shape: [usize; 3],
}

impl DataId {
    /// The identity of data of shape `[points, features, labels]` read from `train`, with the
    /// names files `names` (labels, features).
    pub fn of(
        shape: [usize; 3],
        train: &Path,
        names: [Option<&Path>; 2],
    ) -> Result<DataId, ShardError> {
        let mut h = Sha256::new();
        for path in names {
            match path {
                Some(p) => h.update(file_sha256(p)?.as_bytes()),
                None => h.update(b"none"),
            }
            h.update(b"\n");
        }
        Ok(DataId {
            train_sha256: file_sha256(train)?,
            names_sha256: hex(&h.finalize()),
            shape,
        })
    }
}

/// Points, features and labels of `ds`.
pub fn shape_of(ds: &Dataset) -> [usize; 3] {
    [ds.n_points(), ds.n_features(), ds.n_labels()]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file's bytes, read in blocks.
fn file_sha256(path: &Path) -> Result<String, ShardError> {
    let mut file = std::fs::File::open(path).map_err(|e| file_err(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| file_err(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// One piece of work: outputs `first..first + count` of node `node` of tree `tree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The ensemble member.
    pub tree: u32,
    /// The node.
    pub node: u32,
    /// Its first output.
    pub first: u32,
    /// How many outputs.
    pub count: u32,
}

/// The plan's JSON section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanMeta {
    /// [`PLAN_FORMAT`].
    pub format: String,
    /// A digest of the data identity, the configuration, the trees and the units: what every
    /// shard and the merge check.
    pub id: String,
    /// The data the plan was made on.
    pub data: DataId,
    /// The configuration every step trains with.
    pub config: TrainConfig,
    /// Wall-clock seconds of the plan's steps.
    pub seconds: BTreeMap<String, f64>,
    /// The data's statistics, as the model's metadata records them.
    pub data_stats: serde_json::Value,
    /// With BP: what the model's metadata records of the partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bp: Option<BpMeta>,
}

/// What is computed once: the trees and the costed units.
#[derive(Debug)]
pub struct Plan {
    /// The JSON section.
    pub meta: PlanMeta,
    /// Every model's label tree (a flat model's single leaf): the ensemble's members, or with
    /// BP the router (model 0) and then each block's model.
    pub layouts: Vec<TreeLayout>,
    /// The work, in (model, node, output) order.
    pub units: Vec<Unit>,
    /// Each unit's estimated cost.
    pub costs: Vec<u64>,
    /// With BP, the partition.
    pub bp: Option<BpBlocks>,
    /// Each label's count in the data (the model holds them; the merge takes them from here).
    pub label_counts: Vec<u32>,
}

/// Refuses what the shards cannot train exactly as one process does.
fn check_config(cfg: &TrainConfig) -> Result<(), ShardError> {
    let refuse = |what: &str| Err(ShardError::Unsupported(what.to_string()));
    if cfg.defrag.on() || cfg.defrag.refrag {
        return refuse("DEFRAG or REFRAG");
    }
    if cfg.fiat.input {
        return refuse("FIAT in the input space (fiat.input = true)");
    }
    if cfg.rerank.on() {
        return refuse("a reranker (rerank_model)");
    }
    if cfg.negatives == TreeNegatives::Man {
        return refuse("matcher-aware negatives (negatives = man)");
    }
    Ok(())
}

/// BP's partition as a plan holds it: the block of each point, and each block's labels.
#[derive(Clone, Debug)]
pub struct BpBlocks {
    /// The block of each training point.
    pub assign: Vec<u32>,
    /// Per block, its label cluster: sorted global label ids.
    pub clusters: Vec<Vec<u32>>,
}

/// What the leaves of model `m` are: a tree's (one problem per leaf) or a flat model's. With BP,
/// model 0 is the router (flat, one output per block) and model 1 + b block b's model.
fn model_kind(cfg: &TrainConfig, bp: Option<&BpBlocks>, m: usize) -> ModelKind {
    match bp {
        None => cfg.model,
        Some(_) if m == 0 => ModelKind::Flat,
        Some(_) => cfg.block_model,
    }
}

/// The seed of model `m`'s classifiers.
fn model_seed(cfg: &TrainConfig, bp: Option<&BpBlocks>, m: usize) -> u64 {
    match bp {
        None => crate::seed::member_seed(cfg.seed, m as u64),
        Some(_) if m == 0 => bp::router_solver(cfg).seed,
        Some(_) => bp::block_seed(cfg, m - 1),
    }
}

/// The data set model `m` trains on, when it is not `ds` itself: BP's router data or a block's.
fn model_data(ds: &Dataset, bp: Option<&BpBlocks>, m: usize) -> Option<Dataset> {
    let bp = bp?;
    Some(if m == 0 {
        bp::router_dataset(&ds.features, &bp.assign, bp.clusters.len())
    } else {
        bp::block_dataset(ds, &bp::block_rows(&bp.assign, m - 1), &bp.clusters[m - 1])
    })
}

impl Plan {
    /// Computes the plan of training `ds` (rows normalized as the config says) with `cfg`.
    pub fn make(ds: &Dataset, cfg: &TrainConfig, data: DataId) -> Result<Plan, ShardError> {
        check_config(cfg)?;
        super::check_inputs(ds, &TrainInputs::default())?;
        let mut seconds = BTreeMap::new();
        let mut units = Vec::new();
        let mut costs = Vec::new();
        let start = Instant::now();
        let (layouts, bp, bp_meta) = if cfg.bp {
            // The partition and every block's label tree are computed here, once; the router
            // and the blocks' classifiers are the units.
            let planned = bp::plan_bp(ds, cfg, &super::Quiet)?;
            seconds.extend(planned.seconds.iter().cloned());
            let blocks = BpBlocks {
                assign: planned.part.assign,
                clusters: planned.part.clusters,
            };
            let start = Instant::now();
            let q = blocks.clusters.len();
            let mut layouts = Vec::with_capacity(q + 1);
            for m in 0..=q {
                let own = model_data(ds, Some(&blocks), m);
                let d = own.as_ref().unwrap_or(ds);
                let layout = if m == 0 {
                    super::single_leaf(q).map_err(TrainError::Layout)?
                } else {
                    bp::block_layout(d, cfg, bp::block_seed(cfg, m - 1))
                        .map_err(|e| TrainError::Bp(format!("block {}: {e}", m - 1)))?
                };
                let kind = model_kind(cfg, Some(&blocks), m);
                cost::cost_units(m, &layout, d, kind, &mut units, &mut costs);
                layouts.push(layout);
            }
            seconds.insert("blocks".to_string(), start.elapsed().as_secs_f64());
            (layouts, Some(blocks), Some(planned.meta))
        } else {
            let mut secs = serde_json::Map::new();
            let (_, members) = super::partition_members(ds, cfg, &super::Quiet, &mut secs)?;
            let layouts: Vec<TreeLayout> = members.into_iter().map(|m| m.layout).collect();
            seconds.insert("partition".to_string(), start.elapsed().as_secs_f64());
            let start = Instant::now();
            for (m, layout) in layouts.iter().enumerate() {
                cost::cost_units(m, layout, ds, cfg.model, &mut units, &mut costs);
            }
            seconds.insert("costs".to_string(), start.elapsed().as_secs_f64());
            (layouts, None, None)
        };
        let facts = super::DataFacts::of(ds, true);
        let mut meta = PlanMeta {
            format: PLAN_FORMAT.to_string(),
            id: String::new(),
            data,
            config: cfg.clone(),
            seconds,
            data_stats: facts.stats.unwrap_or_default(),
            bp: bp_meta,
        };
        let mut plan = Plan {
            meta: meta.clone(),
            layouts,
            units,
            costs,
            bp,
            label_counts: facts.label_counts,
        };
        meta.id = plan.digest()?;
        plan.meta = meta;
        Ok(plan)
    }

    /// The plan's id: a digest of its data identity, configuration, trees and units.
    fn digest(&self) -> Result<String, ShardError> {
        let mut h = Sha256::new();
        // Plain data structures: serializing them cannot fail.
        h.update(serde_json::to_vec(&self.meta.data).unwrap_or_default());
        h.update(serde_json::to_vec(&self.meta.config).unwrap_or_default());
        h.update(serde_json::to_vec(&self.meta.data_stats).unwrap_or_default());
        h.update(serde_json::to_vec(&self.meta.bp).unwrap_or_default());
        let units = self.unit_array();
        let mut w = BundleWriter::new();
        w.add_u32(UNITS, &units)?;
        w.add_u64(UNIT_COSTS, &self.costs)?;
        let parts = self.layout_arrays();
        add_layouts(&mut w, &parts)?;
        h.update(w.to_bytes()?);
        Ok(hex(&h.finalize()[..16]))
    }

    fn unit_array(&self) -> Vec<u32> {
        self.units
            .iter()
            .flat_map(|u| [u.tree, u.node, u.first, u.count])
            .collect()
    }

    /// The models' layouts and, with BP, the partition, as named arrays.
    fn layout_arrays(&self) -> Vec<(String, Vec<u32>)> {
        let mut out = Vec::new();
        for (t, l) in self.layouts.iter().enumerate() {
            let labels: Vec<u32> = l.leaf_labels().iter().map(|l| l.0).collect();
            let arrays = [
                l.first_child_array().to_vec(),
                l.n_children_array().to_vec(),
                l.depth_array().to_vec(),
                l.label_offsets_array().to_vec(),
                labels,
            ];
            for (part, a) in LAYOUT_PARTS.iter().zip(arrays) {
                out.push((format!("tree{t}.{part}"), a));
            }
        }
        out.push((LABEL_COUNTS.to_string(), self.label_counts.clone()));
        if let Some(bp) = &self.bp {
            let mut offsets = vec![0u32];
            for c in &bp.clusters {
                offsets.push(offsets[offsets.len() - 1] + c.len() as u32);
            }
            out.push((BP_ASSIGN.to_string(), bp.assign.clone()));
            out.push((BP_CLUSTER_OFFSETS.to_string(), offsets));
            out.push((BP_CLUSTER_LABELS.to_string(), bp.clusters.concat()));
        }
        out
    }

    /// Writes the plan atomically to `path`.
    pub fn write(&self, path: &Path) -> Result<u64, ShardError> {
        let units = self.unit_array();
        let parts = self.layout_arrays();
        let mut w = BundleWriter::new();
        w.add_json(PLAN, &self.meta)?;
        w.add_u32(UNITS, &units)?;
        w.add_u64(UNIT_COSTS, &self.costs)?;
        add_layouts(&mut w, &parts)?;
        Ok(w.write_atomic(path)?)
    }

    /// Reads and checks a plan file.
    pub fn read(path: &Path) -> Result<Plan, ShardError> {
        let bad = |reason: String| file_err(path, format!("not a usable plan file: {reason}"));
        let b = open_verified(path).map_err(|e| bad(e.to_string()))?;
        let meta: PlanMeta = b.json(PLAN).map_err(|e| bad(e.to_string()))?;
        if meta.format != PLAN_FORMAT {
            return Err(bad(format!(
                "format {:?}, expected {PLAN_FORMAT:?}",
                meta.format
            )));
        }
        let [n_points, _, n_labels] = meta.data.shape;
        let get = |name: &str| -> Result<Vec<u32>, ShardError> {
            Ok(b.u32s(name)
                .map_err(|e| bad(e.to_string()))?
                .as_slice()
                .to_vec())
        };
        let bp = match &meta.bp {
            None => None,
            Some(m) => Some(
                read_bp_blocks(
                    get(BP_ASSIGN)?,
                    &get(BP_CLUSTER_OFFSETS)?,
                    &get(BP_CLUSTER_LABELS)?,
                    [n_points, m.q, n_labels],
                )
                .map_err(bad)?,
            ),
        };
        let label_counts = get(LABEL_COUNTS)?;
        if label_counts.len() != n_labels {
            return Err(bad(format!(
                "{} label counts for {n_labels} labels",
                label_counts.len()
            )));
        }
        let n_models = bp
            .as_ref()
            .map_or(meta.config.trees, |b| 1 + b.clusters.len());
        let mut layouts = Vec::new();
        for t in 0..n_models {
            let get = |part: &str| get(&format!("tree{t}.{part}"));
            let n_labels = match &bp {
                None => n_labels,
                Some(b) if t == 0 => b.clusters.len(),
                Some(b) => b.clusters[t - 1].len(),
            };
            let layout = TreeLayout::from_parts(
                get("first_child")?,
                get("n_children")?,
                get("depth")?,
                get("label_offsets")?,
                get("labels")?.into_iter().map(LabelId).collect(),
                n_labels,
            )
            .map_err(|e| bad(format!("tree {t}: {e}")))?;
            layouts.push(layout);
        }
        let raw = b.u32s(UNITS).map_err(|e| bad(e.to_string()))?;
        let costs = b
            .u64s(UNIT_COSTS)
            .map_err(|e| bad(e.to_string()))?
            .as_slice()
            .to_vec();
        let raw = raw.as_slice();
        if raw.len() != 4 * costs.len() {
            return Err(bad("the unit and cost counts differ".into()));
        }
        let units: Vec<Unit> = raw
            .chunks_exact(4)
            .map(|u| Unit {
                tree: u[0],
                node: u[1],
                first: u[2],
                count: u[3],
            })
            .collect();
        let plan = Plan {
            meta,
            layouts,
            units,
            costs,
            bp,
            label_counts,
        };
        plan.check_units().map_err(bad)?;
        if plan.digest()? != plan.meta.id {
            return Err(bad("its content does not match its id".into()));
        }
        Ok(plan)
    }

    /// Checks that the units cover every output of every node exactly once, in order.
    fn check_units(&self) -> Result<(), String> {
        let mut next = 0usize;
        for (t, l) in self.layouts.iter().enumerate() {
            for node in 0..l.n_nodes() {
                let mut out = 0u32;
                while out < n_outputs(l, node) {
                    let u = self.units.get(next).ok_or("too few units")?;
                    if (u.tree as usize, u.node as usize, u.first) != (t, node, out) || u.count == 0
                    {
                        return Err(format!("unit {next} is not the next piece of work"));
                    }
                    out = out.saturating_add(u.count);
                    next += 1;
                }
                if out != n_outputs(l, node) {
                    return Err(format!("the units of tree {t} node {node} overrun it"));
                }
            }
        }
        if next != self.units.len() {
            return Err("more units than work".into());
        }
        Ok(())
    }

    /// The units of shard `index` of `of`: the longest-first greedy assignment of the costs to
    /// the least loaded shard (ties to the lower unit and the lower shard), in unit order.
    pub fn shard_units(&self, index: usize, of: usize) -> Vec<usize> {
        let owner = cost::assign(&self.costs, of);
        (0..self.units.len())
            .filter(|&u| owner[u] == index)
            .collect()
    }

    /// Each shard's summed estimated cost.
    pub fn shard_costs(&self, of: usize) -> Vec<u64> {
        let mut loads = vec![0u64; of];
        for (u, s) in cost::assign(&self.costs, of).into_iter().enumerate() {
            loads[s] += self.costs[u];
        }
        loads
    }

    /// Checks that `ds` and its identity are those the plan was made on.
    pub fn check_data(&self, data: &DataId, with_names: bool) -> Result<(), ShardError> {
        let p = &self.meta.data;
        if p.train_sha256 != data.train_sha256 || p.shape != data.shape {
            return Err(ShardError::OtherData(format!(
                "the training data is not the data plan {} was made on (its SHA-256 is {}, the \
                 plan's {})",
                self.meta.id, data.train_sha256, p.train_sha256
            )));
        }
        if with_names && p.names_sha256 != data.names_sha256 {
            return Err(ShardError::OtherData(format!(
                "the label or feature names are not those plan {} was made with",
                self.meta.id
            )));
        }
        Ok(())
    }
}

/// BP's partition from a plan's arrays, checked against `[points, blocks, labels]`.
fn read_bp_blocks(
    assign: Vec<u32>,
    offsets: &[u32],
    labels: &[u32],
    [n_points, q, n_labels]: [usize; 3],
) -> Result<BpBlocks, String> {
    if assign.len() != n_points || assign.iter().any(|&b| b as usize >= q) {
        return Err(format!(
            "its BP partition does not assign {n_points} points to {q} blocks"
        ));
    }
    if offsets.len() != q + 1
        || offsets.first() != Some(&0)
        || offsets.windows(2).any(|w| w[0] > w[1])
        || offsets[q] as usize != labels.len()
    {
        return Err("its BP label clusters do not fit together".into());
    }
    let clusters: Vec<Vec<u32>> = offsets
        .windows(2)
        .map(|w| labels[w[0] as usize..w[1] as usize].to_vec())
        .collect();
    if clusters.iter().any(|c| {
        c.windows(2).any(|w| w[0] >= w[1]) || c.last().is_some_and(|&l| l as usize >= n_labels)
    }) {
        return Err("a BP label cluster is not a sorted set of the data's labels".into());
    }
    Ok(BpBlocks { assign, clusters })
}

fn add_layouts<'a>(
    w: &mut BundleWriter<'a>,
    parts: &'a [(String, Vec<u32>)],
) -> Result<(), FormatError> {
    for (name, a) in parts {
        w.add_u32(name, a)?;
    }
    Ok(())
}

fn open_verified(path: &Path) -> Result<Bundle, FormatError> {
    Bundle::open(
        path,
        &OpenOptions {
            verify_checksums: true,
            prefault: false,
            yield_between_steps: false,
        },
    )
}

/// The number of classifiers of `node`: one per child, or one per label of a leaf.
fn n_outputs(layout: &TreeLayout, node: usize) -> u32 {
    if layout.is_leaf(node) {
        layout.labels_of(node).len() as u32
    } else {
        layout.children(node).len() as u32
    }
}

/// The trainer's error for model `t`'s classifiers: a tree of the ensemble, BP's router or
/// one of its blocks.
fn model_error(bp: Option<&BpBlocks>, t: usize, source: TreeTrainError) -> TrainError {
    match bp {
        None => TrainError::Tree { tree: t, source },
        Some(_) if t == 0 => TrainError::Bp(format!("router: {source}")),
        Some(_) => TrainError::Bp(format!("block {}: {source}", t - 1)),
    }
}

/// A shard file's JSON section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShardMeta {
    /// [`SHARD_FORMAT`].
    pub format: String,
    /// The id of the plan it was trained from.
    pub plan: String,
    /// Its index, below `of`.
    pub index: usize,
    /// The number of shards.
    pub of: usize,
    /// Units and classifiers trained.
    pub units: usize,
    /// Classifiers trained.
    pub columns: usize,
    /// The shard's estimated cost, and the mean over all shards.
    pub cost: u64,
    /// The mean estimated cost of the plan's shards.
    pub mean_cost: f64,
    /// Wall-clock seconds: `read` (data and plan), `train`.
    pub seconds: BTreeMap<String, f64>,
}

/// A trained shard: its classifiers, each with its (tree, node, output). Their weights wait in
/// a spill file until the shard is written.
pub struct Shard {
    /// The JSON section.
    pub meta: ShardMeta,
    /// Per classifier, (tree, node, output).
    pub ids: Vec<[u32; 3]>,
    /// The classifiers of each trained node, in `ids` order.
    nodes: Vec<SpilledNode>,
    spill: Spill,
}

impl Shard {
    /// Trains shard `index` of `of` of `plan` on `ds` (rows normalized as the plan's config says),
    /// which it takes: without BP its features are packed once, and the problems of nodes over
    /// many of the points borrow those rows instead of copying them. Each node's weights go to
    /// an unlinked spill file in `spill_dir` as soon as it is trained.
    pub fn train(
        plan: &Plan,
        ds: Dataset,
        index: usize,
        of: usize,
        spill_dir: &Path,
    ) -> Result<Shard, ShardError> {
        if of == 0 || index >= of {
            return Err(ShardError::Shards(format!(
                "shard index {index} is not below the shard count {of}"
            )));
        }
        let start = Instant::now();
        let cfg = &plan.meta.config;
        let mine = plan.shard_units(index, of);
        // The shard's units grouped by (tree, node): one problem per node.
        let mut groups: Vec<((usize, usize), Vec<u32>)> = Vec::new();
        for &u in &mine {
            let unit = plan.units[u];
            let key = (unit.tree as usize, unit.node as usize);
            let outs = unit.first..unit.first + unit.count;
            match groups.last_mut() {
                Some((k, v)) if *k == key => v.extend(outs),
                _ => groups.push((key, outs.collect())),
            }
        }
        // One model at a time: its data set (BP's router or block data), the points reaching
        // each of its nodes, then its nodes' problems in parallel.
        let bp = plan.bp.as_ref();
        let (ds, store) = match bp {
            Some(_) => (ds, None),
            None => {
                let Dataset { features, labels } = ds;
                let shape = (features.rows(), features.cols());
                let store = PackedRows::of(features).map_err(|e| {
                    ShardError::Train(TrainError::Data(format!("the features: {e}")))
                })?;
                let features = crate::data::SparseMatrix::zero(shape);
                (Dataset { features, labels }, Some(store))
            }
        };
        let spill = Spill::new_in(spill_dir)
            .map_err(|e| file_err(spill_dir, format!("cannot make a spill file: {e}")))?;
        let spill_err = |e: std::io::Error| file_err(spill_dir, format!("the spill file: {e}"));
        let mut ids = Vec::new();
        let mut nodes = Vec::new();
        for model in groups.chunk_by(|a, b| a.0.0 == b.0.0) {
            let t = model[0].0.0;
            let own = model_data(&ds, bp, t);
            let d = own.as_ref().unwrap_or(&ds);
            let layout = &plan.layouts[t];
            // Only the point lists this shard's nodes train on.
            let read = point_lists_read(layout, model.iter().map(|&((_, node), _)| node));
            let jobs = node_jobs(layout, model, layout.points_per_node_of(d, Some(&read)));
            let solver = crate::linear::SolverParams {
                seed: model_seed(cfg, bp, t),
                ..cfg.solver
            };
            let trained: Vec<SpilledNode> = jobs
                .into_par_iter()
                .map(|job| {
                    let features = match &store {
                        Some(store) => NodeFeatures::Packed(store),
                        None => NodeFeatures::Csr(&d.features),
                    };
                    let children: Vec<&[u32]> = job.children.iter().map(|c| &c[..]).collect();
                    let points = NodePoints {
                        rows: &job.rows,
                        children: &children,
                    };
                    let columns = train_node_outputs(
                        &d.labels,
                        features,
                        layout,
                        &solver,
                        job.node,
                        job.outputs,
                        points,
                    )
                    .map_err(|source| model_error(bp, t, source))?;
                    spill.put(columns).map_err(spill_err)
                })
                .collect::<Result<_, _>>()?;
            for ((t, node), outs) in model {
                ids.extend(outs.iter().map(|&o| [*t as u32, *node as u32, o]));
            }
            nodes.extend(trained);
        }
        let loads = plan.shard_costs(of);
        let meta = ShardMeta {
            format: SHARD_FORMAT.to_string(),
            plan: plan.meta.id.clone(),
            index,
            of,
            units: mine.len(),
            columns: ids.len(),
            cost: loads[index],
            mean_cost: loads.iter().sum::<u64>() as f64 / of as f64,
            seconds: [("train".to_string(), start.elapsed().as_secs_f64())]
                .into_iter()
                .collect(),
        };
        Ok(Shard {
            meta,
            ids,
            nodes,
            spill,
        })
    }

    /// Writes the shard atomically to `path`, its weights read back from the spill: a failed
    /// write leaves no file.
    pub fn write(&self, path: &Path) -> Result<u64, ShardError> {
        let ids: Vec<u32> = self.ids.iter().flatten().copied().collect();
        let bias: Vec<f32> = self
            .nodes
            .iter()
            .flat_map(|n| n.bias.iter().copied())
            .collect();
        let mut starts = vec![0u64];
        for &len in self.nodes.iter().flat_map(|n| &n.lens) {
            starts.push(starts[starts.len() - 1] + len);
        }
        let (indices, values) = self
            .spill
            .read(&self.nodes)
            .map_err(|e| file_err(path, format!("reading back the spill file: {e}")))?;
        let mut w = BundleWriter::new();
        w.add_json(SHARD, &self.meta)?;
        w.add_u32(COLUMNS, &ids)?;
        w.add_f32(BIAS, &bias)?;
        w.add_u64(STARTS, &starts)?;
        w.add_u32(INDICES, &indices)?;
        w.add_f32(VALUES, &values)?;
        Ok(w.write_atomic(path)?)
    }
}

/// One node of a shard: the outputs it trains, and its training points and its children's.
/// Each point list is shared by the nodes that read it and goes when the last of them is done,
/// so a shard does not hold the lists of the nodes it has trained.
struct NodeJob<'g> {
    node: usize,
    outputs: &'g [u32],
    rows: Arc<[u32]>,
    children: Vec<Arc<[u32]>>,
}

/// The jobs of one model's nodes `model` ((model, node), outputs), from the point lists `tfn`.
fn node_jobs<'g>(
    layout: &TreeLayout,
    model: &'g [((usize, usize), Vec<u32>)],
    tfn: Vec<Vec<u32>>,
) -> Vec<NodeJob<'g>> {
    let lists: Vec<Arc<[u32]>> = tfn.into_iter().map(Arc::from).collect();
    model
        .iter()
        .map(|((_, node), outputs)| NodeJob {
            node: *node,
            outputs,
            rows: lists[*node].clone(),
            // A leaf has no children.
            children: layout.children(*node).map(|c| lists[c].clone()).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests;

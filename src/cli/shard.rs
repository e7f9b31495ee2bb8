//! `xmc train plan|shard|merge`: training one model across processes or machines.
//!
//! `plan` computes once what every shard shares (the label trees, the costed work) and writes a
//! plan file; `shard` trains one share of the classifiers, on any machine holding the plan and
//! the data; `merge` checks the shards against the plan and writes the bundle `xmc train` would
//! have written. [`crate::train::shard`] has the details.

use super::train::{TrainArgs, data_format, init_threads, load_data, names_beside};
use crate::config::TrainConfig;
use crate::data::{self, Dataset};
use crate::text::jsonl::DataFormat;
use crate::train::TrainInputs;
use crate::train::shard::{DataId, Plan, Shard, merge, shape_of};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `xmc train`: one process, or one of the steps of training in shards.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TrainCommand {
    /// A step of training across processes (plan, shard, merge); none trains here.
    #[command(subcommand)]
    pub step: Option<Step>,
    /// The arguments of training in this process.
    #[command(flatten)]
    pub args: Option<TrainArgs>,
}

/// Runs `xmc train` or one of its steps.
pub fn run_command(cmd: TrainCommand) -> anyhow::Result<()> {
    match (cmd.step, cmd.args) {
        (Some(step), _) => run(step),
        (None, Some(args)) => super::train::run(args),
        (None, None) => anyhow::bail!(
            "xmc train needs --train DATA and --out MODEL, or one of its steps: plan, shard, merge \
             (see xmc train --help)"
        ),
    }
}

/// The steps of training in shards.
#[derive(Debug, Subcommand)]
pub enum Step {
    /// Computes what every shard shares (the label trees and the costed work) and writes a plan.
    Plan(PlanArgs),
    /// Trains shard INDEX of OF of a plan and writes the shard file.
    Shard(ShardArgs),
    /// Checks the shards against the plan and writes the model's bundle.
    Merge(MergeArgs),
}

/// The training data, as every step reads it.
#[derive(Debug, Args)]
pub struct DataArgs {
    /// The training data in the XC format, plain or gzip: the same file at every step.
    #[arg(long)]
    pub train: PathBuf,
    /// Label names, one per line; default: `labels.txt[.gz]` beside the training file, if present.
    #[arg(long)]
    pub label_names: Option<PathBuf>,
    /// Feature names, one per line; default: `features.txt[.gz]` beside the training file, if
    /// present.
    #[arg(long)]
    pub feature_names: Option<PathBuf>,
}

/// Arguments of `xmc train plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The TOML config file (its `[train]` table).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The training data.
    #[command(flatten)]
    pub data: DataArgs,
    /// Overrides a config key, e.g. `--set model=flat`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Where to write the plan.
    #[arg(long)]
    pub out: PathBuf,
    /// Also print the estimated cost of each of this many shards.
    #[arg(long)]
    pub shards: Option<usize>,
}

/// Arguments of `xmc train shard`.
#[derive(Debug, Args)]
pub struct ShardArgs {
    /// The plan file.
    #[arg(long)]
    pub plan: PathBuf,
    /// The training data the plan was made on.
    #[command(flatten)]
    pub data: DataArgs,
    /// This shard's index, below `--of`; default: the `JOB_COMPLETION_INDEX` environment
    /// variable (a Kubernetes Indexed Job sets it).
    #[arg(long)]
    pub index: Option<usize>,
    /// The number of shards.
    #[arg(long)]
    pub of: usize,
    /// Where to write the shard; `{index}` in the path is replaced by the index.
    #[arg(long)]
    pub out: String,
}

/// Arguments of `xmc train merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The plan file.
    #[arg(long)]
    pub plan: PathBuf,
    /// The training data the plan was made on.
    #[command(flatten)]
    pub data: DataArgs,
    /// Every shard file of the plan, once each.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Where to write the bundle.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs one step.
pub fn run(step: Step) -> anyhow::Result<()> {
    match step {
        Step::Plan(args) => plan(args),
        Step::Shard(args) => shard(args),
        Step::Merge(args) => merge_shards(args),
    }
}

/// Reads XC training data (refusing JSON Lines) with its rows normalized as the config says.
fn read_xc(train: &Path, normalize: bool) -> anyhow::Result<Dataset> {
    if data_format(train, None)? == DataFormat::Jsonl {
        anyhow::bail!(
            "{}: sharded training reads XC data; train from JSON Lines with `xmc train`, or \
             vectorize it first with `xmc data vectorize`",
            train.display()
        );
    }
    load_data(train, normalize)
}

/// The names files of the data: given, or beside the training file.
fn names_paths(d: &DataArgs) -> [Option<PathBuf>; 2] {
    [
        d.label_names
            .clone()
            .or_else(|| names_beside(&d.train, "labels")),
        d.feature_names
            .clone()
            .or_else(|| names_beside(&d.train, "features")),
    ]
}

fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let cfg = TrainConfig::load(args.config.as_deref(), &args.set)?;
    init_threads(&cfg);
    let start = Instant::now();
    let ds = read_xc(&args.data.train, cfg.normalize)?;
    let names = names_paths(&args.data);
    let id = DataId::of(
        shape_of(&ds),
        &args.data.train,
        [names[0].as_deref(), names[1].as_deref()],
    )?;
    let read_s = start.elapsed().as_secs_f64();
    let mut plan = Plan::make(&ds, &cfg, id)?;
    plan.meta.seconds.insert("read".into(), read_s);
    plan.write(&args.out)?;
    eprintln!(
        "wrote plan {} to {}: {} trees, {} units of work, in {:.2} s",
        plan.meta.id,
        args.out.display(),
        plan.layouts.len(),
        plan.units.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(n) = args.shards.filter(|&n| n > 0) {
        let costs = plan.shard_costs(n);
        let mean = costs.iter().sum::<u64>() as f64 / n as f64;
        let max = costs.iter().copied().max().unwrap_or(0) as f64;
        eprintln!(
            "estimated cost of {n} shards: {costs:?} (largest / mean {:.3})",
            max / mean.max(1.0)
        );
    }
    Ok(())
}

/// This shard's index: `--index`, or else `JOB_COMPLETION_INDEX`.
fn shard_index(given: Option<usize>) -> anyhow::Result<usize> {
    if let Some(i) = given {
        return Ok(i);
    }
    let raw = std::env::var("JOB_COMPLETION_INDEX")
        .context("give --index, or run where JOB_COMPLETION_INDEX is set (an Indexed Job)")?;
    raw.trim()
        .parse()
        .with_context(|| format!("JOB_COMPLETION_INDEX = {raw:?} is not a shard index"))
}

/// Allocations of at least this many bytes come from maps of their own in a shard process
/// (see [`crate::serve::heap::map_allocations_from`]): a node's problem arrays go back to the
/// system when the node is done, rather than staying in the heap beside the next node's.
const SHARD_MAP_FROM: usize = 4 << 20;

fn shard(args: ShardArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    crate::serve::heap::map_allocations_from(SHARD_MAP_FROM);
    let index = shard_index(args.index)?;
    let plan = Plan::read(&args.plan)?;
    init_threads(&plan.meta.config);
    let ds = read_xc(&args.data.train, plan.meta.config.normalize)?;
    plan.check_data(
        &DataId::of(shape_of(&ds), &args.data.train, [None, None])?,
        false,
    )?;
    let read_s = start.elapsed().as_secs_f64();
    // The shard takes the data, and its memory goes before the file is written. Its weights
    // wait in a spill file beside the output.
    let out = PathBuf::from(args.out.replace("{index}", &index.to_string()));
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut shard = Shard::train(&plan, ds, index, args.of, dir)?;
    shard.meta.seconds.insert("read".into(), read_s);
    let bytes = shard.write(&out)?;
    eprintln!(
        "wrote shard {index} of {} to {} ({bytes} bytes): {} classifiers in {:.2} s of training",
        args.of,
        out.display(),
        shard.meta.columns,
        shard.meta.seconds.get("train").copied().unwrap_or(0.0)
    );
    Ok(())
}

fn merge_shards(args: MergeArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let plan = Plan::read(&args.plan)?;
    init_threads(&plan.meta.config);
    // The data's digest must be the plan's; what the model keeps of the data comes from the plan,
    // so the data is not parsed again.
    let names = names_paths(&args.data);
    plan.check_data(
        &DataId::of(
            plan.meta.data.shape,
            &args.data.train,
            [names[0].as_deref(), names[1].as_deref()],
        )?,
        true,
    )?;
    let read = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| {
                data::read_names(p).with_context(|| format!("reading names from {}", p.display()))
            })
            .transpose()
    };
    let inputs = TrainInputs {
        label_names: read(&names[0])?,
        feature_names: read(&names[1])?,
        ..TrainInputs::default()
    };
    let mut seconds = serde_json::Map::new();
    seconds.insert("read".into(), start.elapsed().as_secs_f64().into());
    let trained = merge(&plan, inputs, &args.shards, seconds)?;
    let bytes = trained.write(&args.out)?;
    eprintln!(
        "wrote {} ({bytes} bytes, version {}) from {} shards in {:.2} s",
        args.out.display(),
        trained.meta.version,
        args.shards.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

//! `xmc-loadtest SCENARIO.toml [--out DIR]`: runs a scenario and writes its report.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use tokio::signal::unix::{SignalKind, signal};
use xmc_loadtest::engine::{self, Cancel};
use xmc_loadtest::runner::{self, Ctx};
use xmc_loadtest::scenario::Scenario;

/// Open-loop load tests of `xmc serve`: depth-vs-latency, hot-swap, max-rate.
#[derive(Debug, Parser)]
#[command(name = "xmc-loadtest", version)]
struct Args {
    /// The scenario file (see loadtest/scenarios/).
    scenario: PathBuf,
    /// The report directory (default: the scenario's `out`, else `loadtest/out/<file stem>`).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("xmc-loadtest: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut scenario = Scenario::load(&args.scenario)?;
    // A scenario whose data set is not on this machine is skipped, not failed: a clone without
    // the data sets still runs every command of its documentation.
    if let Err(why) = scenario
        .data
        .resolve(std::env::var_os("XMC_DATASETS").as_deref())
    {
        eprintln!("xmc-loadtest: skipped {}: {why}", args.scenario.display());
        return Ok(());
    }
    let out = args
        .out
        .clone()
        .or_else(|| scenario.out.clone())
        .unwrap_or_else(|| {
            let stem = args
                .scenario
                .file_stem()
                .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
            PathBuf::from("loadtest/out").join(stem)
        });
    // The scenario's check recorded the CPUs the process may use before this narrows them.
    if !scenario.load.cpus.is_empty() {
        xmc_loadtest::pin::pin_self(&scenario.load.cpus)?;
    }
    // One thread: the generator shares the machine with the server under test.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let cancel = Cancel::new();
        {
            let cancel = cancel.clone();
            // Installed now: a task's first poll waits for the runner's first yield, and until
            // then ctrl-c would kill the run without its partial report.
            let mut interrupt = signal(SignalKind::interrupt()).context("handling ctrl-c")?;
            tokio::spawn(async move {
                if interrupt.recv().await.is_some() {
                    eprintln!("xmc-loadtest: interrupted; finishing in-flight requests and writing a partial report");
                    cancel.cancel();
                }
            });
        }
        let senders = match scenario.load.senders {
            1 => None,
            n => Some(engine::Senders::start(n, &scenario.load.cpus, scenario.load.pool_idle())?),
        };
        let client = engine::client_with_idle(scenario.load.pool_idle());
        let ctx = Ctx {
            scenario,
            out: out.clone(),
            cancel: cancel.clone(),
            client,
            senders,
        };
        let result = runner::run(&ctx).await;
        eprintln!("report: {}/report.{{json,md}}", out.display());
        let rep = result?;
        if cancel.is_cancelled() {
            anyhow::bail!("interrupted: the report in {} is partial", out.display());
        }
        print!("{}", xmc_loadtest::scenarios::markdown(&rep));
        Ok(())
    })
}

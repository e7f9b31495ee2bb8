//! `xmc serve`: the prediction server.

use crate::serve::{LogFormat, ServeConfig};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `xmc serve`. Settings come from defaults, then `--config`, then `XMC_*`
/// environment variables, then these flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML file with a `[serve]` table (e.g. `config/server.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The model bundle, or a symlink to one, watched for changes.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A model repository: serves every `<name>/<version>/model.xmcb` under this directory
    /// (instead of `--model`).
    #[arg(long, conflicts_with = "model")]
    pub repository: Option<PathBuf>,
    /// The name the `--model` bundle serves under (default: the file's stem), e.g. KServe's
    /// InferenceService name.
    #[arg(long, conflicts_with = "repository")]
    pub model_name: Option<String>,
    /// The listen address, e.g. 127.0.0.1:8080.
    #[arg(long)]
    pub bind: Option<String>,
    /// The Open Inference Protocol's gRPC address, e.g. 127.0.0.1:8081 (default: no gRPC).
    #[arg(long)]
    pub grpc_bind: Option<String>,
}

/// Runs `xmc serve` until ctrl-c or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("XMC_"))
        .collect();
    let mut flags: Vec<(&str, String)> = Vec::new();
    if let Some(m) = &args.model {
        flags.push(("model", m.display().to_string()));
    }
    if let Some(r) = &args.repository {
        flags.push(("repository", r.display().to_string()));
    }
    if let Some(n) = &args.model_name {
        flags.push(("model_name", n.clone()));
    }
    if let Some(b) = &args.bind {
        flags.push(("bind", b.clone()));
    }
    if let Some(g) = &args.grpc_bind {
        flags.push(("grpc_bind", g.clone()));
    }
    let cfg = ServeConfig::load(args.config.as_deref(), &env, &flags)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("XMC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file or journald gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cfg.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cfg.runtime == crate::serve::config::Runtime::PerCore {
        // The API is served by threads of its own; this runtime keeps only the poller, the
        // metrics port and the signals.
        builder.worker_threads(1);
    }
    let runtime = builder.enable_all().build()?;
    runtime.block_on(crate::serve::run(cfg))
}

//! The KServe runtime (`deploy/kserve/clusterservingruntime.yaml`) starts `xmc serve` with
//! arguments that `xmc serve` accepts, listens on the port it declares, and serves the file
//! KServe's storage initializer writes.

use clap::Parser;
use std::path::Path;
use xmc::cli::{Cli, Command};

/// The value after `key:` on the one line of `text` that starts (after indentation) with it.
fn field<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix(key))
        .map(str::trim)
        .collect()
}

#[test]
fn the_runtime_arguments_are_xmc_serve_flags_and_its_port_is_the_bind_port() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("deploy/kserve/clusterservingruntime.yaml")).unwrap();

    // The arguments are written as one flow sequence of double-quoted strings: JSON.
    let args = field(&text, "args:");
    assert_eq!(args.len(), 1, "one container with one args line: {args:?}");
    let args: Vec<String> = serde_json::from_str(args[0]).expect("args as a JSON array");
    // KServe fills in the InferenceService's name.
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.replace("{{.Name}}", "debian-tags"))
        .collect();
    let cli = Cli::try_parse_from(std::iter::once("xmc".to_string()).chain(args))
        .unwrap_or_else(|e| panic!("the runtime's arguments are not `xmc` flags: {e}"));
    let Command::Serve(serve) = cli.command else {
        panic!("the runtime does not run `xmc serve`")
    };
    assert_eq!(serve.model_name.as_deref(), Some("debian-tags"));
    let model = serve.model.expect("--model");
    assert!(
        model.starts_with("/mnt/models/"),
        "{model:?} is not where KServe's storage initializer writes"
    );

    let bind = serve.bind.expect("--bind");
    let (_, port) = bind.rsplit_once(':').expect("host:port");
    let ports = field(&text, "- containerPort:");
    assert_eq!(ports, vec![port], "declared ports against --bind {bind}");
    for probe_port in field(&text, "port:") {
        assert_eq!(probe_port, port, "a probe on another port than --bind");
    }
    // The gRPC port is another one, and the NetworkPolicy admits it as it admits --bind's.
    let grpc = serve.grpc_bind.expect("--grpc-bind");
    let (_, grpc_port) = grpc.rsplit_once(':').expect("host:port");
    assert_ne!(grpc_port, port, "gRPC and REST on one port");
    let policy = std::fs::read_to_string(root.join("deploy/kserve/networkpolicy.yaml")).unwrap();
    let admitted = field(&policy, "- port:");
    for p in [port, grpc_port] {
        assert!(
            admitted.contains(&p),
            "the NetworkPolicy does not admit port {p}"
        );
    }

    // The metrics port the annotation names is the one XMC_METRICS_BIND listens on.
    let metrics = field(&text, "prometheus.kserve.io/port:");
    let env = text
        .lines()
        .skip_while(|l| !l.contains("name: XMC_METRICS_BIND"))
        .nth(1)
        .and_then(|l| l.trim().strip_prefix("value:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("XMC_METRICS_BIND's value");
    assert_eq!(
        metrics,
        vec![format!("\"{}\"", env.rsplit_once(':').unwrap().1)],
        "prometheus.kserve.io/port against XMC_METRICS_BIND={env}"
    );
}

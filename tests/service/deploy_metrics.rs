//! Every metric that the Grafana dashboard (`deploy/grafana/xmc.json`) and the alert rules
//! (`deploy/kubernetes/base/prometheusrule.yaml`) query is in the `/metrics` of a running
//! `xmc serve`: a renamed or dropped metric would otherwise leave a panel empty and an alert
//! silent. The server runs as a process (as in a pod), so the connection metrics of its socket
//! loop are there too; it answers a prediction, a reload and a refused reload first, so that
//! every counter and histogram has a series.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// PromQL words that look like metric names but are not: keywords, aggregation operators (which
/// may stand before `by (...)` rather than their `(`) and the like (functions are told apart by
/// the `(` after them).
const NOT_METRICS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// The metric names a PromQL expression selects: label matchers (`{...}`), ranges (`[...]`),
/// strings and the label lists of `by (...)` and its kin removed, what is left that reads as an
/// identifier, is not followed by `(` (a function) and is no keyword.
fn metric_names(expr: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth_brace = 0usize;
    let mut depth_bracket = 0usize;
    let mut in_string: Option<char> = None;
    for c in expr.chars() {
        if let Some(q) = in_string {
            if c == q {
                in_string = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' if depth_brace == 0 => {
                in_string = Some(c);
                plain.push(' ');
            }
            '"' | '\'' | '`' => in_string = Some(c),
            '{' => depth_brace += 1,
            '}' => {
                depth_brace = depth_brace.saturating_sub(1);
                plain.push(' ');
            }
            '[' => depth_bracket += 1,
            ']' => {
                depth_bracket = depth_bracket.saturating_sub(1);
                plain.push(' ');
            }
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => plain.push(c),
        }
    }
    let chars: Vec<char> = plain.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            let lower = word.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                // Its parenthesised list holds label names.
                skip_list = true;
                continue;
            }
            if next != Some(&'(') && !NOT_METRICS.contains(&lower.as_str()) {
                names.push(word);
            }
        } else if c == '(' && skip_list {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_list = false;
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            // A number (0.99, 1e-3): its letters are no name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            if !c.is_whitespace() {
                skip_list = false;
            }
            i += 1;
        }
    }
    names
}

#[test]
fn the_extractor_reads_metric_names_out_of_promql() {
    let got = metric_names(
        r#"histogram_quantile(0.99, sum by (le, pod) (rate(a_bucket{job="x",route=~"/v1/{p}"}[5m]))) > 1e-2 or vector(0)"#,
    );
    assert_eq!(got, ["a_bucket"]);
    let got = metric_names(
        r#"count(count by (version) (m_info{job="xmc"} == 1)) / on (pod) group_left b_total"#,
    );
    assert_eq!(got, ["m_info", "b_total"]);
    let got = metric_names(r#"label_values(m_info{job="xmc"}, namespace)"#);
    assert_eq!(got, ["m_info", "namespace"]);
}

/// Every PromQL expression of the dashboard: the panels' targets and the template variables'
/// queries (`label_values(METRIC, label)`: only its first argument is a metric).
fn dashboard_exprs(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join("deploy/grafana/xmc.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for panel in doc["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            out.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for var in doc["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.rsplit_once(','))
                .map(|(metric, _label)| metric.to_string())
                .unwrap_or_else(|| q.to_string());
            out.push(inner);
        }
    }
    out
}

/// Every alert rule's `expr` (each on one line, quoted, as the file keeps them), and how many
/// rules the file has: a rule whose expression the reader missed fails the test.
fn rule_exprs(root: &Path) -> (Vec<String>, usize) {
    let text =
        std::fs::read_to_string(root.join("deploy/kubernetes/base/prometheusrule.yaml")).unwrap();
    let mut exprs = Vec::new();
    let mut rules = 0;
    for line in text.lines() {
        let t = line.trim_start().trim_start_matches("- ");
        if t.starts_with("alert:") || t.starts_with("record:") {
            rules += 1;
        }
        if let Some(e) = t.strip_prefix("expr:") {
            let e = e.trim();
            let unquoted = e
                .strip_prefix('\'')
                .and_then(|e| e.strip_suffix('\''))
                .map(|e| e.replace("''", "'"))
                .unwrap_or_else(|| e.to_string());
            exprs.push(unquoted);
        }
    }
    (exprs, rules)
}

/// A started `xmc serve` on a copy of the default model, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(model: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xmc"))
            .args(["serve", "--config", "config/server.toml"])
            .args(["--bind", "127.0.0.1:0", "--model"])
            .arg(model)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("XMC_LOG", "info")
            .env("XMC_LOG_FORMAT", "text")
            .env("XMC_ADMIN_TOKEN", "deploy-test")
            .env("XMC_POLL_INTERVAL_MS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(" serving addr=").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("");
                    if let Ok(a) = addr.parse::<SocketAddr>() {
                        let _ = tx.send(a);
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => Server { child, addr },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("no \"serving\" line with an address in 60 s");
            }
        }
    }

    /// One request on its own connection: the status and the body.
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             authorization: Bearer deploy-test\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        (status, body.to_string())
    }
}

/// The series names of a Prometheus text exposition (`name{labels} value` or `name value`).
fn exposed_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_query_is_exported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dash = dashboard_exprs(root);
    let (rules, n_rules) = rule_exprs(root);
    assert!(
        dash.len() >= 10,
        "only {} dashboard queries read",
        dash.len()
    );
    assert_eq!(
        rules.len(),
        n_rules,
        "a rule's expr was not read: {rules:?}"
    );
    assert!(n_rules >= 4, "only {n_rules} alert rules read");
    let mut queried = BTreeSet::new();
    for e in dash.iter().chain(&rules) {
        let names = metric_names(e);
        assert!(!names.is_empty(), "no metric read out of {e}");
        queried.extend(names);
    }

    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.xmcb");
    std::fs::copy(root.join("models/default.xmcb"), &model).unwrap();
    let server = Server::start(&model);
    let (s, body) = server.request("POST", "/v1/predict", r#"{"features": [[1, 1.0]]}"#);
    assert_eq!(s, 200, "{body}");
    let (s, body) = server.request("POST", "/v1/admin/reload?force=true", "");
    assert_eq!(s, 200, "{body}");
    // A corrupt bundle renamed into place: the reload is refused and counted as an error.
    let mut bytes = std::fs::read(&model).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let tmp = dir.path().join("model.xmcb.partial");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, &model).unwrap();
    let (s, body) = server.request("POST", "/v1/admin/reload", "");
    assert_eq!(s, 500, "{body}");
    let (s, text) = server.request("GET", "/metrics", "");
    assert_eq!(s, 200);
    let exposed = exposed_names(&text);
    let missing: Vec<_> = queried.iter().filter(|m| !exposed.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "queried but not exported: {missing:?}\nexported: {exposed:?}"
    );
    // The rules' label values are those the server writes.
    assert!(
        text.contains("xmc_model_reloads_total{result=\"error\"}"),
        "{text}"
    );
    assert!(
        text.contains("route=\"/v1/predict\""),
        "no /v1/predict series: {text}"
    );
}

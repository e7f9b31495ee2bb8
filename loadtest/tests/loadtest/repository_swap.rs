//! The hot-swap scenario in a model repository, against a real `xmc serve` (run in this
//! process on a repository of the small golden models): the swaps write new versions of one
//! model while the load goes to another. The only test of this binary that starts a server, since
//! a server installs the process's metrics recorder.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden(name: &str) -> PathBuf {
    repo().join("tests/data/golden").join(name)
}

/// Serves `dir` with `xmc::serve::run` on a thread of its own; its base URL once it is ready.
fn serve(dir: &Path, token: &str) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut cfg = xmc::serve::ServeConfig::defaults();
    cfg.repository = Some(dir.display().to_string());
    cfg.bind = format!("127.0.0.1:{port}");
    cfg.poll_interval_ms = 50;
    cfg.admin_token = Some(token.to_string());
    cfg.default_model = Some("b".to_string());
    cfg.pool_threads = 1;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        if let Err(e) = rt.block_on(xmc::serve::run(cfg)) {
            panic!("xmc serve: {e:#}");
        }
    });
    let base = format!("http://127.0.0.1:{port}");
    wait_for(&base, "/v2/models/b/ready");
    base
}

/// Waits until `GET base+path` answers 200 (a readiness wait, not a timing check).
fn wait_for(base: &str, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(base, path) != Some(200) {
        assert!(Instant::now() < deadline, "{base}{path} never answered 200");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The status of `GET base+path` with a bare HTTP/1.0 request.
fn status(base: &str, path: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn load_on_one_model_while_another_gets_new_versions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("repo");
    std::fs::create_dir_all(dir.join("b/1")).expect("mkdir");
    std::fs::copy(golden("model-v4.xmcb"), dir.join("b/1/model.xmcb")).expect("copy");
    let token = "swap-test";
    let base = serve(&dir, token);
    let (v4, v3, tiny) = (
        golden("model-v4.xmcb"),
        golden("model-v3.xmcb"),
        golden("tiny.txt"),
    );
    let text = format!(
        "kind = \"hot-swap\"\n[data]\ntest = {tiny:?}\nk = 3\n[load]\nwarmup_s = 0\n\
         [hot_swap]\nrate = 100\nbundles = [{v4:?}, {v3:?}]\nswaps = 4\ninterval_ms = 200\n\
         method = \"both\"\nbefore_s = 0.5\nafter_s = 0.5\n\
         [hot_swap.repository]\ndir = {dir:?}\nswapped = \"a\"\nloaded = \"b\"\n\
         url = \"{base}\"\nadmin_token = \"{token}\"\n"
    );
    let scenario = tmp.path().join("s.toml");
    std::fs::write(&scenario, text).expect("write scenario");
    let out = tmp.path().join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_xmc-loadtest"))
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("report.json")).expect("report.json"),
    )
    .expect("json");
    let h = &json["hot_swap"];
    assert_eq!(h["swaps_done"], 4, "{h}");
    assert_eq!(h["admin_swaps"], 2, "{h}");
    assert_eq!(h["swap_errors"].as_array().map(Vec::len), Some(0), "{h}");
    assert_eq!(h["failed"], 0, "{h}");
    assert!(
        h["during"]["scheduled"].as_u64().expect("during") > 0,
        "{h}"
    );
    assert!(
        h["without"]["scheduled"].as_u64().expect("without") > 0,
        "{h}"
    );
    // Every answer came from model b's one version.
    let versions = h["versions"].as_object().expect("versions");
    assert_eq!(versions.len(), 1, "{h}");
    assert_eq!(h["version_changes"], 0, "{h}");
    assert_eq!(h["repository"]["loaded"], "b");
    assert_eq!(h["repository"]["models"], 2);
    // Model a got its first version and one per swap, each in whole, and serves the last.
    for v in 1..=5 {
        assert!(dir.join(format!("a/{v}/model.xmcb")).exists(), "a/{v}");
    }
    let left: Vec<String> = std::fs::read_dir(dir.join("a"))
        .expect("a")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
    wait_for(&base, "/v2/models/a/versions/5/ready");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("In a repository of 2 models"), "{md}");
}

//! Bad settings are refused with the key named, and where they came from: an unknown key, a bad
//! value, and a bad environment variable, for train and for serve settings.

#![allow(clippy::unwrap_used)]

use xmc::config::TrainConfig;
use xmc::serve::ServeConfig;

fn env(var: &str, value: &str) -> Vec<(String, String)> {
    vec![(var.to_string(), value.to_string())]
}

fn assert_names(err: &str, parts: &[&str]) {
    for part in parts {
        assert!(err.contains(part), "`{part}` not in: {err}");
    }
}

#[test]
fn train_refuses_an_unknown_key_naming_it_and_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.toml");
    std::fs::write(&path, "[train]\ntrees = 2\n[train.solver]\ncc = 2.0\n").unwrap();
    let err = TrainConfig::load_with_env(Some(&path), &[], &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`solver.cc`", &path.display().to_string()]);
    let err = TrainConfig::load_with_env(None, &[], &["tres=3".into()])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`tres`", "--set tres=3"]);
    // A field recorded in bundles that is not a setting is unknown too.
    let err = TrainConfig::load_with_env(None, &[], &["solver.seed=3".into()])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`solver.seed`"]);
}

#[test]
fn train_refuses_a_bad_value_naming_the_key() {
    for (set, key) in [
        ("trees=many", "`trees`"),
        ("trees=0", "`trees`"),
        ("d0=-1", "`d0`"),
        ("defrag=yz", "`defrag`"),
        ("text.min_df=0", "`text.min_df`"),
        ("solver.loss=cubic", "`solver.loss`"),
        ("normalize=maybe", "`normalize`"),
    ] {
        let err = TrainConfig::load_with_env(None, &[], &[set.into()])
            .unwrap_err()
            .to_string();
        assert_names(&err, &[key]);
    }
}

#[test]
fn train_refuses_a_bad_environment_variable_naming_it() {
    let err = TrainConfig::load_with_env(None, &env("XMC_TRAIN_TREES", "lots"), &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`trees`", "XMC_TRAIN_TREES", "lots"]);
    let err = TrainConfig::load_with_env(None, &env("XMC_TRAIN_TRES", "3"), &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`tres`", "XMC_TRAIN_TRES"]);
    // A good one takes its place between the file and `--set`.
    let cfg = TrainConfig::load_with_env(None, &env("XMC_TRAIN_SOLVER__C", "2"), &[]).unwrap();
    assert_eq!(cfg.solver.c, 2.0);
    let cfg = TrainConfig::load_with_env(None, &env("XMC_TRAIN_D0", "4"), &["d0=6".into()]);
    assert_eq!(cfg.unwrap().defrag.d0, 6);
    // Variables of other tools are not train settings.
    assert!(TrainConfig::load_with_env(None, &env("XMC_DATASETS", "/x"), &[]).is_ok());
}

#[test]
fn serve_refuses_an_unknown_key_naming_it_and_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.toml");
    std::fs::write(&path, "[serve]\nmax_k = 50\nmax_kk = 5\n").unwrap();
    let err = ServeConfig::load(Some(&path), &[], &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`max_kk`", &path.display().to_string()]);
    let err = ServeConfig::load(None, &[], &[("bnd", "127.0.0.1:1".into())])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`bnd`"]);
}

#[test]
fn serve_refuses_a_bad_value_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.toml");
    std::fs::write(&path, "[serve]\nruntime = \"threads\"\n").unwrap();
    let err = ServeConfig::load(Some(&path), &[], &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`runtime`", "threads", &path.display().to_string()]);
    let err = ServeConfig::load(None, &[], &[("bind", "nowhere".into())])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`bind`"]);
}

#[test]
fn serve_refuses_a_bad_environment_variable_naming_it() {
    let err = ServeConfig::load(None, &env("XMC_MAX_BATCH", "lots"), &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`max_batch`", "XMC_MAX_BATCH", "lots"]);
    let err = ServeConfig::load(None, &env("XMC_LOAD_NICE", "25"), &[])
        .unwrap_err()
        .to_string();
    assert_names(&err, &["`load_nice`", "25"]);
    // Existing variables keep their meaning; a token of digits stays text.
    let cfg = ServeConfig::load(None, &env("XMC_ADMIN_TOKEN", "12345"), &[]).unwrap();
    assert_eq!(cfg.admin_token.as_deref(), Some("12345"));
    let cfg = ServeConfig::load(None, &env("XMC_METRICS_BIND", ""), &[]).unwrap();
    assert_eq!(cfg.metrics_bind, None);
}

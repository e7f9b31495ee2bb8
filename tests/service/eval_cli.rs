//! `xmc eval --truth --pred` on vendored data.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::xmc;
use std::path::Path;
use xmc::data;
use xmc::eval::predfile::{Ranked, write_predictions};

#[test]
fn the_truth_scored_against_itself_has_p_at_1_of_one() {
    let truth = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Bibtex/test.txt.gz");
    let ds = data::read_xc_file(&truth).unwrap();
    let preds: Vec<Ranked> = (0..ds.n_points())
        .map(|i| ds.label_row(i).iter().map(|&l| (l, 1.0)).collect())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let pred = dir.path().join("pred.txt");
    write_predictions(&preds, std::fs::File::create(&pred).unwrap()).unwrap();
    let out = xmc(&[
        "eval",
        "--truth",
        truth.to_str().unwrap(),
        "--pred",
        pred.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["n", "p@1", "p@3", "p@5", "ndcg@5", "psp@5", "coverage@5"] {
        assert!(r.get(key).is_some(), "no {key} in {r}");
    }
    assert_eq!(r["n"], 2515);
    assert_eq!(r["p@1"], 1.0);
    assert_eq!(r["ndcg@5"], 1.0);
    // PSP@5 is below 1 where a point has more than 5 labels: the truth lists them by id, not
    // rarest first, which is what the normaliser assumes.
    assert!(r["psp@5"].as_f64().unwrap() > 0.95);
    assert_eq!(r["coverage@5"], 1.0);
}

#[test]
fn a_line_count_mismatch_and_a_bad_token_are_errors() {
    let truth = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Corel5k/test.txt.gz");
    let dir = tempfile::tempdir().unwrap();
    let pred = dir.path().join("pred.txt");
    std::fs::write(&pred, "1:0.5\n").unwrap();
    let out = xmc(&[
        "eval",
        "--truth",
        truth.to_str().unwrap(),
        "--pred",
        pred.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 lines"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&pred, "1:0.5 2:zz\n").unwrap();
    let out = xmc(&[
        "eval",
        "--truth",
        truth.to_str().unwrap(),
        "--pred",
        pred.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("line 1") && err.contains("`2:zz`"),
        "{err}"
    );
}

#[test]
fn model_eval_takes_the_search_options() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The shipped model is trained from text: its test split is JSON Lines, vectorized by the
    // model's own vectorizer.
    let model = root.join("models/default.xmcb");
    let data = root.join("tests/data/debian-tags-text/test.jsonl.gz");
    let run = |sets: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--json",
        ];
        for s in sets {
            args.extend(["--set", s]);
        }
        xmc(&args)
    };
    let json = |out: &std::process::Output| -> serde_json::Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let on = json(&run(&["beam=1000"]));
    let off = json(&run(&["early_stop=false", "beam=1000"]));
    // With a beam that never binds both searches are exact, so they agree.
    assert_eq!(on["p@1"], off["p@1"]);
    assert_eq!(on["p@5"], off["p@5"]);
    assert_eq!(off["early_stopped_frac"], 0.0);
    assert!(on["early_stopped_frac"].as_f64().unwrap() > 0.0, "{on}");
    assert!(
        on["nodes_evaluated_mean"].as_f64().unwrap()
            <= off["nodes_evaluated_mean"].as_f64().unwrap()
    );
    for key in ["expected_depth@1", "expected_depth@5", "latency_us_mean"] {
        assert!(on.get(key).is_some(), "no {key} in {on}");
    }
    for (sets, needle) in [
        (&["early_stop=maybe"][..], "early_stop"),
        (&["early_stop=false", "deadline_us=10"][..], "deadline_us"),
        (&["rerank=true"][..], "rerank"),
    ] {
        let out = run(sets);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{sets:?}: {err}"
        );
    }
}

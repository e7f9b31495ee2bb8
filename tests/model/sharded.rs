//! Training in shards (`xmc train plan|shard|merge`, `scripts/train-sharded.sh`): the merged
//! bundle is `xmc train`'s but for the creation record, shards come from separate processes, and
//! every wrong set of shards is refused with a clear error.
#![allow(clippy::unwrap_used)]

use crate::common::{vendored, xmc};
use std::path::{Path, PathBuf};
use xmc::bundle::{Bundle, OpenOptions};
use xmc::model::Model;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs xmc and asserts it succeeded.
fn ok(args: &[&str]) {
    let out = xmc(args);
    assert!(
        out.status.success(),
        "xmc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs xmc, asserts it failed, and gives its stderr.
fn refused(args: &[&str]) -> String {
    let out = xmc(args);
    assert!(!out.status.success(), "xmc {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The error of `xmc train shard` for shard `index` of `of`, which must be refused.
fn refused_shard(plan: &Path, train: &Path, index: usize, of: usize, out: &Path) -> String {
    let (index, of) = (index.to_string(), of.to_string());
    refused(&[
        "train",
        "shard",
        "--plan",
        s(plan),
        "--train",
        s(train),
        "--index",
        &index,
        "--of",
        &of,
        "--out",
        s(out),
    ])
}

fn with_sets<'a>(mut args: Vec<&'a str>, sets: &[&'a str]) -> Vec<&'a str> {
    for set in sets {
        args.extend(["--set", set]);
    }
    args
}

/// Plans training on `train` with `sets` into `dir/plan`, and trains shards `0..n` in separate
/// processes, returning their paths.
fn plan_and_shards(dir: &Path, train: &Path, sets: &[&str], n: usize) -> (PathBuf, Vec<PathBuf>) {
    let plan = dir.join("plan.xmcp");
    ok(&with_sets(
        vec!["train", "plan", "--train", s(train), "--out", s(&plan)],
        sets,
    ));
    let shards: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("s{i}.xmcs"))).collect();
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_xmc"));
            cmd.args(["train", "shard", "--plan", s(&plan), "--train", s(train)])
                .args([
                    "--of",
                    &n.to_string(),
                    "--out",
                    s(&dir.join("s{index}.xmcs")),
                ])
                .env("RAYON_NUM_THREADS", "1")
                .stderr(std::process::Stdio::piped());
            // Half the shards take their index from the Indexed Job's variable.
            if i % 2 == 0 {
                cmd.args(["--index", &i.to_string()]);
            } else {
                cmd.env("JOB_COMPLETION_INDEX", i.to_string());
            }
            cmd.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (plan, shards)
}

/// Asserts that two bundles hold the same bytes in every section but `meta`, and the same
/// metadata but for `created`.
fn assert_same_model(a: &Path, b: &Path) {
    let open = |p: &Path| Bundle::open(p, &OpenOptions::default()).unwrap();
    let (ba, bb) = (open(a), open(b));
    let names: Vec<&str> = ba.section_names().collect();
    assert_eq!(names, bb.section_names().collect::<Vec<_>>());
    for name in names.iter().filter(|&&n| n != "meta") {
        let (sa, sb) = (ba.section(name).unwrap(), bb.section(name).unwrap());
        let bytes = |bundle: &Bundle, info: &xmc::bundle::SectionInfo| {
            bundle.as_bytes()[info.offset as usize..(info.offset + info.byte_len) as usize].to_vec()
        };
        assert!(bytes(&ba, sa) == bytes(&bb, sb), "section {name} differs");
    }
    let strip = |p: &Path| {
        let mut meta = Model::open(p, &OpenOptions::default())
            .unwrap()
            .meta()
            .clone();
        meta.created = Default::default();
        meta
    };
    assert_eq!(strip(a), strip(b));
}

/// Asserts that two models predict the same bytes on Bibtex's test split.
fn assert_same_predictions(dir: &Path, a: &Path, b: &Path) {
    let test = vendored("Bibtex", "test");
    let pred = |m: &Path, name: &str| {
        let out = dir.join(name);
        ok(&[
            "predict",
            "--model",
            s(m),
            "--data",
            s(&test),
            "--out",
            s(&out),
        ]);
        std::fs::read(out).unwrap()
    };
    assert!(pred(a, "a.pred") == pred(b, "b.pred"), "predictions differ");
}

/// Plan, 4 shard processes and merge give `xmc train`'s bundle, for a flat model, T = 1 and
/// T = 3 trees, a λ-weighted tree of branching 4 with bfloat16 weights, and BP (blocks of
/// trees, and flat blocks).
#[test]
fn merged_shards_are_the_model_train_writes() {
    let train = vendored("Bibtex", "train");
    let mut tree_plan = None;
    for sets in [
        &["model=flat"][..],
        &["max_leaf=16"][..],
        &["max_leaf=16", "trees=3"][..],
        &["max_leaf=16", "lambda=1", "branching=4", "weights=bf16"][..],
        &["bp=true", "bp_lambda=0.3", "max_leaf=16"][..],
        &["bp=true", "block_model=flat", "bp_lambda=1", "bp_q_max=4"][..],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.xmcb");
        ok(&with_sets(
            vec!["train", "--quiet", "--train", s(&train), "--out", s(&one)],
            sets,
        ));
        let (plan, shards) = plan_and_shards(dir.path(), &train, sets, 4);
        let merged = dir.path().join("merged.xmcb");
        let mut args = vec!["train", "merge", "--plan", s(&plan), "--train", s(&train)];
        args.extend(shards.iter().map(|p| s(p)));
        args.extend(["--out", s(&merged)]);
        ok(&args);
        assert_same_model(&one, &merged);
        assert_same_predictions(dir.path(), &one, &merged);
        // Each shard records its own time and estimated cost.
        for p in &shards {
            let b = Bundle::open(p, &OpenOptions::default()).unwrap();
            let meta: serde_json::Value = b.json("shard").unwrap();
            assert!(meta["seconds"]["train"].as_f64().unwrap() > 0.0, "{meta}");
            assert!(meta["cost"].as_u64().unwrap() > 0, "{meta}");
        }
        // BP shards are refused by a tree model's plan, on the same data.
        if sets[0] == "bp=true" {
            let (tree_dir, plan): &(tempfile::TempDir, PathBuf) = tree_plan.as_ref().unwrap();
            let out = tree_dir.path().join("bp-shards.xmcb");
            let mut args = vec!["train", "merge", "--plan", s(plan), "--train", s(&train)];
            args.extend(shards.iter().map(|p| s(p)));
            args.extend(["--out", s(&out)]);
            let err = refused(&args);
            assert!(err.contains("belongs to plan"), "{err}");
        } else if sets.len() == 1 {
            let kept = tempfile::tempdir().unwrap();
            let copy = kept.path().join("plan.xmcp");
            std::fs::copy(&plan, &copy).unwrap();
            tree_plan = Some((kept, copy));
        }
    }
}

/// The merge refuses shards of another plan or data set, missing, duplicate and corrupt shards;
/// a shard refuses other data; a failed shard leaves no file.
#[test]
fn wrong_shards_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let train = vendored("Bibtex", "train");
    let other = vendored("Corel5k", "train");
    let (plan, shards) = plan_and_shards(d, &train, &["max_leaf=16"], 3);
    let merged = d.join("m.xmcb");
    let merge = |plan: &Path, data: &Path, shards: &[&Path]| {
        let mut args = vec!["train", "merge", "--plan", s(plan), "--train", s(data)];
        args.extend(shards.iter().map(|p| s(p)));
        args.extend(["--out", s(&merged)]);
        refused(&args)
    };
    let [s0, s1, s2] = [&shards[0], &shards[1], &shards[2]].map(|p| p.as_path());

    let err = merge(&plan, &train, &[s0, s2]);
    assert!(err.contains("missing shards of 3: 1"), "{err}");
    let err = merge(&plan, &train, &[s0, s1, s1, s2]);
    assert!(err.contains("are both shard 1 of 3"), "{err}");

    // Another plan (another seed) on the same data.
    let od = d.join("other");
    std::fs::create_dir(&od).unwrap();
    let (_, other_shards) = plan_and_shards(&od, &train, &["max_leaf=16", "seed=5"], 3);
    let err = merge(&plan, &train, &[s0, &other_shards[1], s2]);
    assert!(err.contains("belongs to plan"), "{err}");

    // Another data set, at the merge and at a shard.
    let err = merge(&plan, &other, &[s0, s1, s2]);
    assert!(err.contains("not the data plan"), "{err}");
    let err = refused_shard(&plan, &other, 0, 3, &d.join("x.xmcs"));
    assert!(err.contains("not the data plan"), "{err}");

    // A shard file with a flipped byte.
    let bad = d.join("bad.xmcs");
    let mut bytes = std::fs::read(s1).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&bad, bytes).unwrap();
    let err = merge(&plan, &train, &[s0, &bad, s2]);
    assert!(err.contains("bad.xmcs: not a usable shard file"), "{err}");
    // A plan file in place of a shard.
    let err = merge(&plan, &train, &[s0, &plan, s2]);
    assert!(err.contains("not a usable shard file"), "{err}");

    // A shard that fails writes nothing.
    let failed = d.join("failed");
    std::fs::create_dir(&failed).unwrap();
    let err = refused_shard(&plan, &train, 3, 3, &failed.join("s.xmcs"));
    assert!(err.contains("not below the shard count 3"), "{err}");
    assert_eq!(std::fs::read_dir(&failed).unwrap().count(), 0);
    // A shard that has nowhere to keep its trained weights stops before it trains.
    let err = refused_shard(&plan, &train, 0, 3, &d.join("none").join("s.xmcs"));
    assert!(err.contains("none: cannot make a spill file"), "{err}");

    // What the shards cannot train the same way is refused at the plan.
    let err = refused(&[
        "train",
        "plan",
        "--train",
        s(&train),
        "--out",
        s(&d.join("man.xmcp")),
        "--set",
        "negatives=man",
    ]);
    assert!(
        err.contains("does not support matcher-aware negatives"),
        "{err}"
    );
}

/// `scripts/train-sharded.sh` runs the cluster's steps on one machine; a shard process killed
/// mid-way leaves no file, and rerunning the script trains that index alone and gives the same
/// bundle.
#[test]
fn the_local_script_survives_a_killed_shard() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let train = vendored("Bibtex", "train");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/train-sharded.sh");
    let one = d.join("one.xmcb");
    ok(&[
        "train",
        "--quiet",
        "--train",
        s(&train),
        "--out",
        s(&one),
        "--set",
        "max_leaf=16",
    ]);
    let run = |out: &Path| {
        std::process::Command::new("bash")
            .arg(&script)
            .args(["--train", s(&train), "--out", s(out), "--shards", "3"])
            .args(["--work", s(&d.join("work")), "--set", "max_leaf=16"])
            .env("XMC", env!("CARGO_BIN_EXE_xmc"))
            .output()
            .unwrap()
    };
    let first = d.join("first.xmcb");
    let out = run(&first);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same_model(&one, &first);

    // Shard 1 is lost, and its retry is killed before it ends.
    let lost = d.join("work/shard-1.xmcs");
    std::fs::remove_file(&lost).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_xmc"))
        .args(["train", "shard", "--plan", s(&d.join("work/plan.xmcp"))])
        .args([
            "--train",
            s(&train),
            "--index",
            "1",
            "--of",
            "3",
            "--out",
            s(&lost),
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(!lost.exists());
    let stray: Vec<_> = std::fs::read_dir(d.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("tmp"))
        .collect();
    // The kill can land after the temporary file was made; it is never taken for a shard.
    assert!(
        stray.iter().all(|n| n.starts_with(".shard-1.xmcs.tmp-")),
        "{stray:?}"
    );

    let second = d.join("second.xmcb");
    let out = run(&second);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("shard 0:") && said.contains("shard 2:"),
        "{said}"
    );
    assert!(!said.contains("shard 1:"), "{said}");
    assert_same_model(&first, &second);
}

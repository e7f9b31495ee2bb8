//! Code that rests on a design decision cites the decision's file under `docs/decisions/`, and
//! that file must exist: a renamed or missing decision fails here rather than leaving a comment
//! that points nowhere. ARCHITECTURE.md is a map without the evidence, so no comment cites it by
//! a paragraph's title any more.

use std::fs;
use std::path::{Path, PathBuf};

/// The trees whose files may cite decisions, relative to the repository root.
const ROOTS: [&str; 6] = [
    "src",
    "loadtest/src",
    "benches",
    "tests",
    "config",
    "scripts",
];

/// The kinds of file read: code, configuration and scripts.
const EXTENSIONS: [&str; 5] = ["rs", "toml", "sh", "py", "lua"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` with one of [`EXTENSIONS`], skipping vendored test data.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            if path.ends_with("tests/data") {
                continue;
            }
            files(&path, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            out.push(path);
        }
    }
}

/// The decision files a text cites: each `docs/decisions/` followed by four digits, a dash, a
/// name of lower-case letters, digits and dashes, and `.md`.
fn citations(text: &str) -> Vec<String> {
    const PREFIX: &str = "docs/decisions/";
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let tail = &rest[at + PREFIX.len()..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'))
            .unwrap_or(tail.len());
        let name = tail[..name_len].trim_end_matches('.');
        let numbered = name.len() > 5
            && name.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && name.as_bytes()[4] == b'-';
        if numbered && name.ends_with(".md") {
            found.push(format!("{PREFIX}{name}"));
        }
        rest = tail;
    }
    found
}

/// Whether a line cites ARCHITECTURE.md by a paragraph's title: the file's name followed, on the
/// same line, by a quoted title (`ARCHITECTURE.md, "The server"` or `ARCHITECTURE.md's "..."`).
fn cites_architecture_title(line: &str) -> bool {
    line.find("ARCHITECTURE")
        .is_some_and(|at| line[at..].contains('"'))
}

fn scanned() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = Vec::new();
    for dir in ROOTS {
        files(&root.join(dir), &mut paths);
    }
    paths.sort();
    let this = Path::new(file!()).file_name().expect("this file's name");
    paths
        .into_iter()
        .filter(|p| p.file_name() != Some(this))
        .map(|p| {
            let text =
                fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

#[test]
fn every_cited_decision_exists() {
    let root = root();
    let mut cited = 0;
    let mut missing = Vec::new();
    for (path, text) in scanned() {
        for (n, line) in text.lines().enumerate() {
            for file in citations(line) {
                cited += 1;
                if !root.join(&file).is_file() {
                    missing.push(format!("{}:{}: {file}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited decisions that do not exist:\n{}",
        missing.join("\n")
    );
    // The code does cite decisions; a scan that finds none has lost its way, not passed.
    assert!(
        cited >= 10,
        "only {cited} citations of docs/decisions/ found"
    );
}

#[test]
fn no_comment_cites_architecture_by_a_title() {
    let mut found = Vec::new();
    for (path, text) in scanned() {
        for (n, line) in text.lines().enumerate() {
            if cites_architecture_title(line) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite a file under docs/decisions/ instead of a paragraph of ARCHITECTURE.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_decision_index_lists_every_decision() {
    let dir = root().join("docs/decisions");
    let index = fs::read_to_string(dir.join("README.md")).expect("docs/decisions/README.md");
    let mut decisions = 0;
    for entry in fs::read_dir(&dir).expect("docs/decisions/") {
        let name = entry.expect("an entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") && name != "README.md" {
            decisions += 1;
            assert!(
                index.contains(&format!("({name})")),
                "README.md does not link {name}"
            );
        }
    }
    assert!(decisions > 0, "no decision files in docs/decisions/");
}

#[test]
fn the_citation_scanner_reads_what_it_should() {
    let line =
        "// (docs/decisions/0003-weight-rows-four-weights.md). And docs/decisions/README.md.";
    assert_eq!(
        citations(line),
        ["docs/decisions/0003-weight-rows-four-weights.md"]
    );
    assert!(citations("docs/decisions/0003.md and docs/decisions/x-y.md").is_empty());
    assert!(cites_architecture_title(
        r#"// (ARCHITECTURE.md, "Weight rows")."#
    ));
    assert!(!cites_architecture_title(
        "// See ARCHITECTURE.md for the map."
    ));
}

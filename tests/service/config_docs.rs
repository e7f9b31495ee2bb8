//! `docs/configuration.md` lists every train and serve key, and no key that does not exist: the
//! key tables are checked against the keys derived from the settings structs, both ways.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use xmc::config::TrainConfig;
use xmc::serve::ServeConfig;

/// The keys in the first column of the tables between the heading `## {section}` and the next
/// `## ` heading.
fn documented(section: &str) -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let start = doc
        .find(&format!("\n## {section}\n"))
        .unwrap_or_else(|| panic!("no `## {section}` in docs/configuration.md"));
    let body = &doc[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    body[..end]
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_string())
        .collect()
}

fn check(section: &str, keys: Vec<String>) {
    let real: BTreeSet<String> = keys.into_iter().collect();
    let docs = documented(section);
    assert!(real.len() > 10, "{section}: too few keys derived: {real:?}");
    let undocumented: Vec<_> = real.difference(&docs).collect();
    let unreal: Vec<_> = docs.difference(&real).collect();
    assert!(
        undocumented.is_empty() && unreal.is_empty(),
        "docs/configuration.md, {section}: keys missing from the docs {undocumented:?}; \
         documented keys that do not exist {unreal:?}"
    );
}

#[test]
fn every_train_key_is_documented_and_every_documented_one_is_real() {
    check("Train keys", TrainConfig::keys());
}

#[test]
fn every_serve_key_is_documented_and_every_documented_one_is_real() {
    check("Serve keys", ServeConfig::keys());
}

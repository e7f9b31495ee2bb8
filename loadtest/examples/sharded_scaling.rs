//! Draws the scaling record of sharded training: measured and predicted wall time against the
//! number of machines, one colour pair per data set (`stem.svg` and `stem.png`).
//!
//! ```text
//! cargo run --release -p xmc-loadtest --example sharded_scaling -- SCALING.tsv STEM
//! ```
//!
//! SCALING.tsv is what `experiments/sharded/scaling.py` prints: `name kind machines seconds`,
//! kind `predicted` or `measured`.

use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::path::Path;
use xmc_loadtest::plot::{Axes, Series, write};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [tsv, stem] = args.as_slice() else {
        bail!("usage: sharded_scaling SCALING.tsv STEM");
    };
    let text = std::fs::read_to_string(tsv).with_context(|| format!("reading {tsv}"))?;
    // (name, kind) -> points (log2 machines, seconds), with the machine counts as labels.
    let mut series: BTreeMap<(String, String), Series> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let [name, kind, machines, seconds] = f.as_slice() else {
            bail!("{tsv}:{}: expected 4 tab-separated fields", i + 1);
        };
        let m: f64 = machines
            .parse()
            .with_context(|| format!("{tsv}:{}: machines", i + 1))?;
        let s: f64 = seconds
            .parse()
            .with_context(|| format!("{tsv}:{}: seconds", i + 1))?;
        let entry = series
            .entry((name.to_string(), kind.to_string()))
            .or_insert_with(|| Series {
                name: format!("{name} {kind}"),
                scatter: *kind == "measured",
                ..Series::default()
            });
        entry.points.push((m.log2(), s));
        entry.labels.push(if *kind == "measured" {
            format!("{m} measured")
        } else {
            String::new()
        });
    }
    let series: Vec<Series> = series.into_values().collect();
    write(
        Path::new(stem),
        Axes {
            title: "sharded training: wall time against machines",
            x: "log2(machines)",
            y: "wall seconds (plan + slowest shard + merge)",
            log_y: true,
        },
        &series,
    )
}

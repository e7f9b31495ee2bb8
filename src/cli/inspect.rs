//! `xmc inspect`: a model's metadata, sections, and tree shape.

use crate::bundle::OpenOptions;
use crate::defrag;
use crate::model::Model;
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `xmc inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The model bundle.
    pub model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Gathers everything `inspect` reports, as JSON.
pub fn report(model: &Model, open_ms: f64, verify_ms: f64) -> serde_json::Value {
    let sections: Vec<_> = model
        .bundle()
        .sections()
        .iter()
        .map(|s| json!({"name": s.name, "dtype": s.dtype.to_string(), "bytes": s.byte_len}))
        .collect();
    let trees: Vec<_> = model
        .trees()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut depth_hist = Vec::<u64>::new();
            let mut leaf_sizes = Vec::new();
            for i in 0..t.n_nodes() {
                if t.is_leaf(i) {
                    let d = t.depth(i) as usize;
                    if depth_hist.len() <= d {
                        depth_hist.resize(d + 1, 0);
                    }
                    depth_hist[d] += 1;
                    leaf_sizes.push(t.outputs(i).len());
                }
            }
            leaf_sizes.sort_unstable();
            let mean = leaf_sizes.iter().sum::<usize>() as f64 / leaf_sizes.len().max(1) as f64;
            let mut tree = json!({
                "nodes": t.n_nodes(),
                "leaves": leaf_sizes.len(),
                "leaf_depth_histogram": depth_hist,
                "leaf_size": {
                    "min": leaf_sizes.first(),
                    "median": leaf_sizes.get(leaf_sizes.len() / 2),
                    "max": leaf_sizes.last(),
                    "mean": mean,
                },
                "weights": t.chunks.n_weights(),
                "row_nodes": (0..t.n_nodes()).filter(|&n| t.chunks.has_rows(n)).count(),
            });
            if let (Some(d), Some(obj)) = (model.defrag().get(i), tree.as_object_mut()) {
                obj.insert("defrag".into(), defrag_report(model, i, d));
            }
            tree
        })
        .collect();
    json!({
        "file_bytes": model.bundle().file_len(),
        "format_version": model.bundle().format_version(),
        "open_ms": open_ms,
        "verify_ms": verify_ms,
        "meta": model.meta(),
        "stages": stages(model),
        "sections": sections,
        "trees": trees,
    })
}

/// What the model can do beyond its search, whatever built it: REFRAG's prototypes (over the
/// input features, or per DEFRAG member), the OVA reranker, FIAT, the BP router and the text
/// vectorizer (with its term index or not).
fn stages(model: &Model) -> serde_json::Value {
    let refrag = if model.input_prototypes().is_some() {
        json!("input features")
    } else if model.can_rerank() {
        json!("DEFRAG clusters")
    } else {
        serde_json::Value::Null
    };
    json!({
        "refrag": refrag,
        "rerank_ova": model.can_rerank_ova(),
        "fiat": model.can_impute(),
        "bp": model.bp().is_some(),
        "text": model.text().map(|t| json!({
            "terms": t.n_features(),
            "term_index": model.bundle().section(crate::text::index::SLOTS_SECTION).is_some(),
        })),
    })
}

/// One member's DEFRAG clustering: cluster count, balance factor and normalized entropy
/// (App. C.1), clustering time, and whether FIAT scales and REFRAG prototypes are stored.
fn defrag_report(model: &Model, t: usize, d: &crate::model::MappedDefrag) -> serde_json::Value {
    let seconds = model
        .meta()
        .created
        .seconds
        .get(&format!("tree{t}_defrag_clustering"))
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    json!({
        "clusters": d.n_clusters(),
        "balance_factor": defrag::balance_factor(&d.sizes),
        "normalized_entropy": defrag::normalized_entropy(&d.sizes),
        "clustering_seconds": seconds,
        "fiat": d.has_fiat(),
        "refrag": d.has_prototypes(),
    })
}

/// Runs `xmc inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let model = Model::open(&args.model, &OpenOptions::default())
        .with_context(|| format!("opening model {}", args.model.display()))?;
    let open_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    model
        .verify()
        .with_context(|| format!("verifying model {}", args.model.display()))?;
    let verify_ms = start.elapsed().as_secs_f64() * 1e3;
    let r = report(&model, open_ms, verify_ms);
    if args.json {
        writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(());
    }
    let m = model.meta();
    writeln!(
        std::io::stdout(),
        "model      {} (version {})",
        m.name,
        m.version
    )?;
    writeln!(
        std::io::stdout(),
        "file       {} bytes, format v{}",
        r["file_bytes"],
        r["format_version"]
    )?;
    writeln!(
        std::io::stdout(),
        "open       {open_ms:.3} ms (checksums, weights and names verified in {verify_ms:.1} ms)"
    )?;
    writeln!(
        std::io::stdout(),
        "shape      {} features, {} labels, {} tree(s), loss {:?}, beam {}",
        m.n_features,
        m.n_labels,
        m.trees,
        m.loss,
        m.beam
    )?;
    writeln!(
        std::io::stdout(),
        "names      label names: {}, feature names: {}",
        if m.has_label_names { "yes" } else { "no" },
        if m.has_feature_names { "yes" } else { "no" }
    )?;
    if let Some(h) = &m.heldout {
        writeln!(std::io::stdout(), "held-out   {h}")?;
    }
    writeln!(std::io::stdout(), "stages     {}", r["stages"])?;
    for (t, tree) in r["trees"].as_array().into_iter().flatten().enumerate() {
        writeln!(std::io::stdout(), "tree {t}     {tree}")?;
    }
    writeln!(std::io::stdout(), "sections:")?;
    for s in r["sections"].as_array().into_iter().flatten() {
        writeln!(
            std::io::stdout(),
            "  {:<28} {:>6} {:>12} bytes",
            s["name"].as_str().unwrap_or(""),
            s["dtype"].as_str().unwrap_or(""),
            s["bytes"]
        )?;
    }
    Ok(())
}

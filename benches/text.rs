//! What a text query costs over a vector query, in process, on one thread: the mean time of
//! vectorizing a document with the bundle's own vectorizer and predicting from the result,
//! against predicting alone from the same documents already vectorized (the target: at most 1.3
//! times).
//!
//! Usage: `cargo bench --bench text -- BUNDLE [DATA_DIR]`, where BUNDLE is a model trained from
//! text (`xmc train --train train.jsonl.gz`) and DATA_DIR the data set's directory, holding
//! `test.jsonl.gz` (default: `$XMC_DATASETS/debian-deps-text`). Without a bundle or data it says
//! so and exits cleanly. `XMC_TEXT_BUNDLE` may stand for the first argument.
//!
//! Every test document is vectorized once up front (the "already vectorized" documents). Then
//! rounds alternate the two parts, each round starting with the other one, so that both see the
//! same machine: `predict` runs `Model::predict_into` on each stored vector, `text` runs
//! `TextView::vectorize` on the document's text and `predict_into` on its output, both with warm
//! scratch space. It prints the mean µs per document of each part, their ratio, the median and
//! range of the rounds' own ratios, and the mean of vectorizing alone. It asserts nothing about
//! time. `XMC_TEXT_ROUNDS` sets the number of rounds (default 6).

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;
use xmc::bundle::OpenOptions;
use xmc::model::{Model, PredictOptions, Prediction, Scratch};
use xmc::text::TextScratch;

/// Rounds per part, unless `XMC_TEXT_ROUNDS` says otherwise; each round runs every document once.
const ROUNDS: usize = 6;

#[derive(serde::Deserialize)]
struct Doc {
    text: String,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let bundle = args
        .first()
        .cloned()
        .or_else(|| std::env::var("XMC_TEXT_BUNDLE").ok())
        .map(PathBuf::from);
    let dir = args.get(1).map(PathBuf::from).or_else(|| {
        std::env::var("XMC_DATASETS")
            .ok()
            .map(|d| PathBuf::from(d).join("debian-deps-text"))
    });
    let (Some(bundle), Some(dir)) = (bundle, dir) else {
        println!(
            "text bench skipped: give a text bundle and a data directory \
             (cargo bench --bench text -- BUNDLE DATA_DIR, or XMC_TEXT_BUNDLE and XMC_DATASETS)"
        );
        return Ok(());
    };
    let test = dir.join("test.jsonl.gz");
    if !bundle.exists() || !test.exists() {
        println!(
            "text bench skipped: {} or {} is missing",
            bundle.display(),
            test.display()
        );
        return Ok(());
    }
    let model = Model::open(&bundle, &OpenOptions::default())?;
    let Some(view) = model.text() else {
        anyhow::bail!("{} has no text vectorizer", bundle.display());
    };
    let reader = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(std::fs::File::open(
        &test,
    )?));
    let mut texts = Vec::new();
    for line in reader.lines() {
        let line = line?;
        if !line.trim().is_empty() {
            texts.push(serde_json::from_str::<Doc>(&line)?.text);
        }
    }
    let opts = PredictOptions::default();
    let mut ts = TextScratch::default();
    let (mut scratch, mut out) = (Scratch::default(), Prediction::default());
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    // The already vectorized documents, and a warm-up of both paths.
    let mut rows = Vec::with_capacity(texts.len());
    let (mut terms, mut known) = (0usize, 0usize);
    for t in &texts {
        idx.clear();
        val.clear();
        let s = view.vectorize(t, &mut ts, &mut idx, &mut val);
        terms += s.terms;
        known += s.known_terms;
        model.predict_into(&idx, &val, &opts, &mut scratch, &mut out)?;
        rows.push((idx.clone(), val.clone()));
    }
    let n = texts.len();
    let text_mb = texts.iter().map(String::len).sum::<usize>() as f64 / 1e6;
    println!(
        "{n} documents of {} ({text_mb:.2} MB of text; {:.1} terms, {:.1} known, {:.1} features \
         per document), model {}",
        test.display(),
        terms as f64 / n as f64,
        known as f64 / n as f64,
        rows.iter().map(|r| r.0.len()).sum::<usize>() as f64 / n as f64,
        bundle.display()
    );
    let rounds = std::env::var("XMC_TEXT_ROUNDS")
        .ok()
        .and_then(|r| r.parse::<usize>().ok())
        .filter(|&r| r > 0)
        .unwrap_or(ROUNDS);
    let mut predict_s = 0.0;
    let mut text_s = 0.0;
    let mut vectorize_s = 0.0;
    let mut checksum = 0u64;
    // Each round's own ratio: its two parts ran next to each other, so a slow spell of the
    // machine weighs on both.
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (predict_before, text_before) = (predict_s, text_s);
        for part in 0..3 {
            let part = (part + round) % 3;
            let start = Instant::now();
            match part {
                0 => {
                    for (i, v) in &rows {
                        model.predict_into(i, v, &opts, &mut scratch, &mut out)?;
                        checksum += u64::from(out.labels.first().map_or(0, |l| l.0));
                    }
                    predict_s += start.elapsed().as_secs_f64();
                }
                1 => {
                    for t in &texts {
                        idx.clear();
                        val.clear();
                        view.vectorize(t, &mut ts, &mut idx, &mut val);
                        model.predict_into(&idx, &val, &opts, &mut scratch, &mut out)?;
                        checksum += u64::from(out.labels.first().map_or(0, |l| l.0));
                    }
                    text_s += start.elapsed().as_secs_f64();
                }
                _ => {
                    for t in &texts {
                        idx.clear();
                        val.clear();
                        let s = view.vectorize(t, &mut ts, &mut idx, &mut val);
                        checksum += s.known_terms as u64;
                    }
                    vectorize_s += start.elapsed().as_secs_f64();
                }
            }
        }
        ratios.push((text_s - text_before) / (predict_s - predict_before));
    }
    ratios.sort_by(f64::total_cmp);
    let per = |s: f64| s / (rounds * n) as f64 * 1e6;
    println!("rounds {rounds}, interleaved; mean µs per document, one thread:");
    println!("  predict (already vectorized)  {:>9.2}", per(predict_s));
    println!("  vectorize + predict            {:>9.2}", per(text_s));
    println!("  vectorize alone                {:>9.2}", per(vectorize_s));
    println!(
        "  ratio (vectorize + predict) / predict = {:.3}  (checksum {checksum})",
        text_s / predict_s
    );
    println!(
        "  the rounds' own ratios: median {:.3}, lowest {:.3}, highest {:.3}",
        ratios.get(rounds / 2).copied().unwrap_or(f64::NAN),
        ratios.first().copied().unwrap_or(f64::NAN),
        ratios.last().copied().unwrap_or(f64::NAN)
    );
    Ok(())
}

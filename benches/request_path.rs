//! What a request costs inside the server, without sockets: `/v1/predict` against `/healthz`
//! through the whole `app()` router (every middleware layer), and the parts of a prediction.
//!
//! Opens the bundle in `XMC_BENCH_MODEL` (default `out/serve-debian-deps/b8.xmcb`, the serving
//! model that `scripts/serving_models.sh` trains) and builds the load tester's request bodies
//! (`{"features":[[id,value],...],"k":5}`) from the test split in `XMC_BENCH_DATA` (default
//! `debian-deps` under `XMC_DATASETS`). Then, one thread, rounds alternating so that every part sees
//! the same machine, it prints the mean µs per request of:
//!
//! - `healthz`: `GET /healthz` through `app()` (the HTTP floor's in-process part);
//! - `predict`: `POST /v1/predict` through `app()`, the response body collected;
//! - `search`: `Model::predict_into` alone on the same queries;
//! - `parse`: `serde_json` of the body into `[(u64, f64)]` pairs alone;
//! - `hot`: the search with each query run 8 times in a row, timed per call: the search with its
//!   caches held, so `search - hot` is about what its cache misses cost.
//!
//! `predict - healthz` is what a prediction adds to a request beyond the floor, the part the
//! max-rate scenario's throughput share depends on. No tracing subscriber is installed, so each
//! request's span costs less here than under `xmc serve`, alike for both routes. Run with
//! `cargo bench --bench request_path`.
//! It prints figures and asserts nothing about time.

mod common;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tower::ServiceExt;
use xmc::data;
use xmc::model::{PredictOptions, Prediction, Scratch};
use xmc::serve::{AppState, ServeConfig, app};

/// Rounds per part; each round runs every query once.
const ROUNDS: usize = 5;
/// Queries per round.
const QUERIES: usize = 4000;

#[derive(serde::Deserialize)]
#[allow(dead_code)] // Read only to be parsed.
struct ParsedBody {
    features: Vec<(u64, f64)>,
    k: u64,
}

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let model = std::env::var("XMC_BENCH_MODEL").map_or_else(
        |_| root.join("out/serve-debian-deps/b8.xmcb"),
        PathBuf::from,
    );
    let Some(dir) = common::data_dir("request_path", "debian-deps") else {
        return Ok(());
    };
    if !model.exists() {
        println!(
            "request_path: skipped: {} is missing: run scripts/serving_models.sh, or set \
             XMC_BENCH_MODEL",
            model.display()
        );
        return Ok(());
    }
    let test = data::read_xc_file(&dir.join("test.txt.gz"))?;
    let mut bodies = Vec::new();
    let mut rows = Vec::new();
    for i in 0..test.n_points() {
        let (idx, val) = test.feature_row(i);
        if idx.is_empty() {
            continue;
        }
        let features: Vec<(u32, f32)> = idx.iter().copied().zip(val.iter().copied()).collect();
        bodies.push(Bytes::from(serde_json::to_vec(
            &serde_json::json!({"features": features, "k": 5}),
        )?));
        rows.push((idx.to_vec(), val.to_vec()));
        if bodies.len() == QUERIES {
            break;
        }
    }
    let mean_len = bodies.iter().map(Bytes::len).sum::<usize>() as f64 / bodies.len() as f64;
    println!(
        "{} queries from {} (mean body {mean_len:.0} bytes), model {}",
        bodies.len(),
        dir.display(),
        model.display()
    );

    let mut cfg = ServeConfig::defaults();
    cfg.model = model;
    cfg.pool_threads = 1;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let state = AppState::new(cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    rt.block_on(xmc::serve::reload_now(&state))
        .map_err(|e| anyhow::anyhow!(e))?;
    let loaded = state
        .repo
        .load()
        .default_model()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no model after the load"))?;
    let router = app(Arc::clone(&state));

    let healthz = || async {
        for _ in 0..bodies.len() {
            let req = Request::get("/healthz").body(Body::empty())?;
            let resp = router.clone().oneshot(req).await?;
            anyhow::ensure!(resp.status() == StatusCode::OK);
            let _ = resp.into_body().collect().await?;
        }
        anyhow::Ok(())
    };
    let predict = || async {
        for b in &bodies {
            let req = Request::post("/v1/predict")
                .header("content-type", "application/json")
                .body(Body::from(b.clone()))?;
            let resp = router.clone().oneshot(req).await?;
            anyhow::ensure!(resp.status() == StatusCode::OK, "{}", resp.status());
            let _ = resp.into_body().collect().await?;
        }
        anyhow::Ok(())
    };
    // The search alone; with `repeat` > 1 each of the first `1 / repeat` of the queries runs
    // `repeat` times in a row, so its caches hold the query's part of the model: the search
    // without its cache misses.
    const HOT: usize = 8;
    let search = |repeat: usize| {
        let opts = PredictOptions {
            k: 5,
            ..PredictOptions::default()
        };
        let mut scratch = Scratch::default();
        let mut out = Prediction::default();
        for (idx, val) in rows.iter().take(rows.len() / repeat) {
            for _ in 0..repeat {
                loaded
                    .model
                    .predict_into(idx, val, &opts, &mut scratch, &mut out)?;
            }
        }
        anyhow::Ok(())
    };
    let parse = || {
        for b in &bodies {
            let parsed: ParsedBody = serde_json::from_slice(b)?;
            std::hint::black_box(parsed);
        }
        anyhow::Ok(())
    };

    // One warm-up round of each, then the timed rounds.
    let names = ["healthz", "predict", "search", "parse", "hot"];
    let mut totals = [0f64; 5];
    for round in 0..=ROUNDS {
        for (part, total) in totals.iter_mut().enumerate() {
            let start = Instant::now();
            match part {
                0 => rt.block_on(healthz())?,
                1 => rt.block_on(predict())?,
                2 => search(1)?,
                3 => parse()?,
                _ => search(HOT)?,
            }
            if round > 0 {
                *total += start.elapsed().as_secs_f64();
            }
        }
    }
    // Calls per round: every query once, except the repeated search's whole groups.
    let calls = |part: usize| match part {
        4 => rows.len() / HOT * HOT,
        _ => bodies.len(),
    };
    let per = |part: usize| totals[part] * 1e6 / (ROUNDS * calls(part).max(1)) as f64;
    for (part, name) in names.iter().enumerate() {
        println!("{name:>8}: {:8.2} µs per request", per(part));
    }
    let (h, p) = (per(0), per(1));
    println!(
        "predict - healthz: {:.2} µs; of it search {:.2} and parse {:.2}, the rest {:.2}",
        p - h,
        per(2),
        per(3),
        p - h - per(2) - per(3)
    );
    Ok(())
}

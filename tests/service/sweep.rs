//! `xmc sweep` end to end on a small synthetic power-law data set: one row per λ', the figures
//! in range, the λ > 0 tree unbalanced, and the table and plot written.

use xmc::config::TrainConfig;
use xmc::data::{self, synth::SynthParams};
use xmc::model::PredictOptions;
use xmc::sweep::{self, SweepOptions};

#[test]
fn sweep_reports_every_lambda_and_draws_the_trade_off() {
    let params = SynthParams {
        n: 1500,
        d: 400,
        l: 150,
        zipf: 1.2,
        labels_per_point: 2.0,
        features_per_point: 15,
        seed: 5,
        ..SynthParams::DEFAULT
    };
    let (mut train, test) = data::synth::generate_split(&params, 1200, 300);
    data::l2_normalize_rows(&mut train.features);
    let cfg = TrainConfig::load(None, &["max_leaf=8".into()]).unwrap();
    let options = SweepOptions {
        lambda_primes: vec![0.0, 6.0],
        repeats: 2,
        predict: PredictOptions::default(),
    };
    let mut lines = Vec::new();
    let rows = sweep::run(&cfg, &train, &test, &options, &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        lines.len(),
        2 + 2,
        "one line per model and per round: {lines:?}"
    );
    // λ is stored as f32 in the configuration.
    assert_eq!(rows[0].lambda, 0.0);
    assert!(
        (rows[1].lambda - 12.0 / 7.0).abs() < 1e-6,
        "{}",
        rows[1].lambda
    );
    for r in &rows {
        for v in [r.p1, r.p5, r.p1_beam, r.p5_beam, r.early_stopped_frac] {
            assert!((0.0..=1.0).contains(&v), "{r:?}");
        }
        assert!(r.depth1 >= 1.0 && r.depth1 <= r.depth5, "{r:?}");
        assert!(r.nodes_evaluated_mean >= 1.0 && r.nodes_evaluated_mean_beam >= 1.0);
        assert!(r.latency_us_mean > 0.0 && r.latency_us_mean_beam > 0.0);
    }
    // The balanced tree is complete; the frequency-weighted one is not.
    assert!(rows[1].max_depth > rows[0].max_depth, "{rows:?}");

    let md = sweep::markdown(&rows);
    assert_eq!(md.lines().count(), 4, "{md}");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("sweep.svg");
    sweep::plot::write_svg(&rows, "synthetic", &svg).unwrap();
    // SVG escapes the prime of λ'.
    let text = std::fs::read_to_string(&svg)
        .unwrap()
        .replace("&apos;", "'");
    assert!(text.contains("λ'=6"), "the plot labels its points");
}

#[test]
fn an_empty_sweep_is_an_error() {
    let (train, test) = data::synth::generate_split(
        &SynthParams {
            n: 20,
            l: 5,
            ..SynthParams::DEFAULT
        },
        10,
        10,
    );
    let options = SweepOptions {
        lambda_primes: Vec::new(),
        ..SweepOptions::default()
    };
    let err = sweep::run(&TrainConfig::DEFAULT, &train, &test, &options, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("no λ'"), "{err}");
}

//! Loads an omikuji model, then predicts every point of an XC-format test file one at a time on
//! this thread, and prints the per-query latency (mean, p50, p99 in µs) and P@1.

use std::io::BufRead;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: omikuji-latency MODEL_DIR TEST.txt [BEAM]".into());
    }
    let beam: usize = args.get(3).map_or(Ok(10), |b| b.parse())?;
    let mut model = omikuji::Model::load(&args[1])?;
    // The omikuji CLI's default before testing.
    model.densify_weights(0.1);
    let file = std::io::BufReader::new(std::fs::File::open(&args[2])?);
    let mut queries = Vec::new();
    for (i, line) in file.lines().enumerate() {
        let line = line?;
        if i == 0 && !line.contains(':') {
            continue;
        }
        let (labels, feats) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let labels: Vec<u32> = labels
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse())
            .collect::<Result<_, _>>()?;
        let mut fv: Vec<(u32, f32)> = Vec::new();
        for tok in feats.split_whitespace() {
            let (f, v) = tok.split_once(':').ok_or("bad token")?;
            fv.push((f.parse()?, v.parse()?));
        }
        fv.sort_unstable_by_key(|p| p.0);
        queries.push((labels, fv));
    }
    // One untimed pass warms caches and page tables, as `xmc eval` has after open.
    for (_, fv) in queries.iter().take(100) {
        std::hint::black_box(model.predict(fv, beam));
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut hits = 0usize;
    for (labels, fv) in &queries {
        let start = Instant::now();
        let pred = model.predict(fv, beam);
        times.push(start.elapsed().as_secs_f64() * 1e6);
        if let Some(&(top, _)) = pred.first() {
            if labels.contains(&top) {
                hits += 1;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let n = times.len().max(1);
    let mean = times.iter().sum::<f64>() / n as f64;
    let pct = |p: f64| times[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    println!(
        "{{\"n\":{},\"p@1\":{:.4},\"latency_us_mean\":{:.1},\"latency_us_p50\":{:.1},\"latency_us_p99\":{:.1}}}",
        queries.len(),
        hits as f64 / n as f64,
        mean,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}

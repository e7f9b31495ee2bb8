//! Parse throughput of `read_xc_file` on a ~100 MB synthetic XC file, plain and gzip.
//!
//! Prints MB/s of decompressed text (and, for gzip, of the compressed file); best of 3 runs.
//! Run with `cargo bench --bench parse`.

use std::path::Path;
use std::time::Instant;

use xmc::data::{SynthParams, generate, read_xc_file, write_xc_file};

fn best_of_3(path: &Path) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            let ds = read_xc_file(path).expect("benchmark file reads");
            std::hint::black_box(ds.features.nnz());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let params = SynthParams {
        n: 170_000,
        d: 200_000,
        l: 200_000,
        ..SynthParams::DEFAULT
    };
    let ds = generate(&params);
    let plain = dir.path().join("bench.txt");
    let gz = dir.path().join("bench.txt.gz");
    write_xc_file(&ds, &plain).expect("write plain");
    write_xc_file(&ds, &gz).expect("write gzip");
    let mb = |p: &Path| std::fs::metadata(p).expect("metadata").len() as f64 / 1e6;
    let (text_mb, gz_mb) = (mb(&plain), mb(&gz));
    println!(
        "file: {} points, {:.1} MB text, {:.1} MB gzip, {} threads",
        ds.n_points(),
        text_mb,
        gz_mb,
        rayon::current_num_threads()
    );
    let t = best_of_3(&plain);
    println!("plain: {t:.3} s, {:.0} MB/s", text_mb / t);
    let t = best_of_3(&gz);
    println!(
        "gzip:  {t:.3} s, {:.0} MB/s of text, {:.0} MB/s of compressed file",
        text_mb / t,
        gz_mb / t
    );
}

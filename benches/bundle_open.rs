//! How long opening a bundle takes, and that it does not grow with the file's size.
//!
//! Writes two bundles with the same 16 sections, about 10 MB and about 200 MB in all, into a
//! temporary directory, then prints the median time of many opens (structural checks only, no
//! checksum verification, no prefaulting) and the median time of a `verify_checksums` pass for
//! each. A third, 10 MB bundle with 4096 sections shows what open time does grow with: the
//! number of sections.
//!
//! Then whole models: `Model::open` without verification (the container plus the O(nodes +
//! labels) structural checks) and with it (every checksum, weight entry and name), on the
//! shipped default model and on each bundle named in `XMC_BENCH_MODELS` (comma-separated
//! paths, e.g. a debian-deps model, many times its size).
//! Run with `cargo bench --bench bundle_open`. It prints figures and asserts nothing about time.

use std::path::Path;
use std::time::{Duration, Instant};

use xmc::bundle::{Bundle, BundleWriter, FormatError, OpenOptions};
use xmc::model::Model;

const OPENS: usize = 301;

fn write_bundle(path: &Path, total_bytes: usize, sections: usize) -> Result<u64, FormatError> {
    let per_section = total_bytes / sections / 4;
    let weights: Vec<f32> = (0..per_section).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let ids: Vec<u32> = (0..per_section as u32).collect();
    let mut writer = BundleWriter::new();
    for s in 0..sections / 2 {
        writer.add_f32(&format!("block.{s}.weights"), &weights)?;
        writer.add_u32(&format!("block.{s}.ids"), &ids)?;
    }
    writer.write_atomic(path)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn measure(path: &Path) -> Result<(Duration, Duration, Duration), FormatError> {
    let fast = OpenOptions {
        verify_checksums: false,
        prefault: false,
        yield_between_steps: false,
    };
    let mut opens = Vec::with_capacity(OPENS);
    for _ in 0..OPENS {
        let start = Instant::now();
        let bundle = Bundle::open(path, &fast)?;
        opens.push(start.elapsed());
        std::hint::black_box(&bundle);
    }
    let bundle = Bundle::open(path, &fast)?;
    let mut verifies = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        bundle.verify_checksums()?;
        verifies.push(start.elapsed());
    }
    let start = Instant::now();
    let full = Bundle::open(
        path,
        &OpenOptions {
            verify_checksums: true,
            prefault: true,
            yield_between_steps: false,
        },
    )?;
    let full_open = start.elapsed();
    std::hint::black_box(&full);
    Ok((median(opens), median(verifies), full_open))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    println!("bundle_open: median of {OPENS} opens and of 3 verify_checksums passes");
    println!(
        "{:>8} {:>9} {:>16} {:>16} {:>12} {:>22}",
        "size MB",
        "sections",
        "open (no verify)",
        "verify_checksums",
        "verify GB/s",
        "open(verify+prefault)"
    );
    for (megabytes, sections) in [(10usize, 16usize), (200, 16), (10, 4096)] {
        let path = dir
            .path()
            .join(format!("bench-{megabytes}mb-{sections}.xmcb"));
        let len = write_bundle(&path, megabytes << 20, sections)?;
        let (open, verify, full) = measure(&path)?;
        println!(
            "{:>8.1} {:>9} {:>13.1} µs {:>13.2} ms {:>12.2} {:>19.2} ms",
            len as f64 / (1 << 20) as f64,
            sections,
            open.as_secs_f64() * 1e6,
            verify.as_secs_f64() * 1e3,
            len as f64 / verify.as_secs_f64() / 1e9,
            full.as_secs_f64() * 1e3,
        );
        std::fs::remove_file(&path)?;
    }

    let mut models = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("models/default.xmcb")];
    if let Ok(list) = std::env::var("XMC_BENCH_MODELS") {
        models.extend(list.split(',').filter(|p| !p.is_empty()).map(Into::into));
    }
    println!("\nModel::open: median of {OPENS} opens without verification, of 3 with");
    println!(
        "{:>10} {:>12} {:>18} {:>16}  model",
        "size MB", "labels", "open (structure)", "open (verify)"
    );
    let quick = OpenOptions::default();
    let verify = OpenOptions {
        verify_checksums: true,
        prefault: false,
        yield_between_steps: false,
    };
    for path in &models {
        let len = std::fs::metadata(path)?.len();
        let time =
            |options: &OpenOptions, n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
                let mut times = Vec::with_capacity(n);
                for _ in 0..n {
                    let start = Instant::now();
                    let model = Model::open(path, options)?;
                    times.push(start.elapsed());
                    std::hint::black_box(&model);
                }
                Ok(median(times))
            };
        let open = time(&quick, OPENS)?;
        let full = time(&verify, 3)?;
        let labels = Model::open(path, &quick)?.meta().n_labels;
        println!(
            "{:>10.1} {:>12} {:>15.3} ms {:>13.1} ms  {}",
            len as f64 / (1 << 20) as f64,
            labels,
            open.as_secs_f64() * 1e3,
            full.as_secs_f64() * 1e3,
            path.display()
        );
    }
    Ok(())
}

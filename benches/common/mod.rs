//! What the benches on real data share: where they find a data set.

use std::path::PathBuf;

/// The directory of the data set `name` (e.g. `debian-deps`, holding `train.txt.gz` and
/// `test.txt.gz`): `XMC_BENCH_DATA` when it is set, else `name` under the directory that
/// `XMC_DATASETS` names. When neither gives a directory that exists, it prints why and returns
/// `None`, and the bench then skips: a clone without the data sets still runs `cargo bench`.
pub fn data_dir(bench: &str, name: &str) -> Option<PathBuf> {
    let dir = match (
        std::env::var_os("XMC_BENCH_DATA"),
        std::env::var_os("XMC_DATASETS"),
    ) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(root)) => PathBuf::from(root).join(name),
        (None, None) => {
            println!(
                "{bench}: skipped: set XMC_DATASETS to a directory holding {name}/, \
                 or XMC_BENCH_DATA to the data set's directory"
            );
            return None;
        }
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("{bench}: skipped: {} is not a directory", dir.display());
        None
    }
}

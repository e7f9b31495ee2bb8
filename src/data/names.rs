//! Name files: one label or feature name per line, so ids can be shown to people.

use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{DataError, input};

/// Reads one name per line from a plain or gzip file. Line ends (`\n` or `\r\n`) are removed;
/// line `i` (0-based) names id `i`.
pub fn read_names(path: &Path) -> Result<Vec<String>, DataError> {
    let io = |error| DataError::Io {
        file: input::display_name(path),
        error,
    };
    let reader = BufReader::new(input::open(path)?);
    let mut names = Vec::new();
    for line in reader.split(b'\n') {
        let mut line = line.map_err(io)?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        names.push(String::from_utf8_lossy(&line).into_owned());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_plain_and_gzip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("names.txt");
        std::fs::write(&plain, "alpha\r\nbeta\n\ngamma").expect("write");
        let want = vec!["alpha", "beta", "", "gamma"];
        assert_eq!(read_names(&plain).expect("plain"), want);

        let gz = dir.path().join("names.bin");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"alpha\r\nbeta\n\ngamma\n").expect("encode");
        std::fs::write(&gz, enc.finish().expect("finish")).expect("write");
        assert_eq!(read_names(&gz).expect("gzip"), want);
    }
}

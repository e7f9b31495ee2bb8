//! The prediction file: one line per point, `label:score label:score ...`, best first. An empty
//! line is a point with no predictions.

use std::io::{BufRead, Write};
use std::path::Path;
use thiserror::Error;

/// Why a prediction file could not be read.
#[derive(Debug, Error)]
pub enum PredFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A token is malformed or out of range.
    #[error("{path} line {line}: {problem} in token `{token}`")]
    Token {
        /// The file.
        path: String,
        /// The 1-based line number.
        line: usize,
        /// The offending token.
        token: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// One point's predictions, best first.
pub type Ranked = Vec<(u32, f32)>;

/// Reads a prediction file (plain or gzip). Label ids must be below `n_labels` when it is given.
pub fn read_predictions(
    path: &Path,
    n_labels: Option<usize>,
) -> Result<Vec<Ranked>, PredFileError> {
    let name = path.display().to_string();
    let io = |source| PredFileError::Io {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = std::io::BufReader::new(file);
    let gz = reader.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> = if gz {
        Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
            reader,
        )))
    } else {
        Box::new(reader)
    };
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        out.push(
            parse_line(&line, n_labels).map_err(|(token, problem)| PredFileError::Token {
                path: name.clone(),
                line: i + 1,
                token,
                problem,
            })?,
        );
    }
    Ok(out)
}

/// Parses one line; an error is (token, problem).
pub fn parse_line(line: &str, n_labels: Option<usize>) -> Result<Ranked, (String, String)> {
    let mut out = Vec::new();
    for tok in line.split_ascii_whitespace() {
        let err = |m: &str| (tok.to_string(), m.to_string());
        let (l, s) = tok.split_once(':').ok_or_else(|| err("no `:`"))?;
        let l: u32 = l
            .parse()
            .map_err(|_| err("the label is not a non-negative integer"))?;
        let s: f32 = s.parse().map_err(|_| err("the score is not a number"))?;
        if !s.is_finite() {
            return Err(err("the score is not finite"));
        }
        if let Some(n) = n_labels {
            if l as usize >= n {
                return Err(err(&format!("label {l} is not below L = {n}")));
            }
        }
        out.push((l, s));
    }
    Ok(out)
}

/// Writes predictions in the format [`read_predictions`] reads.
pub fn write_predictions<W: Write>(preds: &[Ranked], mut w: W) -> std::io::Result<()> {
    for p in preds {
        let mut first = true;
        for &(l, s) in p {
            if !first {
                w.write_all(b" ")?;
            }
            first = false;
            write!(w, "{l}:{s}")?;
        }
        w.write_all(b"\n")?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let preds = vec![vec![(3, 0.5), (1, 0.25)], vec![], vec![(0, 1.0)]];
        let mut buf = Vec::new();
        write_predictions(&preds, &mut buf).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pred.txt");
        std::fs::write(&p, &buf).unwrap();
        assert_eq!(read_predictions(&p, Some(4)).unwrap(), preds);
    }

    #[test]
    fn malformed_tokens_name_line_and_token() {
        let dir = tempfile::tempdir().unwrap();
        for (text, token) in [
            ("1:0.5\n2:x\n", "2:x"),
            ("1:0.5\n7\n", "7"),
            ("1:0.5 -1:0.2\n", "-1:0.2"),
            ("1:0.5\n\n2:NaN\n", "2:NaN"),
            ("9:0.1\n", "9:0.1"),
        ] {
            let p = dir.path().join("bad.txt");
            std::fs::write(&p, text).unwrap();
            let err = read_predictions(&p, Some(5)).unwrap_err().to_string();
            assert!(err.contains(&format!("`{token}`")), "{err}");
            assert!(err.contains("line"), "{err}");
        }
    }
}

//! Errors of the data layer: every malformed input names its file, its 1-based line and the
//! offending token, so a user can open the file at the right place and fix it.

use std::fmt;

/// An error while reading or writing a data file.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The underlying file or stream failed (this includes a truncated or corrupt gzip stream).
    ///
    /// The I/O error is shown in the message rather than chained as a `source`, so that
    /// `anyhow` reports do not print it twice.
    #[error("{file}: {error}")]
    Io {
        /// The file (or stream name) being read or written.
        file: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// One line of the file is malformed.
    #[error("{file} line {line}: {problem}")]
    Line {
        /// The file (or stream name) being read.
        file: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        problem: LineProblem,
    },
    /// The header announced a number of points that differs from the number of data lines.
    #[error("{file}: header announces {expected} points but the file holds {found}")]
    CountMismatch {
        /// The file (or stream name) being read.
        file: String,
        /// The point count from the header.
        expected: usize,
        /// The number of data lines found.
        found: usize,
    },
    /// The file holds no bytes at all.
    #[error("{file}: the file is empty")]
    Empty {
        /// The file (or stream name) being read.
        file: String,
    },
}

/// What is wrong with one line of an XC file.
#[derive(Debug, Clone, PartialEq)]
pub enum LineProblem {
    /// A `id:value` token that does not parse.
    BadFeatureToken(String),
    /// A label id that does not parse.
    BadLabelToken(String),
    /// A feature value that is NaN or infinite.
    NonFiniteValue(String),
    /// A feature id at or beyond the header's feature count.
    FeatureOutOfRange {
        /// The feature id found.
        id: u64,
        /// The feature count from the header.
        d: usize,
    },
    /// A label id at or beyond the header's label count.
    LabelOutOfRange {
        /// The label id found.
        id: u64,
        /// The label count from the header.
        l: usize,
    },
    /// Summing the duplicates of a feature overflowed to infinity.
    DuplicateSumOverflow(u32),
    /// The header has three integers but one does not fit.
    BadHeader(String),
    /// A JSON Lines line is not valid UTF-8 from this byte of the line on.
    InvalidUtf8 {
        /// The 0-based offset of the first bad byte in the line.
        byte: usize,
    },
    /// A JSON Lines line is not valid JSON, or not an object.
    InvalidJson(String),
    /// A field of a JSON Lines record is missing or of the wrong type.
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadFeatureToken(t) => write!(f, "bad feature token {t:?}"),
            Self::BadLabelToken(t) => write!(f, "bad label token {t:?}"),
            Self::NonFiniteValue(t) => write!(f, "non-finite feature value {t:?}"),
            Self::FeatureOutOfRange { id, d } => {
                write!(
                    f,
                    "feature id {id} is not below the header's feature count {d}"
                )
            }
            Self::LabelOutOfRange { id, l } => {
                write!(f, "label id {id} is not below the header's label count {l}")
            }
            Self::DuplicateSumOverflow(id) => {
                write!(f, "summing the duplicates of feature {id} overflows")
            }
            Self::BadHeader(t) => write!(f, "bad header {t:?}"),
            Self::InvalidUtf8 { byte } => write!(f, "invalid UTF-8 at byte {byte} of the line"),
            Self::InvalidJson(m) => write!(f, "invalid JSON: {m}"),
            Self::Field { field, problem } => write!(f, "field `{field}` {problem}"),
        }
    }
}

/// Shows at most 64 bytes of a token, lossily decoded, so an error message stays readable.
pub(crate) fn show_token(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    if bytes.len() <= MAX {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("{}...", String::from_utf8_lossy(&bytes[..MAX]))
    }
}

//! JSON Lines text data: one `{"id"?: .., "text": "..", "labels": ["name", ..]}` object a line,
//! plain or gzip, read in chunks of lines so that a file of any size streams through.

use crate::data::{DataError, LineProblem};
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The two data formats `xmc` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    /// The Extreme Classification Repository's sparse text format.
    Xc,
    /// JSON Lines with `text` and label names.
    Jsonl,
}

/// The format of the file at `path`, from its content: JSON Lines when its first non-blank byte
/// (after gzip decompression) is `{`, else XC.
pub fn detect_format(path: &Path) -> Result<DataFormat, DataError> {
    let mut reader = BufReader::new(crate::data::open_input(path)?);
    loop {
        let buf = reader.fill_buf().map_err(|error| DataError::Io {
            file: path.display().to_string(),
            error,
        })?;
        if buf.is_empty() {
            return Ok(DataFormat::Xc);
        }
        if let Some(&b) = buf.iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(if b == b'{' {
                DataFormat::Jsonl
            } else {
                DataFormat::Xc
            });
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// One parsed record. `text` borrows from the line when it holds no escapes.
#[derive(Debug)]
pub struct Record<'a> {
    /// The text.
    pub text: Cow<'a, str>,
    /// The label names (empty when the line has no `labels`).
    pub labels: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Fast<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
    #[serde(default, borrow)]
    labels: Option<Vec<Cow<'a, str>>>,
}

/// Parses one line. With `need_labels`, a line without `labels` is refused. The errors say which
/// field is wrong; the caller adds the file and line.
pub fn parse_line(line: &[u8], need_labels: bool) -> Result<Record<'_>, LineProblem> {
    let text = std::str::from_utf8(line).map_err(|e| LineProblem::InvalidUtf8 {
        byte: e.valid_up_to(),
    })?;
    match serde_json::from_str::<Fast<'_>>(text) {
        Ok(Fast { text, labels }) => match labels {
            Some(labels) => Ok(Record { text, labels }),
            None if need_labels => Err(field("labels", "is missing")),
            None => Ok(Record {
                text,
                labels: Vec::new(),
            }),
        },
        Err(_) => Err(diagnose(text, need_labels)),
    }
}

fn field(name: &'static str, problem: &str) -> LineProblem {
    LineProblem::Field {
        field: name,
        problem: problem.to_string(),
    }
}

/// Says precisely why `line` did not parse as a record (the slow path, taken on errors only).
fn diagnose(line: &str, need_labels: bool) -> LineProblem {
    let value: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return LineProblem::InvalidJson(e.to_string()),
    };
    let Some(obj) = value.as_object() else {
        return LineProblem::InvalidJson("the line is not a JSON object".into());
    };
    match obj.get("text") {
        None => return field("text", "is missing"),
        Some(v) if !v.is_string() => return field("text", &format!("is not a string: {v}")),
        Some(_) => {}
    }
    match obj.get("labels") {
        None if need_labels => field("labels", "is missing"),
        None | Some(serde_json::Value::Null) => {
            LineProblem::InvalidJson("the line does not parse as a record".into())
        }
        Some(serde_json::Value::Array(items)) => {
            match items.iter().enumerate().find(|(_, v)| !v.is_string()) {
                Some((i, v)) => LineProblem::Field {
                    field: "labels",
                    problem: format!("item {i} is not a string: {v}"),
                },
                None => LineProblem::InvalidJson("the line does not parse as a record".into()),
            }
        }
        Some(v) => field("labels", &format!("is not an array: {v}")),
    }
}

/// A chunk of lines: their bytes back to back, and per line its 1-based number and range.
#[derive(Debug, Default)]
pub struct LineChunk {
    bytes: Vec<u8>,
    lines: Vec<(usize, usize, usize)>,
}

impl LineChunk {
    /// The number of (non-blank) lines.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether the chunk holds no line.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Line `i` of the chunk: its 1-based number in the file, and its bytes.
    pub fn line(&self, i: usize) -> Option<(usize, &[u8])> {
        let &(no, s, e) = self.lines.get(i)?;
        Some((no, self.bytes.get(s..e)?))
    }
}

/// Reads a JSONL file in chunks of non-blank lines.
pub struct LineReader {
    reader: BufReader<Box<dyn Read>>,
    file: String,
    line_no: usize,
}

impl std::fmt::Debug for LineReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineReader")
            .field("file", &self.file)
            .field("line_no", &self.line_no)
            .finish()
    }
}

impl LineReader {
    /// Opens `path`, plain or gzip.
    pub fn open(path: &Path) -> Result<Self, DataError> {
        Ok(LineReader {
            reader: BufReader::with_capacity(1 << 16, crate::data::open_input(path)?),
            file: path.display().to_string(),
            line_no: 0,
        })
    }

    /// The file's name, for errors.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Fills `chunk` with up to about `max_bytes` of lines (at least one line, unless the file
    /// is done); returns false at the end of the file.
    pub fn next_chunk(
        &mut self,
        chunk: &mut LineChunk,
        max_bytes: usize,
    ) -> Result<bool, DataError> {
        chunk.bytes.clear();
        chunk.lines.clear();
        while chunk.bytes.len() < max_bytes {
            let start = chunk.bytes.len();
            let n = self
                .reader
                .read_until(b'\n', &mut chunk.bytes)
                .map_err(|error| DataError::Io {
                    file: self.file.clone(),
                    error,
                })?;
            if n == 0 {
                break;
            }
            self.line_no += 1;
            let mut end = chunk.bytes.len();
            while end > start
                && chunk
                    .bytes
                    .get(end - 1)
                    .is_some_and(u8::is_ascii_whitespace)
            {
                end -= 1;
            }
            if end == start {
                chunk.bytes.truncate(start);
            } else {
                chunk.lines.push((self.line_no, start, end));
            }
        }
        Ok(!chunk.lines.is_empty())
    }
}

/// Every record of the JSONL file at `path`, owned: the texts, and each one's label names
/// (empty for a line without `labels`, unless `need_labels` refuses such a line).
pub fn read_records(
    path: &Path,
    need_labels: bool,
) -> Result<(Vec<String>, Vec<Vec<String>>), DataError> {
    let mut reader = LineReader::open(path)?;
    let mut chunk = LineChunk::default();
    let (mut texts, mut labels) = (Vec::new(), Vec::new());
    while reader.next_chunk(&mut chunk, 8 << 20)? {
        for (no, line) in (0..chunk.len()).filter_map(|i| chunk.line(i)) {
            let rec =
                parse_line(line, need_labels).map_err(|p| line_error(reader.file(), no, p))?;
            texts.push(rec.text.into_owned());
            labels.push(rec.labels.into_iter().map(Cow::into_owned).collect());
        }
    }
    Ok((texts, labels))
}

/// The error for line `line` of `file`.
pub fn line_error(file: &str, line: usize, problem: LineProblem) -> DataError {
    DataError::Line {
        file: file.to_string(),
        line,
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named() {
        let p = |s: &str| {
            parse_line(s.as_bytes(), true)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert!(p(r#"{"labels": ["a"]}"#).contains("field `text` is missing"));
        assert!(p(r#"{"text": 3, "labels": ["a"]}"#).contains("field `text` is not a string"));
        assert!(p(r#"{"text": "x", "labels": ["a", 2]}"#).contains("item 1 is not a string"));
        assert!(p(r#"{"text": "x", "labels": "a"}"#).contains("field `labels` is not an array"));
        assert!(p(r#"{"text": "x"}"#).contains("field `labels` is missing"));
        assert!(p(r#"{"text": "x", "#).contains("invalid JSON"));
        assert!(p("[1]").contains("not a JSON object"));
        let e = parse_line(b"{\"text\": \"\xff\"}", false).unwrap_err();
        assert_eq!(e, LineProblem::InvalidUtf8 { byte: 10 });
        let r = parse_line(br#"{"id": 7, "text": "a\nb", "labels": ["x"]}"#, true).unwrap();
        assert_eq!((r.text.as_ref(), r.labels.len()), ("a\nb", 1));
        let r = parse_line(br#"{"text": "a"}"#, false).unwrap();
        assert!(r.labels.is_empty());
    }
}

//! Reading the Extreme Classification Repository ("XC") sparse text format.
//!
//! A file optionally opens with a header line `N D L` (three bare non-negative integers). Each
//! following line is one point: `l1,l2,... f:v f:v ...`. A point without labels starts with a
//! space; an empty line is a point with neither labels nor features. Without a header the file is
//! in the LIBSVM multi-label form and N, D and L are inferred (D = largest feature id + 1, L =
//! largest label id + 1).
//!
//! The reader streams: it reads the (possibly gzip-compressed) input in large blocks cut at line
//! boundaries, parses each block in parallel with rayon on sub-chunks cut at newlines, and appends
//! the results in order. Memory stays proportional to the output plus one block. The result does
//! not depend on the thread count.
//!
//! Each output row is sorted by column. Duplicate feature ids are summed, duplicate labels are
//! dropped, and features whose (summed) value is zero are dropped, as a sparse matrix stores no
//! zeros.

use std::io::Read;
use std::path::Path;

use rayon::prelude::*;

use super::error::show_token;
use super::{DataError, Dataset, LineProblem, SparseMatrix, input};

/// How many bytes of decompressed text are parsed at once.
const BLOCK_BYTES: usize = 8 << 20;

/// Reads an XC file, plain or gzip (recognised by its magic bytes).
pub fn read_xc_file(path: &Path) -> Result<Dataset, DataError> {
    let reader = input::open(path)?;
    let name = path.file_name().map_or_else(
        || input::display_name(path),
        |n| n.to_string_lossy().into_owned(),
    );
    read_decoded(reader, &name)
}

/// Reads XC text from `reader`, plain or gzip; `name` is used in error messages.
pub fn read_xc<R: Read>(reader: R, name: &str) -> Result<Dataset, DataError> {
    let io = |error| DataError::Io {
        file: name.to_owned(),
        error,
    };
    let decoded = input::decoded(reader).map_err(io)?;
    read_decoded(decoded, name)
}

/// The header line `N D L`.
#[derive(Clone, Copy, Debug)]
struct Header {
    n: usize,
    d: usize,
    l: usize,
}

/// The exclusive upper bounds that ids are checked against while parsing.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// `Some(d)` when a header fixes the feature count.
    d: Option<usize>,
    /// `Some(l)` when a header fixes the label count.
    l: Option<usize>,
}

/// The parsed rows of one chunk of text, in CSR pieces without the leading zero of `indptr`.
#[derive(Debug, Default)]
struct Rows {
    feat_ends: Vec<usize>,
    feat_idx: Vec<u32>,
    feat_val: Vec<f32>,
    lab_ends: Vec<usize>,
    lab_idx: Vec<u32>,
    /// Largest feature id + 1 seen.
    d_seen: usize,
    /// Largest label id + 1 seen.
    l_seen: usize,
}

impl Rows {
    fn n_rows(&self) -> usize {
        self.feat_ends.len()
    }

    /// Appends `other`, shifting its row ends.
    fn append(&mut self, other: Rows) {
        let f0 = self.feat_idx.len();
        let l0 = self.lab_idx.len();
        self.feat_ends
            .extend(other.feat_ends.iter().map(|e| e + f0));
        self.lab_ends.extend(other.lab_ends.iter().map(|e| e + l0));
        self.feat_idx.extend_from_slice(&other.feat_idx);
        self.feat_val.extend_from_slice(&other.feat_val);
        self.lab_idx.extend_from_slice(&other.lab_idx);
        self.d_seen = self.d_seen.max(other.d_seen);
        self.l_seen = self.l_seen.max(other.l_seen);
    }
}

/// A line problem with its 0-based line index relative to the start of its chunk.
type ChunkError = (usize, LineProblem);

fn read_decoded(mut reader: Box<dyn Read + '_>, name: &str) -> Result<Dataset, DataError> {
    let io = |error| DataError::Io {
        file: name.to_owned(),
        error,
    };
    let mut buf: Vec<u8> = Vec::new();
    // Whole lines of the previous block, parsed while the next block is read.
    let mut pending: Vec<u8> = Vec::new();
    // Blocks start small and double, so a tiny input never pays for a full block buffer.
    let mut block = 1 << 16;
    let mut rows = Rows::default();
    let mut header: Option<Header> = None;
    let mut limits = Limits { d: None, l: None };
    // The 1-based number of the next line to parse.
    let mut next_line = 1usize;
    let mut first_block = true;
    let mut eof = false;
    let mut total_bytes = 0usize;
    loop {
        // Reading (and decompressing) the next block overlaps with parsing the pending one. The
        // reader stays on this thread, so it need not be `Send`.
        let mut parsed = Ok(next_line);
        let mut filled = Ok(eof);
        let filled_from = buf.len();
        rayon::in_place_scope(|s| {
            if !pending.is_empty() {
                s.spawn(|_| parsed = parse_block(&pending, limits, next_line, name, &mut rows));
            }
            if !eof {
                filled = fill(reader.as_mut(), &mut buf, block);
            }
        });
        next_line = parsed?;
        pending.clear();
        if !eof {
            eof = filled.map_err(io)?;
            block = (block * 2).min(BLOCK_BYTES);
            total_bytes += buf.len() - filled_from;
        }
        if first_block && total_bytes == 0 && eof {
            return Err(DataError::Empty {
                file: name.to_owned(),
            });
        }
        if eof && buf.is_empty() {
            break;
        }
        // Hand over whole lines; at end of input, everything.
        let cut = if eof {
            buf.len()
        } else {
            match buf.iter().rposition(|&b| b == b'\n') {
                Some(p) => p + 1,
                // A single line longer than the block: keep reading.
                None => continue,
            }
        };
        let mut text = &buf[..cut];
        if first_block {
            first_block = false;
            let first_len = text
                .iter()
                .position(|&b| b == b'\n')
                .map_or(text.len(), |p| p + 1);
            match parse_header(&text[..first_len]) {
                Some(Ok(h)) => {
                    header = Some(h);
                    limits = Limits {
                        d: Some(h.d),
                        l: Some(h.l),
                    };
                    text = &text[first_len..];
                    next_line += 1;
                }
                Some(Err(problem)) => {
                    return Err(DataError::Line {
                        file: name.to_owned(),
                        line: 1,
                        problem,
                    });
                }
                None => {}
            }
        }
        pending.extend_from_slice(text);
        buf.drain(..cut);
    }
    assemble(rows, header, name)
}

/// Appends input to `buf` until it holds at least `want` bytes (and at least 64 KiB more than
/// before) or the input ends; returns whether it ended.
fn fill(reader: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<bool> {
    let start = buf.len();
    let target = want.max(start + (1 << 16));
    buf.resize(target, 0);
    let mut filled = start;
    let mut eof = false;
    while filled < target {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(k) => filled += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(filled);
                return Err(e);
            }
        }
    }
    buf.truncate(filled);
    Ok(eof)
}

/// Recognises a header: exactly three whitespace-separated tokens, each all ASCII digits.
/// Returns `None` when the line is not a header.
fn parse_header(line: &[u8]) -> Option<Result<Header, LineProblem>> {
    let line = strip_eol(line);
    let mut tokens = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|t| !t.is_empty());
    let mut nums = [0u64; 3];
    for slot in &mut nums {
        let t = tokens.next()?;
        if !t.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *slot = match parse_u64(t) {
            Some(v) => v,
            None => return Some(Err(LineProblem::BadHeader(show_token(line)))),
        };
    }
    if tokens.next().is_some() {
        return None;
    }
    let max = u64::from(u32::MAX);
    if nums[1] > max || nums[2] > max || usize::try_from(nums[0]).is_err() {
        return Some(Err(LineProblem::BadHeader(show_token(line))));
    }
    // The casts are lossless: the checks above bound every value by `usize` or `u32::MAX`.
    Some(Ok(Header {
        n: nums[0] as usize,
        d: nums[1] as usize,
        l: nums[2] as usize,
    }))
}

/// Parses one block (whole lines only) in parallel and appends its rows; returns the 1-based
/// number of the line after the block.
fn parse_block(
    text: &[u8],
    limits: Limits,
    first_line: usize,
    name: &str,
    rows: &mut Rows,
) -> Result<usize, DataError> {
    let chunks = split_at_newlines(text, rayon::current_num_threads() * 4);
    let parsed: Vec<Result<Rows, ChunkError>> = chunks
        .par_iter()
        .map(|chunk| parse_chunk(chunk, limits))
        .collect();
    let mut line = first_line;
    for result in parsed {
        match result {
            Ok(chunk_rows) => {
                line += chunk_rows.n_rows();
                rows.append(chunk_rows);
            }
            Err((offset, problem)) => {
                return Err(DataError::Line {
                    file: name.to_owned(),
                    line: line + offset,
                    problem,
                });
            }
        }
    }
    Ok(line)
}

/// Cuts `text` into about `parts` pieces, each ending just after a newline (except the last).
fn split_at_newlines(text: &[u8], parts: usize) -> Vec<&[u8]> {
    let target = (text.len() / parts.max(1)).max(1 << 16);
    let mut out = Vec::with_capacity(parts + 1);
    let mut rest = text;
    while !rest.is_empty() {
        if rest.len() <= target {
            out.push(rest);
            break;
        }
        let cut = rest[target..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |p| target + p + 1);
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

/// Parses whole lines; a final line without a newline counts as a line.
fn parse_chunk(text: &[u8], limits: Limits) -> Result<Rows, ChunkError> {
    let mut rows = Rows::default();
    let mut scratch = Vec::new();
    let mut rest = text;
    let mut index = 0usize;
    while !rest.is_empty() {
        let (line, tail) = match rest.iter().position(|&b| b == b'\n') {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        parse_line(strip_eol(line), limits, &mut rows, &mut scratch).map_err(|p| (index, p))?;
        index += 1;
        rest = tail;
    }
    Ok(rows)
}

fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Parses one line (without its end-of-line bytes) into a new row of `rows`.
fn parse_line(
    line: &[u8],
    limits: Limits,
    rows: &mut Rows,
    scratch: &mut Vec<(u32, f32)>,
) -> Result<(), LineProblem> {
    let mut tokens = line.split(|&b| is_blank(b)).filter(|t| !t.is_empty());
    let label_start = rows.lab_idx.len();
    let feat_start = rows.feat_idx.len();
    let mut first_feature = None;
    if line.first().is_some_and(|&b| !is_blank(b)) {
        if let Some(first) = tokens.next() {
            if first.contains(&b':') {
                // No label list: the LIBSVM form allows a line to open with a feature.
                first_feature = Some(first);
            } else {
                parse_labels(first, limits, rows)?;
            }
        }
    }
    for token in first_feature.into_iter().chain(tokens) {
        let (id, value) = parse_feature(token, limits)?;
        rows.d_seen = rows.d_seen.max(id as usize + 1);
        rows.feat_idx.push(id);
        rows.feat_val.push(value);
    }
    canonical_features(rows, feat_start, scratch)?;
    canonical_labels(&mut rows.lab_idx, label_start);
    rows.feat_ends.push(rows.feat_idx.len());
    rows.lab_ends.push(rows.lab_idx.len());
    Ok(())
}

fn parse_labels(token: &[u8], limits: Limits, rows: &mut Rows) -> Result<(), LineProblem> {
    for piece in token.split(|&b| b == b',') {
        let shown = if piece.is_empty() { token } else { piece };
        let id = parse_u64(piece)
            .filter(|_| !piece.is_empty())
            .ok_or_else(|| LineProblem::BadLabelToken(show_token(shown)))?;
        let bound = limits.l.map_or(u64::from(u32::MAX), |l| l as u64);
        if id >= bound {
            return Err(match limits.l {
                Some(l) => LineProblem::LabelOutOfRange { id, l },
                None => LineProblem::BadLabelToken(show_token(piece)),
            });
        }
        // The cast is lossless: `id < bound <= u32::MAX`.
        let id = id as u32;
        rows.l_seen = rows.l_seen.max(id as usize + 1);
        rows.lab_idx.push(id);
    }
    Ok(())
}

fn parse_feature(token: &[u8], limits: Limits) -> Result<(u32, f32), LineProblem> {
    let bad = || LineProblem::BadFeatureToken(show_token(token));
    let colon = token.iter().position(|&b| b == b':').ok_or_else(bad)?;
    let (id_bytes, value_bytes) = (&token[..colon], &token[colon + 1..]);
    if id_bytes.is_empty() || value_bytes.is_empty() {
        return Err(bad());
    }
    let id = parse_u64(id_bytes).ok_or_else(bad)?;
    let bound = limits.d.map_or(u64::from(u32::MAX), |d| d as u64);
    if id >= bound {
        return Err(match limits.d {
            Some(d) => LineProblem::FeatureOutOfRange { id, d },
            None => bad(),
        });
    }
    let value = parse_f32(value_bytes).ok_or_else(bad)?;
    if !value.is_finite() {
        return Err(LineProblem::NonFiniteValue(show_token(token)));
    }
    // The cast is lossless: `id < bound <= u32::MAX`.
    Ok((id as u32, value))
}

/// Parses a non-empty run of ASCII digits; `None` on anything else or on overflow.
fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in bytes {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    Some(v)
}

/// Parses a float. Short integers (the common binary `1`) take an exact fast path.
fn parse_f32(bytes: &[u8]) -> Option<f32> {
    if bytes.len() <= 7 {
        if let Some(v) = parse_u64(bytes) {
            // Exact: an integer below 10^7 < 2^24 is representable in `f32`.
            return Some(v as f32);
        }
    }
    std::str::from_utf8(bytes).ok()?.parse::<f32>().ok()
}

/// Sorts the row starting at `start` by feature id, sums duplicates and drops zeros.
fn canonical_features(
    rows: &mut Rows,
    start: usize,
    scratch: &mut Vec<(u32, f32)>,
) -> Result<(), LineProblem> {
    let idx = &rows.feat_idx[start..];
    let sorted = idx.windows(2).all(|w| w[0] < w[1]);
    let has_zero = rows.feat_val[start..].contains(&0.0);
    if sorted && !has_zero {
        return Ok(());
    }
    scratch.clear();
    scratch.extend(
        idx.iter()
            .copied()
            .zip(rows.feat_val[start..].iter().copied()),
    );
    if !sorted {
        scratch.sort_by_key(|&(id, _)| id);
    }
    rows.feat_idx.truncate(start);
    rows.feat_val.truncate(start);
    let mut i = 0;
    while i < scratch.len() {
        let (id, mut sum) = scratch[i];
        i += 1;
        while i < scratch.len() && scratch[i].0 == id {
            sum += scratch[i].1;
            i += 1;
        }
        if !sum.is_finite() {
            return Err(LineProblem::DuplicateSumOverflow(id));
        }
        if sum != 0.0 {
            rows.feat_idx.push(id);
            rows.feat_val.push(sum);
        }
    }
    Ok(())
}

/// Sorts the label row starting at `start` and drops duplicates.
fn canonical_labels(labels: &mut Vec<u32>, start: usize) {
    let row = &mut labels[start..];
    if row.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    row.sort_unstable();
    let mut write = start;
    for read in start..labels.len() {
        if write == start || labels[read] != labels[write - 1] {
            labels[write] = labels[read];
            write += 1;
        }
    }
    labels.truncate(write);
}

/// Builds the two CSR matrices and checks the header's point count.
fn assemble(rows: Rows, header: Option<Header>, name: &str) -> Result<Dataset, DataError> {
    let n = rows.n_rows();
    if let Some(h) = header {
        if h.n != n {
            return Err(DataError::CountMismatch {
                file: name.to_owned(),
                expected: h.n,
                found: n,
            });
        }
    }
    let (d, l) = header.map_or((rows.d_seen, rows.l_seen), |h| (h.d, h.l));
    let features = csr(n, d, rows.feat_ends, rows.feat_idx, rows.feat_val);
    let n_labels = rows.lab_idx.len();
    let labels = csr(n, l, rows.lab_ends, rows.lab_idx, vec![1.0; n_labels]);
    Ok(Dataset { features, labels })
}

/// Builds a CSR matrix from row ends that the parser has made sorted, unique and in range.
fn csr(rows: usize, cols: usize, ends: Vec<usize>, idx: Vec<u32>, val: Vec<f32>) -> SparseMatrix {
    let mut indptr = Vec::with_capacity(ends.len() + 1);
    indptr.push(0);
    indptr.extend(ends);
    // The parser guarantees what `new` checks: one row end per row, sorted unique in-range
    // indices per row, and as many values as indices. A failure here is a bug in this module.
    SparseMatrix::new((rows, cols), indptr, idx, val)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Dataset, DataError> {
        read_xc(text.as_bytes(), "t.txt")
    }

    #[test]
    fn header_and_rows_parse() {
        let ds = read("2 5 3\n0,2 1:0.5 4:2\n 3:1\n").expect("valid");
        assert_eq!((ds.n_points(), ds.n_features(), ds.n_labels()), (2, 5, 3));
        assert_eq!(ds.feature_row(0), (&[1, 4][..], &[0.5, 2.0][..]));
        assert_eq!(ds.label_row(0), &[0, 2]);
        assert_eq!(ds.label_row(1), &[] as &[u32]);
    }

    #[test]
    fn headerless_infers_shape() {
        let ds = read("1 7:1\n3,0 2:1.5\n").expect("valid");
        assert_eq!((ds.n_points(), ds.n_features(), ds.n_labels()), (2, 8, 4));
    }

    #[test]
    fn duplicates_summed_sorted_zeros_dropped() {
        let ds = read("3,1,3 5:1 2:2 5:0.5 4:0\n").expect("valid");
        assert_eq!(ds.feature_row(0), (&[2, 5][..], &[2.0, 1.5][..]));
        assert_eq!(ds.label_row(0), &[1, 3]);
    }

    #[test]
    fn crlf_and_missing_final_newline() {
        let ds = read("1 3 1\r\n0 2:1").expect("valid");
        assert_eq!(ds.feature_row(0), (&[2][..], &[1.0][..]));
    }

    #[test]
    fn header_detection() {
        assert!(parse_header(b"10 20 30\n").is_some());
        assert!(parse_header(b"1,2 3:1\n").is_none());
        assert!(parse_header(b"1 2\n").is_none());
        assert!(parse_header(b"1 2 3 4\n").is_none());
        assert!(matches!(
            parse_header(b"1 99999999999 3"),
            Some(Err(LineProblem::BadHeader(_)))
        ));
    }

    #[test]
    fn split_keeps_every_byte() {
        let text = "0 1:1\n".repeat(50_000);
        let parts = split_at_newlines(text.as_bytes(), 7);
        assert!(parts.len() > 1);
        assert_eq!(parts.concat(), text.as_bytes());
        assert!(parts[..parts.len() - 1].iter().all(|p| p.ends_with(b"\n")));
    }
}

//! The size limits of the source tree: no file under `src/` or `loadtest/src/` is over
//! [`MAX_FILE_LINES`] lines (tests included), and no function there outside test code is over
//! [`MAX_FN_LINES`] lines. Rooms of one purpose stay that way.
//!
//! Test code is a module marked `#[cfg(test)]`: an inline `mod tests { ... }`, or a file that
//! such a declaration (`#[cfg(test)] mod tests;`) names, with every file below it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most lines a source file may have.
const MAX_FILE_LINES: usize = 900;

/// The most lines a function outside tests may have, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 150;

/// The folders checked, relative to the crate root.
const ROOTS: [&str; 2] = ["src", "loadtest/src"];

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments, strings and character literals blanked out (newlines kept), so
/// that braces and keywords in them are not counted.
fn code_only(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\""))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| start + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A character literal (`'x'`, `'\n'`, `'{'`) or a lifetime (`'a`).
            if rest.get(1) == Some(&b'\\') {
                let end = rest
                    .get(3..)
                    .and_then(|r| r.iter().position(|&c| c == b'\''))
                    .map_or(b.len(), |p| i + 4 + p);
                blank(&mut out, i, end);
                i = end;
            } else {
                let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if rest.get(1 + len) == Some(&b'\'') {
                    blank(&mut out, i, i + len + 2);
                    i += len + 2;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Whether `code[at..]` starts the keyword `word` (not part of a longer identifier).
fn keyword_at(code: &[u8], at: usize, word: &[u8]) -> bool {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    code[at..].starts_with(word)
        && (at == 0 || !ident(code[at - 1]))
        && code.get(at + word.len()).is_none_or(|&c| !ident(c))
}

/// The index of the brace that closes the one at `open`.
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// What one file holds: its functions outside tests (name, first line, lines) and the modules
/// it declares as test modules (`#[cfg(test)] mod name;`).
struct Scan {
    fns: Vec<(String, usize, usize)>,
    test_mods: Vec<String>,
}

fn scan(src: &str) -> Scan {
    let code = code_only(src);
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let skip_space = |mut j: usize| {
        while j < code.len() && code[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    let ident_end = |mut j: usize| {
        while j < code.len() && (code[j].is_ascii_alphanumeric() || code[j] == b'_') {
            j += 1;
        }
        j
    };
    let mut fns = Vec::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if code[i..].starts_with(b"#[cfg(test)]") {
            // Skip other attributes and a visibility, then see what is marked.
            let mut j = skip_space(i + b"#[cfg(test)]".len());
            while code[j..].starts_with(b"#[") {
                j = skip_space(j + code[j..].iter().position(|&c| c == b']').unwrap_or(0) + 1);
            }
            if keyword_at(&code, j, b"pub") {
                j = skip_space(j + 3);
                if code[j] == b'(' {
                    j = skip_space(j + code[j..].iter().position(|&c| c == b')').unwrap_or(0) + 1);
                }
            }
            if keyword_at(&code, j, b"mod") {
                let name_at = skip_space(j + 3);
                let name_end = ident_end(name_at);
                let after = skip_space(name_end);
                let name = String::from_utf8_lossy(&code[name_at..name_end]).into_owned();
                if code.get(after) == Some(&b';') {
                    test_mods.push(name);
                    i = after + 1;
                } else {
                    i = closing(&code, after) + 1;
                }
                continue;
            }
            i = j;
            continue;
        }
        if keyword_at(&code, i, b"fn") {
            let name_at = skip_space(i + 2);
            let name = String::from_utf8_lossy(&code[name_at..ident_end(name_at)]).into_owned();
            if name.is_empty() {
                // A function pointer type, `fn(u32) -> u32`.
                i = name_at;
                continue;
            }
            // The body opens at the first `{` outside parentheses and brackets; a `;` first
            // means a declaration without a body (in a trait, or an `extern` block).
            let mut depth = 0i32;
            let mut j = name_at;
            let mut body = None;
            while j < code.len() {
                match code[j] {
                    b'(' | b'[' => depth += 1,
                    b')' | b']' => depth -= 1,
                    b'{' if depth == 0 => {
                        body = Some(j);
                        break;
                    }
                    b';' if depth == 0 => break,
                    _ => {}
                }
                j += 1;
            }
            if let Some(open) = body {
                let close = closing(&code, open);
                let first = line_of(i);
                fns.push((name, first, line_of(close) - first + 1));
                i = open + 1;
                continue;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    Scan { fns, test_mods }
}

/// The folder where the modules that `file` declares live.
fn child_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new(""));
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
        None => dir.to_path_buf(),
    }
}

#[test]
fn no_file_or_function_outside_tests_is_too_long() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in ROOTS {
        rust_files(&root.join(r), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    // Test modules in files of their own, found as the files that declare them are scanned.
    let mut test_paths: BTreeSet<PathBuf> = BTreeSet::new();
    let mut scans = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let s = scan(&src);
        for m in &s.test_mods {
            let dir = child_dir(f);
            test_paths.insert(dir.join(format!("{m}.rs")));
            test_paths.insert(dir.join(m));
        }
        scans.push((f, src.lines().count(), s));
    }
    let is_test = |f: &Path| test_paths.iter().any(|t| f == t || f.starts_with(t));
    let mut problems = Vec::new();
    let mut longest_fn = (0, String::new());
    for (f, lines, s) in &scans {
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        if *lines > MAX_FILE_LINES {
            problems.push(format!("{rel}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        if is_test(f) {
            continue;
        }
        for (name, line, len) in &s.fns {
            if *len > longest_fn.0 {
                longest_fn = (*len, format!("{rel}:{line} `{name}`"));
            }
            if *len > MAX_FN_LINES {
                problems.push(format!(
                    "{rel}:{line}: fn `{name}` is {len} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
    }
    println!(
        "longest function outside tests: {} lines, {}",
        longest_fn.0, longest_fn.1
    );
    assert!(problems.is_empty(), "too long:\n{}", problems.join("\n"));
}

#[test]
fn the_scanner_counts_bodies_and_skips_tests_comments_and_strings() {
    let src = r##"
fn a() {
    let s = "}{";
    let c = '}';
    let r = r#"{"#;
    // }
    /* { /* } */ */
    if true { x('{', '\'') }
}

trait T {
    fn declared(&self) -> u32;
}

fn b<'a>(x: &'a [u8; 2], f: fn(u8) -> u8) -> &'a u8 { &x[0] }

#[cfg(test)]
mod tests {
    fn inside() {}
}

#[cfg(test)]
mod more;
"##;
    let s = scan(src);
    let fns: Vec<(&str, usize, usize)> =
        s.fns.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    assert_eq!(fns, vec![("a", 2, 8), ("b", 15, 1)]);
    assert_eq!(s.test_mods, vec!["more".to_string()]);
    assert_eq!(
        child_dir(Path::new("src/tree/chunk/mod.rs")),
        Path::new("src/tree/chunk")
    );
    assert_eq!(
        child_dir(Path::new("src/serve/x.rs")),
        Path::new("src/serve/x")
    );
}

//! The size limits of the source tree: no file under `src/` or `loadtest/src/` is over
//! [`MAX_FILE_LINES`] lines (tests included), and no function there outside test code is over
//! [`MAX_FN_LINES`] lines. Rooms of one purpose stay that way.
//!
//! Test code is a module marked `#[cfg(test)]`: an inline `mod tests { ... }`, or a file that
//! such a declaration (`#[cfg(test)] mod tests;`) names, with every file below it.
//!
//! The layering of the source tree, too: outside test code, each module imports only the
//! layers [`SRC_LAYERS`] (and [`LOADTEST_LAYERS`]) allow it, and no two modules import each
//! other, directly or round a loop, whether top-level modules or the children of one module.
//! `unsafe` lives only where [`UNSAFE_ALLOWED`] says.

use std::collections::{BTreeMap, BTreeSet};
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
    /// The byte ranges of inline test modules.
    test_bodies: Vec<(usize, usize)>,
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
    let mut test_bodies = Vec::new();
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
                    let close = closing(&code, after);
                    test_bodies.push((after, close));
                    i = close + 1;
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
    Scan {
        fns,
        test_mods,
        test_bodies,
    }
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

/// One scanned source file.
struct Source {
    /// The path, relative to the crate root.
    rel: String,
    /// The file's text.
    src: String,
    scan: Scan,
    /// Whether the whole file is test code.
    is_test: bool,
}

/// Every source file under `roots`, scanned, each marked as test code or not.
fn sources(roots: &[&str]) -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in roots {
        rust_files(&root.join(r), &mut files);
    }
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
        scans.push((f, src, s));
    }
    let is_test = |f: &Path| test_paths.iter().any(|t| f == t || f.starts_with(t));
    scans
        .into_iter()
        .map(|(f, src, scan)| Source {
            rel: f.strip_prefix(root).unwrap_or(f).display().to_string(),
            is_test: is_test(f),
            src,
            scan,
        })
        .collect()
}

#[test]
fn no_file_or_function_outside_tests_is_too_long() {
    let files = sources(&ROOTS);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut problems = Vec::new();
    let mut longest_fn = (0, String::new());
    for f in &files {
        let (rel, s) = (&f.rel, &f.scan);
        let lines = f.src.lines().count();
        if lines > MAX_FILE_LINES {
            problems.push(format!("{rel}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        if f.is_test {
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

/// One layer of a crate: its top-level modules, and the layers they may import (their own
/// included, where it is listed).
struct Layer {
    name: &'static str,
    modules: &'static [&'static str],
    may_import: &'static [&'static str],
}

/// Every layer of `src/` up to the request path: what the trainer and the server may both use.
const MODEL_AND_BELOW: &[&str] = &[
    "foundation",
    "algorithms",
    "stages",
    "configuration",
    "request path",
];

/// The layers of `src/`, from the bottom up. A stage owns its algorithm and its view; whatever
/// composes stages or needs a finished model is the trainer's; the server serves models and
/// never trains them.
const SRC_LAYERS: &[Layer] = &[
    Layer {
        name: "foundation",
        modules: &["seed", "settings", "bundle", "data"],
        may_import: &["foundation"],
    },
    Layer {
        name: "algorithms",
        modules: &["eval", "linear", "cluster"],
        may_import: &["foundation", "algorithms"],
    },
    Layer {
        name: "stages",
        modules: &["tree", "router", "defrag", "rerank", "text"],
        may_import: &["foundation", "algorithms", "stages"],
    },
    Layer {
        name: "configuration",
        modules: &["config"],
        may_import: &["foundation", "algorithms", "stages"],
    },
    Layer {
        name: "request path",
        modules: &["model"],
        may_import: &["foundation", "algorithms", "stages", "configuration"],
    },
    Layer {
        name: "trainer",
        modules: &["train"],
        may_import: MODEL_AND_BELOW,
    },
    Layer {
        name: "server",
        modules: &["serve"],
        may_import: MODEL_AND_BELOW,
    },
    Layer {
        name: "tools",
        modules: &["sweep", "cli"],
        may_import: &[
            "foundation",
            "algorithms",
            "stages",
            "configuration",
            "request path",
            "trainer",
            "server",
            "tools",
        ],
    },
];

/// The layers of `loadtest/src/`, from the bottom up: the client and its measures, then what
/// every scenario shares (the run context, the report's formatting), then the scenarios, which
/// fill the report, then the runner that starts them.
const LOADTEST_LAYERS: &[Layer] = &[
    Layer {
        name: "client",
        modules: &[
            "engine", "pin", "plot", "stats", "queries", "scenario", "server",
        ],
        may_import: &["client"],
    },
    Layer {
        name: "shared",
        modules: &["report", "context"],
        may_import: &["client", "shared"],
    },
    Layer {
        name: "scenarios",
        modules: &["scenarios"],
        may_import: &["client", "shared", "scenarios"],
    },
    Layer {
        name: "runner",
        modules: &["runner"],
        may_import: &["client", "shared", "scenarios"],
    },
];

/// The files that may hold `unsafe` code, and why.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    ("src/bundle/", "the memory map and its advice calls"),
    (
        "src/serve/heap.rs",
        "glibc's malloc_trim and mallinfo2, which no safe crate wraps",
    ),
];

/// The module path of a source file under `root` (`src/tree/view.rs` → `tree::view`,
/// `src/tree/mod.rs` → `tree`).
fn module_of(rel: &str, root: &str) -> Vec<String> {
    let inner = rel
        .strip_prefix(root)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(rel);
    let mut parts: Vec<String> = inner
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The paths a file's code names from its own crate: `crate::a::b`, `super::c` resolved against
/// `module` (a file's path in the crate), with `{...}` groups expanded. Test modules are left out.
fn crate_paths(code: &[u8], module: &[String]) -> Vec<Vec<String>> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let starts = |w: &[u8]| {
            code[i..].starts_with(w) && (i == 0 || !(ident(code[i - 1]) || code[i - 1] == b':'))
        };
        let base: Option<(Vec<String>, usize)> = if starts(b"crate::") {
            Some((Vec::new(), i + 7))
        } else if starts(b"super::") {
            // `super` is the parent of the file's module (a `mod.rs` is its folder's module).
            let mut m = module.to_vec();
            let mut j = i;
            while code[j..].starts_with(b"super::") {
                m.pop();
                j += 7;
            }
            Some((m, j))
        } else {
            None
        };
        match base {
            Some((prefix, at)) => i = parse_tree(code, at, prefix, &mut out),
            None => i += 1,
        }
    }
    out
}

/// Parses a use-tree (`a::b`, `a::{b, c::d}`, `*`) at `at` under `prefix`, pushing every path
/// to `out`; returns where it ends.
fn parse_tree(
    code: &[u8],
    mut at: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let skip = |mut j: usize| {
        while j < code.len() && code[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    loop {
        at = skip(at);
        if code.get(at) == Some(&b'{') {
            let close = closing(code, at);
            let mut j = at + 1;
            while j < close {
                j = parse_tree(code, j, prefix.clone(), out);
                j = skip(j);
                if code.get(j) == Some(&b',') {
                    j += 1;
                }
                j = skip(j);
                if j == close
                    || code
                        .get(j)
                        .is_none_or(|&c| !(ident(c) || c == b'{' || c == b'*'))
                {
                    break;
                }
            }
            return close + 1;
        }
        let end = (at..code.len())
            .find(|&j| !ident(code[j]))
            .unwrap_or(code.len());
        if end > at {
            let seg = String::from_utf8_lossy(&code[at..end]).into_owned();
            if seg != "self" {
                prefix.push(seg);
            }
        }
        if code[end..].starts_with(b"::") {
            at = end + 2;
            continue;
        }
        out.push(prefix);
        return end.max(at + 1);
    }
}

/// The longest prefix of `path` that names a module of the crate at `root` (a file `a/b.rs` or
/// a folder `a/b/`).
fn resolve(path: &[String], root: &Path) -> Vec<String> {
    let mut module = Vec::new();
    let mut dir = root.to_path_buf();
    for seg in path {
        let (file, folder) = (dir.join(format!("{seg}.rs")), dir.join(seg));
        if !(file.is_file() || folder.is_dir()) {
            break;
        }
        module.push(seg.clone());
        dir = folder;
    }
    module
}

/// Every import of one crate outside test code: (importing file, importing module, imported
/// module).
fn imports(root: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
    let mut out = Vec::new();
    for f in sources(&[root]) {
        if f.is_test {
            continue;
        }
        let mut code = code_only(&f.src);
        for &(from, to) in &f.scan.test_bodies {
            for c in &mut code[from..=to.min(f.src.len() - 1)] {
                *c = b' ';
            }
        }
        let module = module_of(&f.rel, root);
        let mut paths = crate_paths(&code, &module);
        // Paths written in attribute strings (`skip_serializing_if = "crate::..."`).
        for (at, _) in f.src.match_indices("= \"crate::") {
            let line_start = f.src[..at].rfind('\n').map_or(0, |p| p + 1);
            if !f.src[line_start..at].trim_start().starts_with("//") {
                let path = &f.src[at + 3..];
                let path = &path[..path.find('"').unwrap_or(0)];
                paths.push(path.split("::").skip(1).map(str::to_string).collect());
            }
        }
        for p in paths {
            let target = resolve(&p, &crate_root);
            if !target.is_empty() && !module.is_empty() {
                out.push((f.rel.clone(), module.clone(), target));
            }
        }
    }
    out
}

/// The layer rule an import breaks, if any.
fn broken_rule(layers: &[Layer], from: &str, to: &str) -> Result<Option<String>, String> {
    let layer_of = |m: &str| layers.iter().find(|l| l.modules.contains(&m));
    let (Some(lf), Some(lt)) = (layer_of(from), layer_of(to)) else {
        return Err(format!(
            "module `{}` is in no layer: add it to the table",
            if layer_of(from).is_none() { from } else { to }
        ));
    };
    if from == to || lf.may_import.contains(&lt.name) {
        return Ok(None);
    }
    Ok(Some(format!(
        "layer `{}` ({from}) may import only {:?}, not layer `{}` ({to})",
        lf.name, lf.may_import, lt.name
    )))
}

/// A loop in `edges` (a → b meaning a imports b), as the modules round it, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Every broken layer rule and every import loop in the crate at `root`.
fn layering_problems(root: &str, layers: &[Layer]) -> Vec<String> {
    let mut problems = Vec::new();
    // Per parent module (the crate root is ""), the import graph of its children.
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (file, from, to) in imports(root) {
        match broken_rule(layers, &from[0], &to[0]) {
            Ok(None) => {}
            Ok(Some(rule)) => problems.push(format!("{file} imports `{}`: {rule}", to.join("::"))),
            Err(e) => problems.push(format!("{file}: {e}")),
        }
        // The first level where the two paths part: siblings under one parent.
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common < from.len() && common < to.len() {
            graphs
                .entry(from[..common].join("::"))
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(to[common].clone());
        }
    }
    for (parent, edges) in &graphs {
        if let Some(cycle) = find_cycle(edges) {
            let name = |m: &String| {
                if parent.is_empty() {
                    m.clone()
                } else {
                    format!("{parent}::{m}")
                }
            };
            problems.push(format!(
                "{root}: an import loop: {} (rule: no module imports another that imports it \
                 back)",
                cycle.iter().map(name).collect::<Vec<_>>().join(" → ")
            ));
        }
    }
    problems
}

#[test]
fn imports_point_down_the_layers_and_never_loop() {
    let mut problems = layering_problems("src", SRC_LAYERS);
    problems.extend(layering_problems("loadtest/src", LOADTEST_LAYERS));
    assert!(
        problems.is_empty(),
        "imports that break the layering:\n{}",
        problems.join("\n")
    );
    // The scanner sees the imports it must: the trainer imports the model.
    let train = imports("src");
    assert!(
        train
            .iter()
            .any(|(f, _, to)| f == "src/train/mod.rs" && to == &["model".to_string()]),
        "the import scanner found no import of `model` in src/train/mod.rs"
    );
}

#[test]
fn unsafe_code_lives_only_where_it_is_allowed() {
    let mut problems = Vec::new();
    for f in sources(&ROOTS) {
        let code = String::from_utf8_lossy(&code_only(&f.src)).into_owned();
        let allowed = UNSAFE_ALLOWED.iter().any(|(p, _)| f.rel.starts_with(p));
        let uses = code.contains("unsafe ")
            || code.contains("unsafe{")
            || code.contains("allow(unsafe_code)");
        if uses && !allowed {
            problems.push(format!(
                "{}: `unsafe` outside {:?} (rule: unsafe only where the table allows it)",
                f.rel,
                UNSAFE_ALLOWED.iter().map(|(p, _)| *p).collect::<Vec<_>>()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_import_scanner_expands_groups_and_resolves_super() {
    let code = code_only(
        "use crate::{a::b, c::{d, e::f}};\nuse super::g::h;\nfn x() { crate::i::j(); }\n",
    );
    let m = vec!["p".to_string(), "q".to_string()];
    let paths = crate_paths(&code, &m);
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["a::b", "c::d", "c::e::f", "p::g::h", "i::j"]);
    assert_eq!(module_of("src/p/q.rs", "src"), m);
    assert_eq!(module_of("src/p/q/mod.rs", "src"), m);
    let layers = [
        Layer {
            name: "low",
            modules: &["a"],
            may_import: &["low"],
        },
        Layer {
            name: "high",
            modules: &["b"],
            may_import: &["low", "high"],
        },
    ];
    assert_eq!(broken_rule(&layers, "b", "a"), Ok(None));
    let rule = broken_rule(&layers, "a", "b").unwrap().unwrap();
    assert!(rule.contains("layer `low` (a) may import only"), "{rule}");
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("x".to_string(), BTreeSet::from(["y".to_string()])),
        ("y".to_string(), BTreeSet::from(["x".to_string()])),
    ]
    .into();
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["x".into(), "y".into(), "x".into()])
    );
}

//! The library's shape, checked as the contract test checks the schemas:
//! folders are the stages of the pipeline, declared in pipeline order in
//! lib.rs, and every import points down (to an earlier stage or within
//! its own). No file imports, through any chain, a file that imports it.
//!
//! Imports are read from the source text (`crate::`, `super::` and
//! `self::` paths, and a folder's `mod.rs` naming its own children), each
//! resolved to the file of the longest module prefix it names. Comments
//! and test code (`#[cfg(test)]` items, test modules) are left out: a test
//! may reach any stage. A failure names each import that points up and
//! each cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`plan::catalog`) and the file it lives in.
struct Module {
    path: Vec<String>,
    file: PathBuf,
    /// Test-only code removed.
    code: String,
}

/// At most this many files directly in src/ (lib.rs and the few the whole
/// crate shares); everything else sits in its stage's folder.
const MAX_TOP_LEVEL_FILES: usize = 4;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn modules() -> Vec<Module> {
    let root = src_dir();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut segs: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
                segs.pop();
            }
            // A test-only file (`#[cfg(test)] mod tests;`) is test code.
            if segs.last().is_some_and(|s| s == "tests" || s == "layering") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.push(Module {
                path: segs,
                file: path,
                code: without_tests_and_comments(&text),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The code of a file without comments and test-only items: a
/// `#[cfg(test)]` module (by convention the file's end) and the single
/// item after any other `#[cfg(test)]`.
fn without_tests_and_comments(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            let is_mod = ["mod ", "pub mod ", "pub(crate) mod "]
                .iter()
                .any(|m| next.starts_with(m));
            if is_mod && next.ends_with('{') {
                break; // the test module, to the end of the file
            }
            lines.next();
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every path the code names from `start` (`crate::`, `super::`, ...),
/// with `use` groups expanded: `crate::a::{b, c::d}` gives `a::b`, `a::c::d`.
fn paths_after(code: &str, start: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find(start) {
        let at = from + at;
        from = at + start.len();
        // `start` must begin a path: not the tail of an identifier or of
        // another path (`$crate::`, `foo::crate::`).
        if at > 0 {
            let before = bytes[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before == b':'
            {
                continue;
            }
        }
        expand(&code[from..], &mut Vec::new(), &mut out);
    }
    out
}

/// Reads one path (and its group, if any) at the start of `s`.
fn expand(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = s;
    let depth = prefix.len();
    loop {
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            if let Some(group) = rest.strip_prefix('{') {
                for item in split_group(group) {
                    expand(item.trim_start(), prefix, out);
                }
            } else if !prefix.is_empty() {
                out.push(prefix.clone());
            }
            break;
        }
        rest = &rest[ident.len()..];
        if ident != "self" {
            prefix.push(ident);
        }
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => {
                out.push(prefix.clone());
                break;
            }
        }
    }
    prefix.truncate(depth);
}

/// The top-level items of a `{...}` group (the text after its `{`).
fn split_group(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&s[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The module (a file) a path names: its longest prefix that is a module.
fn file_of<'a>(path: &[String], known: &'a BTreeSet<Vec<String>>) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|n| known.get(&path[..n].to_vec()))
}

/// The modules each module's code imports (itself and the crate root left out).
fn imports(mods: &[Module]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let known: BTreeSet<Vec<String>> = mods.iter().map(|m| m.path.clone()).collect();
    let mut graph = BTreeMap::new();
    for m in mods {
        let is_folder = m
            .file
            .file_name()
            .is_some_and(|f| f == "mod.rs" || f == "lib.rs");
        // `super::` is the parent module, `self::` the module itself.
        let parent: Vec<String> = m.path[..m.path.len().saturating_sub(1)].to_vec();
        let mut named: Vec<Vec<String>> = paths_after(&m.code, "crate::");
        for p in paths_after(&m.code, "super::") {
            named.push(parent.iter().cloned().chain(p).collect());
        }
        for p in paths_after(&m.code, "self::") {
            named.push(m.path.iter().cloned().chain(p).collect());
        }
        // A folder's mod.rs names its children without a prefix
        // (`pub use elf::ElfImage`, `elf::hex(..)`).
        if is_folder {
            for child in known
                .iter()
                .filter(|k| k.len() == m.path.len() + 1 && k.starts_with(&m.path))
            {
                let name = child.last().unwrap();
                for p in paths_after(&m.code, &format!("{name}::")) {
                    named.push(child.iter().cloned().chain(p).collect());
                }
            }
        }
        let to: BTreeSet<Vec<String>> = named
            .iter()
            .filter_map(|p| file_of(p, &known))
            .filter(|t| **t != m.path && !t.is_empty())
            .cloned()
            .collect();
        graph.insert(m.path.clone(), to);
    }
    graph
}

/// The stages, in the order lib.rs declares them.
fn stages() -> Vec<String> {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub mod ")
                .or_else(|| l.trim().strip_prefix("mod "))
        })
        .filter_map(|l| l.strip_suffix(';'))
        .filter(|m| *m != "layering")
        .map(str::to_string)
        .collect()
}

fn shown(path: &[String]) -> String {
    path.join("::")
}

#[test]
fn imports_point_down_the_stages() {
    let stages = stages();
    let rank = |p: &[String]| stages.iter().position(|s| Some(s) == p.first());
    let mut up = Vec::new();
    for (from, tos) in imports(&modules()) {
        let Some(r) = rank(&from) else { continue };
        for to in tos {
            let Some(t) = rank(&to) else { continue };
            if t > r {
                up.push(format!(
                    "{} imports {} (stage `{}` comes after `{}` in lib.rs)",
                    shown(&from),
                    shown(&to),
                    stages[t],
                    stages[r]
                ));
            }
        }
    }
    assert!(
        up.is_empty(),
        "{} imports point up:\n{}",
        up.len(),
        up.join("\n")
    );
}

#[test]
fn no_file_imports_a_file_that_imports_it() {
    let graph = imports(&modules());
    let cycles = strongly_connected(&graph);
    // Each cycle with its imports, so the one to turn around can be chosen.
    let shown: Vec<String> = cycles
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("  {} -> {}", shown(from), shown(to)))
                })
                .collect();
            format!("{} files:\n{}", c.len(), edges.join("\n"))
        })
        .collect();
    assert!(
        shown.is_empty(),
        "{} import cycles:\n{}",
        shown.len(),
        shown.join("\n")
    );
}

#[test]
fn the_stages_are_folders() {
    let root = src_dir();
    let mut top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert!(
        top.len() <= MAX_TOP_LEVEL_FILES,
        "{} files directly in agent/src (at most {MAX_TOP_LEVEL_FILES}): {top:?}",
        top.len()
    );
    for stage in stages() {
        assert!(
            root.join(&stage).is_dir() || top.contains(&format!("{stage}.rs")),
            "lib.rs declares {stage}, which is neither a folder nor a file"
        );
    }
}

/// The checker checks: an upward import and a cycle are seen.
#[test]
fn the_import_reader_sees_groups_relative_paths_and_children() {
    let code =
        "use crate::a::{b::C, d, self};\nuse super::e::F;\nfn x() { crate::g::h(); y::z(); }\n";
    let mut got = paths_after(code, "crate::");
    got.sort();
    let want: Vec<Vec<String>> = [
        vec!["a"],
        vec!["a", "b", "C"],
        vec!["a", "d"],
        vec!["g", "h"],
    ]
    .iter()
    .map(|v| v.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        paths_after(code, "super::"),
        vec![vec!["e".to_string(), "F".to_string()]]
    );
    let stripped = without_tests_and_comments(
        "use crate::a;\n// crate::b\n#[cfg(test)]\nuse crate::c;\nfn f() {}\n#[cfg(test)]\nmod tests {\n use crate::d;\n}\n",
    );
    let mut seen = paths_after(&stripped, "crate::");
    seen.sort();
    assert_eq!(seen, vec![vec!["a".to_string()]]);

    let p = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (p("a::x"), [p("b::y")].into_iter().collect()),
        (p("b::y"), [p("b::z")].into_iter().collect()),
        (p("b::z"), [p("a::x")].into_iter().collect()),
        (p("c"), BTreeSet::new()),
    ]
    .into_iter()
    .collect();
    let cycles = strongly_connected(&graph);
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].len(), 3);
}

/// The strongly connected components of more than one module (Tarjan).
fn strongly_connected(
    graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        graph: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, (usize, usize)>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        next: usize,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        s.index.insert(v, (s.next, s.next));
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low_w = s.index[w].1;
                let e = s.index.get_mut(v).unwrap();
                e.1 = e.1.min(low_w);
            } else if s.on_stack.contains(w) {
                let idx_w = s.index[w].0;
                let e = s.index.get_mut(v).unwrap();
                e.1 = e.1.min(idx_w);
            }
        }
        let (idx, low) = s.index[v];
        if idx == low {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

//! No dangling references in the user documentation: every relative link in
//! README.md and docs/*.md points at a file that exists, every `#anchor` at
//! a heading of its target (GitHub's slugs), and every repository path cited
//! in a code span (`agent/src/...`, `scripts/...`, `docs/...`) exists. Reads
//! only the markdown files and the tree: no build, no root, milliseconds.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The top-level folders whose paths, cited in a code span, must exist.
const TREE_ROOTS: &[&str] = &[
    "agent/",
    "bpf/",
    "cli/",
    "dashboards/",
    "docs/",
    "packaging/",
    "probes/",
    "scripts/",
    "tests/",
    ".ci/",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The markdown files a user reads.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines outside fenced code blocks, with their line numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters,
/// digits, `-` and `_` kept), spaces to `-`; repeats get `-1`, `-2`, ...
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut out = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some(rest) = line.strip_prefix('#') else {
            continue;
        };
        let title = rest.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let base = slug(title);
        let mut s = base.clone();
        let mut n = 0;
        while !seen.insert(s.clone()) {
            n += 1;
            s = format!("{base}-{n}");
        }
        out.insert(s);
    }
    out
}

/// The text with inline code spans removed, and the spans themselves.
fn split_code_spans(line: &str) -> (String, Vec<&str>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[start..start + ticks];
        prose.push_str(&rest[..start]);
        let after = &rest[start + ticks..];
        match after.find(fence) {
            Some(end) => {
                spans.push(after[..end].trim());
                rest = &after[end + ticks..];
            }
            None => {
                rest = after;
            }
        }
    }
    prose.push_str(rest);
    (prose, spans)
}

/// `[text](target)` targets in a line of prose (images included).
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(end) => {
                let target = after[..end].split_whitespace().next().unwrap_or("");
                out.push(target.to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// Every dangling reference in one markdown file, as "file:line: why".
fn check_file(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    let name = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut problems = Vec::new();
    for (n, line) in prose_lines(&text) {
        let (prose, spans) = split_code_spans(line);
        for target in link_targets(&prose) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                problems.push(format!("{name}:{n}: link to {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let is_md = resolved.extension().is_some_and(|e| e == "md");
                let ok =
                    is_md && anchors(&std::fs::read_to_string(&resolved).unwrap()).contains(anchor);
                if !ok {
                    problems.push(format!("{name}:{n}: link to {target}: no such heading"));
                }
            }
        }
        for span in spans {
            let Some(path) = cited_path(span) else {
                continue;
            };
            if !root.join(path).exists() {
                problems.push(format!(
                    "{name}:{n}: cites `{span}`: no such file in the repository"
                ));
            }
        }
    }
    problems
}

/// A repository path cited in a code span (`agent/src/cost.rs`,
/// `docs/schema/`), or None for commands, globs and other code.
fn cited_path(span: &str) -> Option<&str> {
    if span.contains(char::is_whitespace)
        || span.contains(['*', '?', '…', '{', '<', '$', '|'])
        || !TREE_ROOTS.iter().any(|r| span.starts_with(r))
    {
        return None;
    }
    // `file.rs:123` cites a line of the file.
    Some(span.split(':').next().unwrap())
}

#[test]
fn readme_and_docs_have_no_dangling_references() {
    let root = repo_root();
    let problems: Vec<String> = doc_files(&root)
        .iter()
        .flat_map(|f| check_file(&root, f))
        .collect();
    assert!(
        problems.is_empty(),
        "dangling references in the documentation:\n{}",
        problems.join("\n")
    );
}

/// The check itself finds what it must: a missing file, a missing heading,
/// a cited path that does not exist; and passes what is there.
#[test]
fn the_check_catches_dangling_references() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("docs")).unwrap();
    std::fs::create_dir_all(root.path().join("scripts")).unwrap();
    std::fs::write(root.path().join("scripts/demo.sh"), "").unwrap();
    std::fs::write(
        root.path().join("docs/A.md"),
        "# A\n## Waits over time: `--interval` and `serve`\n## Waits over time: `--interval` and `serve`\n",
    )
    .unwrap();
    let readme = root.path().join("README.md");
    std::fs::write(
        &readme,
        "# Top\n\
         [ok](docs/A.md#waits-over-time---interval-and-serve) [ok](docs/A.md#waits-over-time---interval-and-serve-1)\n\
         [ok](#top) `scripts/demo.sh` `scripts/demo.sh:3` `innoprof record -d 30` `probes/*.toml`\n\
         ```\n[not a link](nowhere.md) `scripts/gone.sh`\n```\n\
         [gone](docs/B.md) [bad anchor](docs/A.md#nope) [self](#nope) `scripts/gone.sh` [web](https://x.org/y)\n",
    )
    .unwrap();
    let problems = check_file(root.path(), &readme);
    assert_eq!(
        problems,
        [
            "README.md:7: link to docs/B.md: no such file",
            "README.md:7: link to docs/A.md#nope: no such heading",
            "README.md:7: link to #nope: no such heading",
            "README.md:7: cites `scripts/gone.sh`: no such file in the repository",
        ],
        "{problems:#?}"
    );
}

//! No input makes innoprof panic: a bounded fuzz of what it reads from
//! files someone else may have written, in the normal suite.
//!
//! Each target mutates real inputs (a bundle recorded from MariaDB 10.2.11
//! under sysbench, in `fuzz_seed/`, and a small ELF file made here) and
//! hands them to the library's own entry points: `report DIR`'s re-render
//! (summary.json, metadata.json, timeseries.json and the folded files they
//! name, to summary.txt and report.html), the folded reader (flame graph,
//! top table), the raw-stack reader, and the ELF readers (debuginfod's
//! `verify`, `ElfImage::open`). The JSON mutations follow the structure:
//! numbers become huge, negative, fractional or past u64, strings long,
//! control characters, multi-byte or other bundle files' names, arrays
//! emptied or repeated, fields removed or of another type. An error is
//! fine (and must be one line); a panic is a failure.
//!
//! Deterministic: case `i` of a target draws from a generator seeded by
//! the target's name and `i` alone, so a failure names the case that
//! reproduces it (`INNOPROF_FUZZ_CASE=i`). Bounded: each target runs for
//! `INNOPROF_FUZZ_SECS` (default 3 s) or `INNOPROF_FUZZ_CASES` cases.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

const SEED_SUMMARY: &str = include_str!("fuzz_seed/summary.json");
const SEED_METADATA: &str = include_str!("fuzz_seed/metadata.json");
const SEED_TIMESERIES: &str = include_str!("fuzz_seed/timeseries.json");
const SEED_RAW: &str = include_str!("fuzz_seed/stacks.raw.json");
const SEED_FOLDED: &str = include_str!("fuzz_seed/oncpu.folded");

// ---------------------------------------------------------------------
// The loop.

thread_local! {
    /// Set while a case runs: its panic is caught and kept here, not printed.
    static CAUGHT: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

/// Panics of a running case are kept (message and place) instead of
/// printed; any other panic (a test's own assert) prints as usual.
fn quiet_panics_of_cases() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let kept = CAUGHT.with(|c| {
                let mut c = c.borrow_mut();
                match c.as_mut() {
                    Some(slot) => {
                        *slot = Some(info.to_string());
                        true
                    }
                    None => false,
                }
            });
            if !kept {
                default(info);
            }
        }));
    });
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// One case's generator: the target's name and the case's index decide it.
fn rng_of(target: &str, case: u64) -> fastrand::Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    fastrand::Rng::with_seed(h ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Runs `case` on fresh generators until the budget is spent; fails with
/// the first panics found, each with its case number and what was mutated.
/// `case` says whether its input was read (`true`) or refused in one
/// line (`false`); a fuzz whose inputs are nearly all refused tests only
/// the parser, and fails.
fn fuzz(target: &str, mut case: impl FnMut(&mut fastrand::Rng, &mut Vec<String>) -> bool) {
    quiet_panics_of_cases();
    let only = env_u64("INNOPROF_FUZZ_CASE");
    let max_cases = env_u64("INNOPROF_FUZZ_CASES").unwrap_or(u64::MAX);
    let time = Duration::from_secs_f64(
        std::env::var("INNOPROF_FUZZ_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3.0),
    );
    let began = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut ran = 0u64;
    let mut read = 0u64;
    let cases: Box<dyn Iterator<Item = u64>> = match only {
        Some(i) => Box::new(std::iter::once(i)),
        None => Box::new(0..max_cases),
    };
    for i in cases {
        if only.is_none() && max_cases == u64::MAX && began.elapsed() >= time {
            break;
        }
        let mut rng = rng_of(target, i);
        let mut log = Vec::new();
        // One case asked for: its panic prints whole (RUST_BACKTRACE=1).
        if only.is_none() {
            CAUGHT.with(|c| *c.borrow_mut() = Some(None));
        }
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| case(&mut rng, &mut log)));
        let message = CAUGHT.with(|c| c.borrow_mut().take()).flatten();
        ran += 1;
        read += u64::from(outcome.as_ref().is_ok_and(|r| *r));
        if outcome.is_err() {
            let what: Vec<String> = log.iter().map(|l| l.chars().take(300).collect()).collect();
            failures.push(format!(
                "case {i} (INNOPROF_FUZZ_CASE={i}): {}\n    mutated: {}",
                message.unwrap_or_default(),
                what.join("\n             ")
            ));
        }
    }
    let secs = began.elapsed().as_secs_f64();
    eprintln!(
        "fuzz {target}: {ran} inputs in {secs:.1} s ({:.0}/s): {read} read, {} refused, {} panicked",
        ran as f64 / secs.max(1e-9),
        ran - read - failures.len() as u64,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{target}: {} of {ran} inputs panicked; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(ran > 0, "{target}: no input ran");
    assert!(
        only.is_some() || read * 20 >= ran,
        "{target}: only {read} of {ran} inputs were read past the parser"
    );
}

/// An error must read as one line wherever innoprof prints it.
fn assert_one_line(e: &dyn std::error::Error) {
    let line = innoprof::error_chain(e);
    assert!(!line.contains('\n'), "not one line: {line}");
}

// ---------------------------------------------------------------------
// Structure-aware JSON mutation.

/// Stands for an integer literal past u64 (u128's largest), which a
/// `serde_json::Value` cannot hold: swapped in after serialising.
const HUGE_MARK: &str = "\u{1}innoprof-huge\u{1}";
const HUGE_LITERAL: &str = "340282366920938463463374607431768211455";

/// Every node's JSON pointer (the root's is "").
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        _ => {}
    }
}

/// Strings found in the seeds: enum values, file names, names that other
/// fields refer to. A mutated field may hold another's.
fn strings_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.len() < 200 => out.push(s.clone()),
        Value::Object(m) => m.values().for_each(|c| strings_of(c, out)),
        Value::Array(a) => a.iter().for_each(|c| strings_of(c, out)),
        _ => {}
    }
}

/// A number for a field that held `was`: mostly of its kind (a count
/// stays a non-negative integer, so that the file still parses and the
/// value reaches the renderers), at times of any kind.
fn number(was: Option<&serde_json::Number>, rng: &mut fastrand::Rng) -> Value {
    use serde_json::json;
    let counts = [
        json!(0),
        json!(1),
        json!(u64::MAX),
        json!(u64::MAX - 1),
        json!(u64::from(u32::MAX)),
        json!(u64::from(u32::MAX) + 1),
        json!(u64::from(u16::MAX) + 1),
        json!((1u64 << 53) + 1),
        json!(i64::MAX as u64 + 1),
        // The first millisecond of the year 10000.
        json!(253_402_300_800_000u64),
        json!(rng.u64(..)),
        json!(rng.u64(..1000)),
    ];
    let reals = [
        json!(0.0),
        json!(-0.0),
        json!(-1.0),
        json!(1e308),
        json!(-1e308),
        json!(f64::MIN_POSITIVE),
        json!(0.5),
        json!(1e-300),
        json!(1.8446744073709552e19),
        json!(9.3e18),
        json!(1e30),
        json!(rng.f64() * 1e6 - 5e5),
    ];
    let any = [
        json!(-1),
        json!(i64::MIN),
        Value::String(HUGE_MARK.into()),
        json!(1e30),
        json!(-0.5),
    ];
    let pick = |v: &[Value], rng: &mut fastrand::Rng| v[rng.usize(0..v.len())].clone();
    match was {
        _ if rng.usize(0..6) == 0 => pick(&any, rng),
        Some(n) if n.is_u64() => pick(&counts, rng),
        Some(n) if n.is_f64() => pick(&reals, rng),
        _ => pick(&any, rng),
    }
}

fn string(rng: &mut fastrand::Rng, seen: &[String]) -> Value {
    let s = match rng.usize(0..14) {
        0 => String::new(),
        1 => "x".repeat(rng.usize(200..70_000)),
        2 => "\u{0}\u{1b}[2J\r\n\t\u{7f}\u{85}\u{2028}\u{202e}".into(),
        // Multi-byte characters across every cut innoprof makes.
        3 => "€".repeat(rng.usize(1..2_000)),
        4 => "../../../../etc/shadow".into(),
        5 => "/".into(),
        6 => "NaN".into(),
        7 => "-inf".into(),
        8 => format!("{};{};\n{} 5", "a", "b", "c"),
        9 => "<script>alert(1)</script>&amp;\"'".into(),
        10 => "9".repeat(rng.usize(20..400)),
        _ if !seen.is_empty() => seen[rng.usize(0..seen.len())].clone(),
        _ => "unknown_variant".into(),
    };
    Value::String(s)
}

/// One mutation of the node at a random pointer; said in `log`.
fn mutate_once(root: &mut Value, seen: &[String], rng: &mut fastrand::Rng, log: &mut Vec<String>) {
    let mut all = Vec::new();
    pointers(root, String::new(), &mut all);
    if all.is_empty() {
        return;
    }
    let at = all[rng.usize(0..all.len())].clone();
    let Some(node) = root.pointer_mut(&at) else {
        return;
    };
    let before = node.to_string().chars().take(60).collect::<String>();
    let new = match node {
        // Mostly another value of the same kind, now and then another kind.
        Value::Number(n) if rng.usize(0..8) > 0 => number(Some(n), rng),
        Value::String(_) if rng.usize(0..8) > 0 => string(rng, seen),
        Value::Bool(b) if rng.bool() => Value::Bool(!*b),
        Value::Array(a) if rng.usize(0..6) > 0 => {
            let mut a = a.clone();
            match rng.usize(0..5) {
                0 => a.clear(),
                1 if !a.is_empty() => {
                    let e = a[rng.usize(0..a.len())].clone();
                    let n = rng.usize(1..60);
                    a.extend(std::iter::repeat_n(e, n));
                }
                2 if !a.is_empty() => {
                    a.remove(rng.usize(0..a.len()));
                }
                3 => a.reverse(),
                _ => {
                    let copy = a.clone();
                    a.extend(copy);
                }
            }
            Value::Array(a)
        }
        Value::Object(m) if rng.usize(0..4) > 0 && !m.is_empty() => {
            let mut m = m.clone();
            let keys: Vec<String> = m.keys().cloned().collect();
            m.remove(&keys[rng.usize(0..keys.len())]);
            Value::Object(m)
        }
        _ => match rng.usize(0..6) {
            0 => Value::Null,
            1 => number(None, rng),
            2 => string(rng, seen),
            3 => Value::Array(Vec::new()),
            4 => Value::Object(Default::default()),
            _ => Value::Bool(rng.bool()),
        },
    };
    log.push(format!(
        "{at}: {before} -> {}",
        new.to_string().chars().take(80).collect::<String>()
    ));
    *node = new;
}

/// A seed mutated 1 to 4 times, as the bytes of a file.
fn mutated(
    seed: &Value,
    seen: &[String],
    rng: &mut fastrand::Rng,
    log: &mut Vec<String>,
) -> Vec<u8> {
    let mut v = seed.clone();
    for _ in 0..rng.usize(1..=4) {
        mutate_once(&mut v, seen, rng, log);
    }
    let text = serde_json::to_string(&v).expect("a Value serialises");
    let text = text.replace(&serde_json::to_string(HUGE_MARK).unwrap(), HUGE_LITERAL);
    let mut bytes = text.into_bytes();
    // Now and then the bytes themselves: cut short, or a byte changed.
    if rng.usize(0..16) == 0 && !bytes.is_empty() {
        let at = rng.usize(0..bytes.len());
        if rng.bool() {
            bytes.truncate(at);
            log.push(format!("cut at byte {at}"));
        } else {
            bytes[at] = rng.u8(..);
            log.push(format!("byte {at} changed"));
        }
    }
    bytes
}

fn seed(text: &str) -> Value {
    serde_json::from_str(text).expect("seed parses")
}

// ---------------------------------------------------------------------
// The targets.

/// `report DIR`'s re-render: summary.json (and now and then metadata.json
/// and timeseries.json) mutated, with the bundle's other files as they
/// were, to summary.txt and report.html.
#[test]
fn report_rerender_never_panics() {
    let (summary, metadata, timeseries) = (
        seed(SEED_SUMMARY),
        seed(SEED_METADATA),
        seed(SEED_TIMESERIES),
    );
    let mut seen = Vec::new();
    strings_of(&summary, &mut seen);
    strings_of(&metadata, &mut seen);
    // The files summary.json names, as they were.
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    files.insert("oncpu.folded".into(), SEED_FOLDED.as_bytes().to_vec());
    files.insert("stacks.raw.json".into(), SEED_RAW.as_bytes().to_vec());
    for (name, _) in innoprof::model::files::FILES.iter().map(|f| (f.name, ())) {
        if name.ends_with(".folded") && !files.contains_key(name) {
            files.insert(name.into(), SEED_FOLDED.as_bytes().to_vec());
        }
    }
    // Every folded file the summary names reads the seed's stacks.
    let mut names = Vec::new();
    strings_of(&summary, &mut names);
    for n in names.iter().filter(|n| n.ends_with(".folded")) {
        files.insert(n.clone(), SEED_FOLDED.as_bytes().to_vec());
    }
    fuzz("report", |rng, log| {
        let summary_json = mutated(&summary, &seen, rng, log);
        let metadata_json = if rng.usize(0..4) == 0 {
            mutated(&metadata, &seen, rng, log)
        } else {
            SEED_METADATA.as_bytes().to_vec()
        };
        let timeseries_json = match rng.usize(0..6) {
            0 => Some(mutated(&timeseries, &seen, rng, log)),
            1 => None,
            _ => Some(SEED_TIMESERIES.as_bytes().to_vec()),
        };
        let get = |name: &str| -> Result<Option<Vec<u8>>, innoprof::bundle::BundleError> {
            Ok(match name {
                "summary.json" => Some(summary_json.clone()),
                "metadata.json" => Some(metadata_json.clone()),
                "timeseries.json" => timeseries_json.clone(),
                other => files.get(other).cloned(),
            })
        };
        match innoprof::bundle::render_saved(Path::new("/fuzz"), get) {
            Ok(r) => {
                assert!(r.report_html.starts_with("<!DOCTYPE html>"));
                assert!(!r.summary_txt.is_empty());
                true
            }
            Err(e) => {
                assert_one_line(&e);
                false
            }
        }
    });
}

/// The seeds as they are are read whole: the fuzz starts from inputs that
/// reach the renderers, not from ones the parser refuses.
#[test]
fn the_seeds_are_read_whole() {
    let get = |name: &str| -> Result<Option<Vec<u8>>, innoprof::bundle::BundleError> {
        Ok(match name {
            "summary.json" => Some(SEED_SUMMARY.into()),
            "metadata.json" => Some(SEED_METADATA.into()),
            "timeseries.json" => Some(SEED_TIMESERIES.into()),
            n if n.ends_with(".folded") => Some(SEED_FOLDED.into()),
            _ => None,
        })
    };
    let r = innoprof::bundle::render_saved(Path::new("/seed"), get).unwrap();
    assert!(r.report_html.contains("id=\"timeseries\""));
    assert!(
        r.summary_txt.contains("innodb.mutex.enter"),
        "{}",
        r.summary_txt
    );
    let dir = scratch_dir();
    std::fs::write(dir.path().join("stacks.raw.json"), SEED_RAW).unwrap();
    innoprof::bundle::name_raw::read_raw(dir.path()).unwrap();
}

/// One folded line mutated: its count, its frames, or the line itself.
fn mutate_folded_line(line: &str, rng: &mut fastrand::Rng) -> String {
    let (stack, count) = line.rsplit_once(' ').unwrap_or((line, "1"));
    let counts = [
        "0",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "1e9",
        "",
        "9223372036854775808",
        "1 2",
        "4294967296",
    ];
    let frames = [
        "",
        "_[k]",
        " [inlined]",
        "[unknown]",
        "\u{0}\u{1b}[31m",
        "€€€",
        "<svg onload=x>",
        "+0x",
        "a b c",
    ];
    match rng.usize(0..6) {
        0 => format!("{stack} {}", counts[rng.usize(0..counts.len())]),
        1 => {
            let mut parts: Vec<String> = stack.split(';').map(str::to_string).collect();
            let i = rng.usize(0..parts.len());
            parts[i] = frames[rng.usize(0..frames.len())].to_string();
            format!("{} {count}", parts.join(";"))
        }
        2 => format!("{};{} {count}", stack, "f".repeat(rng.usize(1..20_000))),
        3 => format!("{} {count}", ";".repeat(rng.usize(1..3_000))),
        4 => format!("{stack} {count} {}", counts[rng.usize(0..counts.len())]),
        _ => format!("{stack}\r {count}"),
    }
}

/// The folded reader: what `report` draws a flame graph from and `diff`
/// reads its top tables from.
#[test]
fn folded_reader_never_panics() {
    let seed_lines: Vec<&str> = SEED_FOLDED.lines().collect();
    fuzz("folded", |rng, log| {
        let mut lines: Vec<String> = seed_lines
            .iter()
            .take(rng.usize(0..=seed_lines.len().min(400)))
            .map(|l| l.to_string())
            .collect();
        for _ in 0..rng.usize(1..8) {
            if lines.is_empty() {
                lines.push("main;f 1".into());
            }
            let i = rng.usize(0..lines.len());
            match rng.usize(0..4) {
                0 => {
                    let copies = rng.usize(1..200);
                    let l = lines[i].clone();
                    lines.extend(std::iter::repeat_n(l, copies));
                    log.push(format!("line {i} repeated {copies} times"));
                }
                1 => {
                    lines.remove(i);
                    log.push(format!("line {i} removed"));
                }
                _ => {
                    lines[i] = mutate_folded_line(&lines[i], rng);
                    log.push(format!("line {i}: {}", lines[i]));
                }
            }
        }
        let text = lines.join("\n");
        use innoprof::model::top_symbols::{self, SelfFrame};
        // As report.html draws a bundle's folded file: only where its
        // weights fit the drawing's sums.
        if top_symbols::weights_fit(&text) {
            if let Err(e) = innoprof::report::flamegraph::render(&text, "fuzz", "samples") {
                assert_one_line(&e);
            }
        }
        let mode = match rng.usize(0..3) {
            0 => SelfFrame::Leaf,
            1 => SelfFrame::UserLeaf,
            _ => SelfFrame::InnermostIn("mysqld".into()),
        };
        let top = top_symbols::from_folded(&text, mode, "samples");
        top_symbols::render(&top, 20);
        !top.rows.is_empty()
    });
}

/// The raw-stack reader (`report --symbolize` reads it first).
#[test]
fn raw_stack_reader_never_panics() {
    let raw = seed(SEED_RAW);
    let mut seen = Vec::new();
    strings_of(&raw, &mut seen);
    let dir = scratch_dir();
    fuzz("raw stacks", |rng, log| {
        let bytes = mutated(&raw, &seen, rng, log);
        std::fs::write(dir.path().join("stacks.raw.json"), &bytes).unwrap();
        match innoprof::bundle::name_raw::read_raw(dir.path()) {
            Ok(_) => true,
            Err(e) => {
                assert_one_line(&e);
                false
            }
        }
    });
}

/// A directory on tmpfs where there is one: a case's file is written anew
/// each time.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

const BUILD_ID: [u8; 20] = [
    0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,
    0x11, 0x22, 0x33, 0x44,
];

/// A small debug file: a build-id note, a function in `.text` and its
/// symbol, `.debug_info`, `.rodata` and a `.gnu_debuglink`.
fn small_elf() -> Vec<u8> {
    use object::write::{Object, Symbol, SymbolSection};
    use object::{Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind};
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = obj.add_section(Vec::new(), b".text".to_vec(), SectionKind::Text);
    // The function at 16: a symbol at address 0 is no function's.
    let mut code = vec![0x90; 16];
    code.extend_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3]);
    obj.append_section_data(text, &code, 16);
    obj.add_symbol(Symbol {
        name: b"_Z8row_readv".to_vec(),
        value: 16,
        size: 6,
        kind: SymbolKind::Text,
        scope: object::write::SymbolScope::Dynamic,
        weak: false,
        section: SymbolSection::Section(text),
        flags: SymbolFlags::None,
    });
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&(BUILD_ID.len() as u32).to_le_bytes());
    note.extend_from_slice(&3u32.to_le_bytes()); // NT_GNU_BUILD_ID
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(&BUILD_ID);
    let id = obj.add_section(
        Vec::new(),
        b".note.gnu.build-id".to_vec(),
        SectionKind::Note,
    );
    obj.append_section_data(id, &note, 4);
    let info = obj.add_section(Vec::new(), b".debug_info".to_vec(), SectionKind::Debug);
    obj.append_section_data(info, &[0x2a, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8, 1], 1);
    let rodata = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    obj.append_section_data(rodata, b"btr0cur.cc\0row0sel.cc\0", 1);
    let link = obj.add_section(Vec::new(), b".gnu_debuglink".to_vec(), SectionKind::Debug);
    obj.append_section_data(link, b"mysqld.debug\0\0\0\0\x78\x56\x34\x12", 4);
    obj.write().expect("the ELF writer writes")
}

/// `verify` and `ElfImage::open` accept the unmutated file (the fuzz
/// starts from something they read whole).
#[test]
fn the_small_elf_is_a_debug_file() {
    let dir = scratch_dir();
    let path = dir.path().join("f.debug");
    std::fs::write(&path, small_elf()).unwrap();
    let id = hex(&BUILD_ID);
    let file = std::fs::File::open(&path).unwrap();
    innoprof::resolve::debuginfod::verify(&file, &id).unwrap();
    let image = innoprof::resolve::ElfImage::open(&path).unwrap();
    assert_eq!(image.build_id.as_deref(), Some(id.as_str()));
    assert!(image.symbols().iter().any(|s| s.raw == "_Z8row_readv"));
    assert_eq!(
        image.debuglink(),
        Some(("mysqld.debug".into(), 0x1234_5678))
    );
}

/// ELF header and section header fields, by offset in an ELF64 file.
fn mutate_elf(bytes: &mut Vec<u8>, rng: &mut fastrand::Rng, log: &mut Vec<String>) {
    let len = bytes.len() as u64;
    let values = [
        0u64,
        1,
        u64::MAX,
        u64::MAX / 2,
        0x8000_0000,
        0xffff_ffff,
        0xffff,
        len,
        len - 1,
        len + 1,
        64,
        rng.u64(..),
    ];
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes([bytes[0x3c], bytes[0x3d]]) as usize;
    // (offset, width): e_type, e_phoff, e_shoff, e_phentsize, e_phnum,
    // e_shentsize, e_shnum, e_shstrndx; then a section header's type,
    // offset, size, link, align and entsize.
    let header = [
        (0x10, 2),
        (0x20, 8),
        (0x28, 8),
        (0x36, 2),
        (0x38, 2),
        (0x3a, 2),
        (0x3c, 2),
        (0x3e, 2),
    ];
    let section = [
        (0x04, 4),
        (0x18, 8),
        (0x20, 8),
        (0x28, 4),
        (0x30, 8),
        (0x38, 8),
    ];
    for _ in 0..rng.usize(1..6) {
        let (at, width) = match rng.usize(0..5) {
            0 => header[rng.usize(0..header.len())],
            1 | 2 if shnum > 0 => {
                let (field, width) = section[rng.usize(0..section.len())];
                (shoff + 64 * rng.usize(0..shnum) + field, width)
            }
            3 => {
                let at = rng.usize(0..bytes.len());
                bytes[at] ^= 1 << rng.u8(0..8);
                log.push(format!("bit flipped at {at}"));
                continue;
            }
            _ => {
                let at = rng.usize(0..bytes.len());
                bytes.truncate(at);
                log.push(format!("cut at {at}"));
                return;
            }
        };
        let v = values[rng.usize(0..values.len())];
        if at + width <= bytes.len() {
            bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            log.push(format!("{width} bytes at {at:#x} = {v:#x}"));
        }
    }
}

/// The debug-file checks: debuginfod's `verify` (is it the debug file of
/// this build id?) and the ELF parse every resolution starts from.
#[test]
fn elf_readers_never_panic() {
    let elf = small_elf();
    let id = hex(&BUILD_ID);
    let dir = scratch_dir();
    let path = dir.path().join("f.debug");
    fuzz("elf", |rng, log| {
        let mut bytes = elf.clone();
        mutate_elf(&mut bytes, rng, log);
        // Written anew, never changed under a map of it.
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        drop(f);
        let file = std::fs::File::open(&path).unwrap();
        let _ = innoprof::resolve::debuginfod::verify(&file, &id).map_err(|e| assert_one_line(&e));
        match innoprof::resolve::ElfImage::open(&path) {
            Ok(image) => {
                let symbols = image.symbols().len();
                let _ = image.debuglink();
                let _ = image.data_object_names();
                image.for_each_rodata_section(|_| {});
                for address in [0, 0x10, u64::MAX, u64::MAX - 4] {
                    let _ = image.bytes_at(address, 64);
                    let _ = image.read_only_bytes_at(address, 64);
                    let _ = image.file_offset(address);
                }
                let _ = image.offset_map();
                log.push(format!("opened: {symbols} symbols"));
                true
            }
            Err(e) => {
                assert_one_line(&e);
                false
            }
        }
    });
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

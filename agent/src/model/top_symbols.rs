//! The opreport-style table: per function, samples where it was the leaf
//! (self) and samples where it was anywhere on the stack (total), as
//! shares of all samples.
//!
//! A frame's function is the ELF (or kernel) symbol holding the address,
//! not an inlined callee, so the table lines up with `opreport -l` and
//! `perf report --no-children`.

use foldhash::{HashMap, HashMapExt};

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};
use serde::{Deserialize, Serialize};

use crate::symbolize::{Frame, FrameKind, KERNEL_MODULE};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TopSymbols {
    /// What the counts are: `samples`, or `us` (off-CPU time).
    pub unit: String,
    /// All samples (or time) of the profile, the 100 %.
    pub total: u64,
    pub rows: Vec<SymbolRow>,
    /// Module → the other functions of the profile with at least
    /// [`MODULE_MIN_PCT`] of it (self or total), beyond `rows` (which carry
    /// their own): folded stacks carry no module, and `diff` names the
    /// module of every function whose share moved visibly.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub modules: std::collections::BTreeMap<String, Vec<String>>,
}

/// Share of a profile (self or total, %) from which a function's module is
/// kept in [`TopSymbols::modules`]: ~300 functions of a 30 s profile of a
/// busy server, where all its functions would be ~2,000 names (~100 KB).
pub const MODULE_MIN_PCT: f64 = 0.1;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SymbolRow {
    /// Samples with this function as the leaf.
    pub samples: u64,
    pub self_pct: f64,
    /// Samples with this function anywhere on the stack (counted once).
    pub total: u64,
    pub total_pct: f64,
    /// File name of the mapping (`mysqld`, `libc.so.6`) or
    /// `[kernel.kallsyms]`; empty when not known (read back from folded).
    pub module: String,
    pub symbol: String,
}

/// Which frame a sample's "self" goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelfFrame {
    /// The innermost frame (on-CPU: where the CPU was).
    Leaf,
    /// The innermost user frame: off-CPU stacks all end in the scheduler.
    UserLeaf,
    /// The innermost frame of this module (e.g. `mysqld`), else the
    /// innermost user frame: off-CPU stacks end in the same few libc
    /// waits, the server's own frame below them says who waits.
    InnermostIn(String),
}

#[derive(Debug)]
pub struct TopBuilder {
    mode: SelfFrame,
    /// Module → function → weight: looked up by borrowed names, so the
    /// ~100,000 frames of a 30 s profile allocate only for new functions.
    by_self: HashMap<String, HashMap<String, u64>>,
    /// Weight, and the last stack that added it: a function on a stack
    /// more than once (recursion) counts once, without sorting the stack's
    /// names to find repeats (~4 ms of a 30 s profile).
    by_total: HashMap<String, HashMap<String, (u64, u64)>>,
    total: u64,
    stacks: u64,
}

impl TopBuilder {
    pub fn new(mode: SelfFrame) -> Self {
        Self {
            mode,
            by_self: HashMap::new(),
            by_total: HashMap::new(),
            total: 0,
            stacks: 0,
        }
    }

    /// Adds one stack, frames root→leaf.
    pub fn add<F: std::borrow::Borrow<Frame>>(&mut self, frames: &[F], weight: u64) {
        if weight == 0 {
            return;
        }
        // Weights are a file's say (`from_folded`): they saturate.
        self.total = self.total.saturating_add(weight);
        let functions: Vec<&Frame> = frames
            .iter()
            .map(|f| f.borrow())
            .filter(|f| f.kind != FrameKind::Inlined)
            .collect();
        let user_leaf = || {
            functions
                .iter()
                .rev()
                .find(|f| f.kind != FrameKind::Kernel)
                .or(functions.last())
        };
        let leaf = match &self.mode {
            SelfFrame::Leaf => functions.last(),
            SelfFrame::UserLeaf => user_leaf(),
            SelfFrame::InnermostIn(module) => functions
                .iter()
                .rev()
                .find(|f| &f.module == module)
                .or_else(user_leaf),
        };
        if let Some(f) = leaf {
            let w = weight_of(&mut self.by_self, &f.module, &f.name);
            *w = w.saturating_add(weight);
        }
        self.stacks += 1;
        for f in &functions {
            let (total, last) = weight_of(&mut self.by_total, &f.module, &f.name);
            if *last != self.stacks {
                *total = total.saturating_add(weight);
                *last = self.stacks;
            }
        }
    }

    /// Adds one line of a folded file (`root;…;leaf count`).
    pub fn add_folded_line(&mut self, line: &str) {
        if let Some((stack, count)) = line.trim_end().rsplit_once(' ') {
            if let Ok(n) = count.parse::<u64>() {
                let frames: Vec<Frame> = stack.split(';').map(parse_folded_frame).collect();
                self.add(&frames, n);
            }
        }
    }

    /// Rows by self, then total, then name; at most `limit` (0: all).
    pub fn build(self, unit: &str, limit: usize) -> TopSymbols {
        let pct = |n: u64| {
            if self.total == 0 {
                0.0
            } else {
                n as f64 * 100.0 / self.total as f64
            }
        };
        let mut rows: Vec<SymbolRow> = self
            .by_total
            .iter()
            .flat_map(|(module, names)| {
                names
                    .iter()
                    .map(move |(name, &(total, _))| (module, name, total))
            })
            .map(|(module, name, total)| {
                let samples = self
                    .by_self
                    .get(module)
                    .and_then(|names| names.get(name))
                    .copied()
                    .unwrap_or(0);
                SymbolRow {
                    samples,
                    self_pct: pct(samples),
                    total,
                    total_pct: pct(total),
                    module: module.clone(),
                    symbol: name.clone(),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then(b.total.cmp(&a.total))
                .then_with(|| a.symbol.cmp(&b.symbol))
                .then_with(|| a.module.cmp(&b.module))
        });
        let mut modules = std::collections::BTreeMap::<String, Vec<String>>::new();
        if limit > 0 && rows.len() > limit {
            for r in rows.split_off(limit) {
                if !r.module.is_empty()
                    && (r.self_pct >= MODULE_MIN_PCT || r.total_pct >= MODULE_MIN_PCT)
                {
                    modules.entry(r.module).or_default().push(r.symbol);
                }
            }
            for names in modules.values_mut() {
                names.sort();
                names.dedup();
            }
        }
        TopSymbols {
            unit: unit.to_string(),
            total: self.total,
            rows,
            modules,
        }
    }
}

/// The weight kept for `module`'s `name`, made on first use.
fn weight_of<'a, W: Default>(
    by: &'a mut HashMap<String, HashMap<String, W>>,
    module: &str,
    name: &str,
) -> &'a mut W {
    if !by.contains_key(module) {
        by.insert(module.to_string(), HashMap::new());
    }
    let names = by.get_mut(module).expect("just made");
    if !names.contains_key(name) {
        names.insert(name.to_string(), W::default());
    }
    names.get_mut(name).expect("just made")
}

/// Reads a frame back from its folded form (see `Frame::folded_name`).
pub fn parse_folded_frame(s: &str) -> Frame {
    if let Some(name) = s.strip_suffix("_[k]") {
        Frame::new(name, KERNEL_MODULE, FrameKind::Kernel)
    } else if let Some(name) = s.strip_suffix(" [inlined]") {
        Frame::new(name, "", FrameKind::Inlined)
    } else {
        let kind = if s.starts_with('[') || s.contains("+0x") {
            FrameKind::Unknown
        } else {
            FrameKind::User
        };
        Frame::new(s, "", kind)
    }
}

/// Whether every weight of a folded text (the last column, and the one
/// before it in the differential form), all summed, fits in an `i64`:
/// what drawing its flame graph sums and subtracts (inferno counts in
/// `usize` and `isize`). A recording's never come near; a bundle's file
/// may say anything.
pub fn weights_fit(text: &str) -> bool {
    let mut sum: i64 = 0;
    for line in text.lines() {
        let mut columns = line.trim_end().rsplitn(3, ' ');
        for _ in 0..2 {
            let Some(n) = columns.next().and_then(|c| c.parse::<u64>().ok()) else {
                break;
            };
            match i64::try_from(n).ok().and_then(|n| sum.checked_add(n)) {
                Some(s) => sum = s,
                None => return false,
            }
        }
    }
    true
}

/// The full table of a folded file (every function).
pub fn from_folded(text: &str, mode: SelfFrame, unit: &str) -> TopSymbols {
    let mut b = TopBuilder::new(mode);
    for line in text.lines() {
        b.add_folded_line(line);
    }
    b.build(unit, 0)
}

/// `samples  self %  total %  module  symbol`, at most `limit` rows.
pub fn render(top: &TopSymbols, limit: usize) -> String {
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([top.unit.as_str(), "self %", "total %", "module", "symbol"]);
    for r in top.rows.iter().take(limit) {
        table.add_row([
            r.samples.to_string(),
            format!("{:.2}", r.self_pct),
            format!("{:.2}", r.total_pct),
            r.module.clone(),
            short(&r.symbol, 90),
        ]);
    }
    for col in 0..3 {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = table.to_string();
    out.push('\n');
    out
}

/// Long C++ signatures cut at `max` chars, keeping the start (the name).
fn short(name: &str, max: usize) -> String {
    if name.chars().count() > max {
        let head: String = name.chars().take(max - 1).collect();
        format!("{head}…")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle's folded file may say any weight: the table saturates,
    /// and a flame graph is drawn only where the sums fit.
    #[test]
    fn weights_past_u64_saturate_and_are_not_drawn() {
        let huge = format!("main;a {m}\nmain;b {m}\n", m = u64::MAX);
        let top = from_folded(&huge, SelfFrame::Leaf, "samples");
        assert_eq!(top.total, u64::MAX);
        assert!(!weights_fit(&huge));
        assert!(!weights_fit(&format!("main;a 1 {}\n", i64::MAX as u64 + 1)));
        assert!(!weights_fit(&format!("main;a {} 1\n", i64::MAX)));
        assert!(weights_fit(&format!("main;a {}\nmain;b x\n", i64::MAX)));
        assert!(weights_fit("main;a 3 5\nmain;b 2\n"));
    }

    fn f(name: &str, module: &str, kind: FrameKind) -> Frame {
        Frame::new(name, module, kind)
    }

    #[test]
    fn self_and_total_count_each_function_once() {
        let mut b = TopBuilder::new(SelfFrame::Leaf);
        let main = f("main", "app", FrameKind::User);
        let work = f("work", "app", FrameKind::User);
        let inl = f("helper", "app", FrameKind::Inlined);
        let k = f("do_syscall_64", KERNEL_MODULE, FrameKind::Kernel);
        // main → work → work (recursion) with an inlined helper: 3 samples.
        b.add(&[main.clone(), work.clone(), work.clone(), inl], 3);
        b.add(&[main.clone(), k], 1);
        let t = b.build("samples", 0);
        assert_eq!(t.total, 4);
        let row = |s: &str| t.rows.iter().find(|r| r.symbol == s).unwrap();
        assert_eq!((row("work").samples, row("work").total), (3, 3));
        assert_eq!(row("work").self_pct, 75.0);
        assert_eq!((row("main").samples, row("main").total), (0, 4));
        assert_eq!(row("do_syscall_64").module, KERNEL_MODULE);
        assert!(
            t.rows.iter().all(|r| r.symbol != "helper"),
            "inlined frames are not symbols"
        );
        assert_eq!(t.rows[0].symbol, "work");
    }

    /// Functions cut from the rows keep their module when their share is
    /// visible (>= 0.1 %); fainter ones do not.
    #[test]
    fn functions_beyond_the_rows_keep_their_module() {
        let mut b = TopBuilder::new(SelfFrame::Leaf);
        let main = f("main", "mysqld", FrameKind::User);
        b.add(&[main.clone(), f("hot", "mysqld", FrameKind::User)], 9_000);
        b.add(
            &[main.clone(), f("memcpy", "libc.so.6", FrameKind::User)],
            990,
        );
        b.add(&[main.clone(), f("warm", "mysqld", FrameKind::User)], 9);
        b.add(&[main, f("faint", "mysqld", FrameKind::User)], 1);
        let t = b.build("samples", 2);
        let shown: Vec<&str> = t.rows.iter().map(|r| r.symbol.as_str()).collect();
        assert_eq!(shown, ["hot", "memcpy"]);
        // warm: 9 of 10,000 = 0.09 % < 0.1 %; main is in every sample.
        assert_eq!(
            t.modules,
            [("mysqld".to_string(), vec!["main".to_string()])].into()
        );
    }

    #[test]
    fn user_leaf_skips_the_scheduler() {
        let mut b = TopBuilder::new(SelfFrame::UserLeaf);
        b.add_folded_line(
            "start_thread;os_event_wait;pthread_cond_wait;entry_SYSCALL_64_[k];schedule_[k] 1500",
        );
        let t = b.build("us", 0);
        assert_eq!(t.rows[0].symbol, "pthread_cond_wait");
        assert_eq!(t.rows[0].samples, 1500);
        let sched = t.rows.iter().find(|r| r.symbol == "schedule").unwrap();
        assert_eq!(
            (sched.samples, sched.total, sched.module.as_str()),
            (0, 1500, KERNEL_MODULE)
        );
    }

    #[test]
    fn innermost_frame_of_the_server() {
        let mut b = TopBuilder::new(SelfFrame::InnermostIn("mysqld".into()));
        let frames = [
            f("start_thread", "libc.so.6", FrameKind::User),
            f("os_event_wait_low", "mysqld", FrameKind::User),
            f("pthread_cond_wait", "libc.so.6", FrameKind::User),
            f("schedule", KERNEL_MODULE, FrameKind::Kernel),
        ];
        b.add(&frames, 10);
        b.add(&frames[2..], 5);
        let t = b.build("us", 0);
        assert_eq!(
            (t.rows[0].symbol.as_str(), t.rows[0].samples),
            ("os_event_wait_low", 10)
        );
        let libc = t
            .rows
            .iter()
            .find(|r| r.symbol == "pthread_cond_wait")
            .unwrap();
        assert_eq!(
            (libc.samples, libc.total),
            (5, 15),
            "no server frame: the user leaf"
        );
    }

    #[test]
    fn renders_opreport_columns() {
        let t = from_folded("main;spin 99\nmain;idle 1\n", SelfFrame::Leaf, "samples");
        let text = render(&t, 10);
        let first = text.lines().nth(2).unwrap();
        assert!(
            first.contains("99") && first.contains("99.00") && first.contains("spin"),
            "{text}"
        );
        assert!(text.lines().next().unwrap().contains("self %"));
    }
}

//! Folded stacks read back from a bundle (`diff`, `report DIR`, the flame
//! graphs), bounded in work as well as in bytes. A bundle is untrusted: a
//! 35 MB `oncpu.folded` of one line of 4,000,000 frames, or 2,000,000
//! short distinct lines, must not cost gigabytes and minutes. So the lines
//! are read one at a time, each frame name is kept once (interned) and a
//! stack is a list of its names' numbers, and:
//!
//! - a stack deeper than [`MAX_STACK_FRAMES`] keeps its first frames (the
//!   root side) and ends in a frame named [`TRUNCATED`]; the frames past
//!   the cap are never looked at;
//! - the distinct stacks past [`MAX_FILE_STACKS`] (or past
//!   [`MAX_FILE_FRAMES`] frames in all) are folded into one stack
//!   `[truncated]` carrying their summed weight, so totals stay exact (a
//!   differential, `diff`'s two files in one, may hold twice as many).
//!
//! No recording reaches the caps: a probe's stack map holds at most 65,536
//! stacks, the BPF side takes at most 127 user and 127 kernel frames, and
//! real mysqld stacks are 30–130 frames, inlined frames included. What was
//! cut is said in one line ([`Folded::note`]).
//!
//! [`parse`] is a pure function of the text: it never fails, and a line it
//! cannot read is counted and skipped.

use std::fmt::Write as _;

use indexmap::{IndexMap, IndexSet};

type Hasher = foldhash::fast::RandomState;

/// Most frames kept of one stack: 8x the deepest a recording writes.
pub const MAX_STACK_FRAMES: usize = 1024;
/// Most distinct stacks kept of one file: 4 full stack maps (a recording
/// of a restarted target merges its segments' stacks).
pub const MAX_FILE_STACKS: usize = 1 << 18;
/// Most frames kept of one file, all stacks together (64 MiB of frame
/// numbers): 65,536 stacks of 256 frames.
pub const MAX_FILE_FRAMES: usize = 1 << 24;
/// Most bytes of folded text innoprof writes from what it read
/// (`diff.*.folded`, and the text the flame graphs and tables are drawn
/// from); the lightest stacks past it are folded into `[truncated]`.
pub const MAX_TEXT_BYTES: usize = 64 << 20;
/// The frame that stands for what a cap cut.
pub const TRUNCATED: &str = "[truncated]";

/// The counts of a folded line: one (`stack count`) or two (inferno's
/// differential `stack before after`).
pub trait Counts: Copy + Default + PartialEq + std::fmt::Debug {
    /// Files a text of these counts stands for: a differential holds the
    /// stacks of two, so its caps on stacks and frames are twice a file's.
    const FILES: usize;
    /// The stack part of `line` and its counts; `None` when the line ends
    /// in no count.
    fn split(line: &str) -> Option<(&str, Self)>;
    fn add(&mut self, other: Self);
    fn write(&self, out: &mut String);
    /// What a flame graph's widths are drawn from (a differential's second
    /// column, as inferno draws it).
    fn width(&self) -> u64;
    fn sub(&mut self, other: Self);
}

impl Counts for u64 {
    const FILES: usize = 1;
    fn split(line: &str) -> Option<(&str, Self)> {
        let (stack, n) = line.rsplit_once(' ')?;
        Some((stack.trim_end(), n.parse().ok()?))
    }
    fn add(&mut self, other: Self) {
        *self = self.saturating_add(other);
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn width(&self) -> u64 {
        *self
    }
    fn sub(&mut self, other: Self) {
        *self = self.saturating_sub(other);
    }
}

/// The two counts of a differential line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delta {
    pub before: u64,
    pub after: u64,
}

impl Counts for Delta {
    const FILES: usize = 2;
    fn split(line: &str) -> Option<(&str, Self)> {
        let (rest, after) = u64::split(line)?;
        let (stack, before) = u64::split(rest)?;
        Some((stack, Delta { before, after }))
    }
    fn add(&mut self, o: Self) {
        self.before.add(o.before);
        self.after.add(o.after);
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{} {}", self.before, self.after);
    }
    fn width(&self) -> u64 {
        self.after
    }
    fn sub(&mut self, o: Self) {
        self.before.sub(o.before);
        self.after.sub(o.after);
    }
}

/// What the caps cut of a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    /// Lines deeper than [`MAX_STACK_FRAMES`], cut to it.
    pub deep_lines: u64,
    /// Lines of stacks past the file's caps, folded into `[truncated]`.
    pub folded_lines: u64,
    /// Lines that end in no count, skipped.
    pub unreadable_lines: u64,
    /// Stacks past [`MAX_TEXT_BYTES`] when written out, folded into
    /// `[truncated]` ([`Folded::to_text`]).
    pub unwritten_stacks: u64,
}

impl Cut {
    pub fn is_empty(&self) -> bool {
        *self == Cut::default()
    }
}

/// A folded file as read: its distinct stacks, root first, with counts.
#[derive(Debug, Clone)]
pub struct Folded<C> {
    names: IndexSet<Box<str>, Hasher>,
    stacks: IndexMap<Box<[u32]>, C, Hasher>,
    frames: usize,
    pub cut: Cut,
}

impl<C> Default for Folded<C> {
    fn default() -> Self {
        Self {
            names: IndexSet::default(),
            stacks: IndexMap::default(),
            frames: 0,
            cut: Cut::default(),
        }
    }
}

/// Reads folded text (`root;…;leaf count` lines, or with `C` = [`Delta`]
/// the differential form), within the caps. Lines with a zero count are
/// kept out (they weigh nothing); equal stacks are merged.
pub fn parse<C: Counts>(text: &str) -> Folded<C> {
    let mut f = Folded::<C>::default();
    let mut past_cap = C::default();
    let mut ids: Vec<u32> = Vec::with_capacity(128);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((stack, counts)) = C::split(line) else {
            f.cut.unreadable_lines += 1;
            continue;
        };
        if counts == C::default() {
            continue;
        }
        // What an earlier cut folded (innoprof's own capped text read
        // again) is that stack still, not one more stack under the cap.
        if stack == TRUNCATED {
            past_cap.add(counts);
            continue;
        }
        // Once the file's stacks are at the cap only known stacks merge:
        // a name never seen makes a new stack, which is not kept, so the
        // name is not kept either.
        let full = f.stacks.len() >= MAX_FILE_STACKS * C::FILES;
        let mut known = true;
        ids.clear();
        let mut names = stack.split(';');
        for name in names.by_ref().take(MAX_STACK_FRAMES) {
            match f.names.get_index_of(name) {
                Some(i) => ids.push(i as u32),
                None if full => {
                    known = false;
                    break;
                }
                None => ids.push(f.names.insert_full(name.into()).0 as u32),
            }
        }
        if known && names.next().is_some() {
            ids.truncate(MAX_STACK_FRAMES - 1);
            ids.push(f.intern(TRUNCATED));
            f.cut.deep_lines += 1;
        }
        if known {
            if let Some(c) = f.stacks.get_mut(ids.as_slice()) {
                c.add(counts);
                continue;
            }
        }
        if !known || full || f.frames + ids.len() > MAX_FILE_FRAMES * C::FILES {
            past_cap.add(counts);
            f.cut.folded_lines += 1;
            continue;
        }
        f.frames += ids.len();
        f.stacks.insert(ids.as_slice().into(), counts);
    }
    if past_cap != C::default() {
        let id = f.intern(TRUNCATED);
        f.stacks
            .entry(Box::from([id].as_slice()))
            .or_default()
            .add(past_cap);
    }
    f
}

impl<C: Counts> Folded<C> {
    fn intern(&mut self, name: &str) -> u32 {
        match self.names.get_index_of(name) {
            Some(i) => i as u32,
            None => self.names.insert_full(name.into()).0 as u32,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Distinct stacks kept.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// The name numbered `id` (a frame of [`Self::stacks`]).
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Each stack as frame numbers (root first), with its counts.
    pub fn stacks(&self) -> impl Iterator<Item = (&[u32], C)> + '_ {
        self.stacks.iter().map(|(k, c)| (&k[..], *c))
    }

    /// Each stack's frame names, root first.
    pub fn frames<'a>(&'a self, stack: &'a [u32]) -> impl Iterator<Item = &'a str> + 'a {
        stack.iter().map(|&i| self.name(i))
    }

    /// All counts summed.
    pub fn total(&self) -> C {
        let mut t = C::default();
        for c in self.stacks.values() {
            t.add(*c);
        }
        t
    }

    /// The stacks as folded text, lines sorted, each name made printable
    /// ([`crate::text::printable`]: a control byte of a symbol name must
    /// not reach a terminal, nor an SVG, where XML forbids it). At most
    /// [`MAX_TEXT_BYTES`]: the heaviest stacks are written, the others
    /// folded into one `[truncated]` line (counted in `cut`).
    pub fn to_text(&mut self) -> String {
        self.to_text_within(MAX_TEXT_BYTES)
    }

    fn to_text_within(&mut self, max_bytes: usize) -> String {
        let mut lines: Vec<(u64, String)> = self
            .stacks
            .iter()
            .map(|(stack, c)| {
                let mut line = String::new();
                for (i, &id) in stack.iter().enumerate() {
                    if i > 0 {
                        line.push(';');
                    }
                    line.push_str(&crate::text::printable(&self.names[id as usize]));
                }
                line.push(' ');
                c.write(&mut line);
                line.push('\n');
                (c.width(), line)
            })
            .collect();
        let bytes: usize = lines.iter().map(|(_, l)| l.len()).sum();
        if bytes > max_bytes {
            lines.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            let mut kept = 0;
            let mut written = TRUNCATED.len() + 64;
            while kept < lines.len() && written + lines[kept].1.len() <= max_bytes {
                written += lines[kept].1.len();
                kept += 1;
            }
            let mut rest = C::default();
            for (_, line) in lines.drain(kept..) {
                if let Some((_, c)) = C::split(line.trim_end()) {
                    rest.add(c);
                }
                self.cut.unwritten_stacks += 1;
            }
            // One line per stack: a kept `[truncated]` takes the rest in.
            match lines
                .iter_mut()
                .find(|(_, l)| C::split(l.trim_end()).is_some_and(|(s, _)| s == TRUNCATED))
            {
                Some((_, line)) => {
                    let (_, mut c) = C::split(line.trim_end()).expect("just matched");
                    c.add(rest);
                    *line = format!("{TRUNCATED} ");
                    c.write(line);
                    line.push('\n');
                }
                None => {
                    let mut line = format!("{TRUNCATED} ");
                    rest.write(&mut line);
                    line.push('\n');
                    lines.push((0, line));
                }
            }
        }
        lines.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        lines.into_iter().map(|(_, l)| l).collect()
    }

    /// What the caps cut of `what` (a file's path), in one line; `None`
    /// when nothing was cut.
    pub fn note(&self, what: &str) -> Option<String> {
        let parts = self.cut.describe();
        (!parts.is_empty()).then(|| {
            format!(
                "{}: {} (not a file innoprof wrote?)",
                crate::text::printable(what),
                parts.join("; ")
            )
        })
    }
}

impl Cut {
    /// Each kind of cut, said in a few words.
    pub fn describe(&self) -> Vec<String> {
        let mut parts = Vec::new();
        if self.deep_lines > 0 {
            parts.push(format!(
                "{} stack(s) deeper than {MAX_STACK_FRAMES} frames cut there (ending in {TRUNCATED})",
                self.deep_lines
            ));
        }
        if self.folded_lines > 0 {
            parts.push(format!(
                "{} line(s) past the caps of {MAX_FILE_STACKS} stacks or {MAX_FILE_FRAMES} frames \
                 per file (a differential's: twice that) folded into one {TRUNCATED} stack \
                 (weights kept)",
                self.folded_lines
            ));
        }
        if self.unwritten_stacks > 0 {
            parts.push(format!(
                "{} of the lightest stacks past {} MiB of text folded into {TRUNCATED} (weights kept)",
                self.unwritten_stacks,
                MAX_TEXT_BYTES >> 20
            ));
        }
        if self.unreadable_lines > 0 {
            parts.push(format!(
                "{} line(s) without a count skipped",
                self.unreadable_lines
            ));
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(f: &Folded<u64>) -> Vec<(Vec<&str>, u64)> {
        let mut v: Vec<(Vec<&str>, u64)> = f
            .stacks()
            .map(|(s, c)| (f.frames(s).collect(), c))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn merges_equal_stacks_and_skips_what_has_no_count() {
        let f = parse::<u64>("main;a 2\n\nmain;a 3\nmain;b x\nmain;b 0\n  main;c 1  \nnocount\n");
        assert_eq!(names(&f), [(vec!["main", "a"], 5), (vec!["main", "c"], 1)]);
        assert_eq!(f.cut.unreadable_lines, 2);
        assert_eq!(f.total(), 6);
    }

    /// A line of 4,000,000 frames keeps 1,024, the last `[truncated]`.
    #[test]
    fn a_deep_stack_is_cut_at_the_cap() {
        let mut line = "f;".repeat(4_000_000);
        line.pop();
        line.push_str(" 7\n");
        let f = parse::<u64>(&line);
        let (stack, count) = f.stacks().next().unwrap();
        assert_eq!((stack.len(), count), (MAX_STACK_FRAMES, 7));
        assert_eq!(f.frames(stack).last(), Some(TRUNCATED));
        assert_eq!(f.cut.deep_lines, 1);
        assert!(f
            .note("x/oncpu.folded")
            .unwrap()
            .contains("deeper than 1024"));
        // Exactly at the cap: nothing cut.
        let mut line = "g;".repeat(MAX_STACK_FRAMES);
        line.pop();
        line.push_str(" 1\n");
        let f = parse::<u64>(&line);
        assert!(f.cut.is_empty() && f.note("x").is_none());
        assert_eq!(f.stacks().next().unwrap().0.len(), MAX_STACK_FRAMES);
    }

    /// Stacks past the per-file cap weigh in one `[truncated]` stack;
    /// stacks already kept still merge.
    #[test]
    fn stacks_past_the_cap_fold_into_one_with_their_weight() {
        let mut text = String::new();
        for i in 0..MAX_FILE_STACKS + 1000 {
            let _ = writeln!(text, "main;f{i} 2");
        }
        text.push_str("main;f0 5\n");
        let mut f = parse::<u64>(&text);
        assert_eq!(f.len(), MAX_FILE_STACKS + 1);
        assert_eq!(f.total(), 2 * (MAX_FILE_STACKS as u64 + 1000) + 5);
        assert_eq!(f.cut.folded_lines, 1000);
        let out = f.to_text();
        assert!(out.contains("[truncated] 2000\n"), "{}", &out[..200]);
        assert!(out.contains("main;f0 7\n"));
        let again = parse::<u64>(&out);
        assert_eq!(again.total(), f.total());
        assert!(again.cut.is_empty());
    }

    #[test]
    fn differential_lines_read_both_counts() {
        let f = parse::<Delta>("main;a 1 5\nmain;b 4 0\nmain;c 3\n");
        assert_eq!(f.len(), 2);
        assert_eq!(
            f.total(),
            Delta {
                before: 5,
                after: 5
            }
        );
        assert_eq!(f.cut.unreadable_lines, 1);
    }

    /// Control characters of a name are written escaped, and the text
    /// reads back to the escaped names, frame for frame.
    #[test]
    fn names_are_written_printable() {
        let evil = "red\x1b[31m;nul\x00;bel\x07;nel\u{85};nonchar\u{fffe} 3\n";
        let mut f = parse::<u64>(evil);
        let text = f.to_text();
        assert_eq!(
            text,
            "red\\x1b[31m;nul\\x00;bel\\x07;nel\\u{85};nonchar\\u{fffe} 3\n"
        );
        let back = parse::<u64>(&text);
        assert_eq!(
            names(&back)[0].0,
            [
                "red\\x1b[31m",
                "nul\\x00",
                "bel\\x07",
                "nel\\u{85}",
                "nonchar\\u{fffe}"
            ]
        );
    }
}

//! Folded stacks (`root;…;leaf count`), the input format of flamegraph.pl
//! and inferno. Deterministic: lines sorted, so files diff cleanly.

use std::collections::BTreeMap;

/// Accumulates weighted stacks for one probe.
#[derive(Debug, Default)]
pub struct FoldedStacks {
    lines: BTreeMap<String, u64>,
}

impl FoldedStacks {
    pub fn add(&mut self, frames: &[String], weight: u64) {
        self.add_line(frames.iter().map(String::as_str), weight);
    }

    /// [`Self::add`] for named frames, as `Frame::folded_name` writes
    /// them, with no string made per frame (a 30 s CPU profile has
    /// ~100,000 of them).
    pub fn add_frames(&mut self, frames: &[&crate::symbolize::Frame], weight: u64) {
        use crate::symbolize::FrameKind;
        let mut key = String::new();
        for (i, f) in frames.iter().enumerate() {
            if i > 0 {
                key.push(';');
            }
            push_sanitized(&mut key, &f.name);
            match f.kind {
                FrameKind::Inlined => key.push_str(" [inlined]"),
                FrameKind::Kernel => key.push_str("_[k]"),
                FrameKind::User | FrameKind::Unknown => {}
            }
        }
        self.add_key(key, weight);
    }

    fn add_line<'a>(&mut self, frames: impl Iterator<Item = &'a str>, weight: u64) {
        let mut key = String::new();
        for (i, f) in frames.enumerate() {
            if i > 0 {
                key.push(';');
            }
            push_sanitized(&mut key, f);
        }
        self.add_key(key, weight);
    }

    fn add_key(&mut self, key: String, weight: u64) {
        if weight == 0 {
            return;
        }
        *self.lines.entry(key).or_default() += weight;
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn render(&self) -> String {
        self.lines
            .iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect()
    }
}

/// `;` separates frames and a newline ends a record; neither may appear
/// inside a frame name (each is written `:`). Other control characters
/// are escaped as text outputs escape them ([`crate::text::printable`]):
/// the folded file is shown in terminals, and its names reach the SVGs,
/// where XML forbids them.
fn push_sanitized(out: &mut String, frame: &str) {
    // Nearly every name has neither: one scan, one copy.
    let frame: std::borrow::Cow<'_, str> =
        if memchr::memchr2(b';', b'\n', frame.as_bytes()).is_none() {
            frame.into()
        } else {
            frame.replace([';', '\n'], ":").into()
        };
    out.push_str(&crate::text::printable(&frame));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_sorts() {
        let mut f = FoldedStacks::default();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        f.add(&s(&["main", "b"]), 2);
        f.add(&s(&["main", "a;x"]), 1);
        f.add(&s(&["main", "b"]), 3);
        f.add(&s(&["main", "zero"]), 0);
        assert_eq!(f.render(), "main;a:x 1\nmain;b 5\n");
    }

    /// Named frames fold as their `folded_name`s do, sanitized alike.
    #[test]
    fn named_frames_fold_as_their_folded_names() {
        use crate::symbolize::{Frame, FrameKind};
        let frames = [
            Frame::new("main", "mysqld", FrameKind::User),
            Frame::new("a;b\nc", "mysqld", FrameKind::User),
            Frame::new("mutex_enter;x", "mysqld", FrameKind::Inlined),
            Frame::new("[unknown]", "", FrameKind::Unknown),
            Frame::new("do_syscall_64", "[kernel.kallsyms]", FrameKind::Kernel),
        ];
        let refs: Vec<&Frame> = frames.iter().collect();
        let names: Vec<String> = frames.iter().map(Frame::folded_name).collect();
        let (mut by_frames, mut by_names) = (FoldedStacks::default(), FoldedStacks::default());
        by_frames.add_frames(&refs, 3);
        by_names.add(&names, 3);
        assert_eq!(by_frames.render(), by_names.render());
        assert_eq!(
            by_frames.render(),
            "main;a:b:c;mutex_enter:x [inlined];[unknown];do_syscall_64_[k] 3\n"
        );
    }

    /// A symbol name's control characters (a terminal's escape, NUL, BEL,
    /// the C1 NEL) are written escaped, and the line reads back to the
    /// same frames, escaped.
    #[test]
    fn control_characters_are_written_escaped() {
        let names = ["evil\x1b[31m", "nul\x00", "bel\x07", "nel\u{85}x"];
        let mut f = FoldedStacks::default();
        f.add(&names.map(String::from), 2);
        let text = f.render();
        assert_eq!(text, "evil\\x1b[31m;nul\\x00;bel\\x07;nel\\u{85}x 2\n");
        let back = crate::report::folded_read::parse::<u64>(&text);
        let (stack, count) = back.stacks().next().unwrap();
        let read: Vec<&str> = back.frames(stack).collect();
        let want: Vec<String> = names
            .iter()
            .map(|n| crate::text::printable(n).into())
            .collect();
        assert_eq!(
            (read, count),
            (want.iter().map(String::as_str).collect(), 2)
        );
    }
}

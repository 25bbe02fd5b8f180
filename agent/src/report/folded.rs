//! Folded stacks (`root;…;leaf count`), the input format of flamegraph.pl
//! and inferno. Deterministic: lines sorted, so files diff cleanly.

use std::collections::BTreeMap;

/// Every folded file of a bundle (a probe's, the CPU profile's, a
/// differential one): `STEM.folded`. Name one with
/// [`crate::outputs::instance`].
pub const FILES: &str = "*.folded";

/// Accumulates weighted stacks for one probe.
#[derive(Debug, Default)]
pub struct FoldedStacks {
    lines: BTreeMap<String, u64>,
}

impl FoldedStacks {
    pub fn add(&mut self, frames: &[String], weight: u64) {
        if weight == 0 {
            return;
        }
        let key = frames
            .iter()
            .map(|f| sanitize(f))
            .collect::<Vec<_>>()
            .join(";");
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
/// inside a frame name.
fn sanitize(frame: &str) -> String {
    frame.replace([';', '\n'], ":")
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
}

//! A stack as named, before it is flattened to text: each address with
//! its mapping and its frames (function, then what was inlined into it),
//! plus the marker frames innoprof adds (`[truncated]`, a probe's
//! function, a latch, a call site). Folded files and flame graphs take its
//! names; pprof takes its addresses, mappings, lines and thread.

use std::sync::Arc;

use crate::symbolize::{Frame, Location};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackFrame {
    /// An address of the stack, as the symbolizer named it.
    At(Arc<Location>),
    /// A frame with no address: a marker, or a probe's own function at
    /// the root of its stack's leaf.
    Marker(Frame),
}

/// One stack, root→leaf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedStack {
    pub frames: Vec<StackFrame>,
    /// The thread's name (`comm`) when the stack was taken, where known.
    pub thread: Option<String>,
}

impl NamedStack {
    /// Every frame, root→leaf (inlined frames after their function).
    pub fn flat(&self) -> Vec<&Frame> {
        let mut out = Vec::with_capacity(self.frames.len());
        for f in &self.frames {
            match f {
                StackFrame::At(l) => out.extend(l.frames.iter()),
                StackFrame::Marker(m) => out.push(m),
            }
        }
        out
    }

    /// The frames as folded files write them.
    pub fn folded_names(&self) -> Vec<String> {
        self.flat().into_iter().map(Frame::folded_name).collect()
    }

    pub fn push_located(&mut self, locations: impl IntoIterator<Item = Arc<Location>>) {
        self.frames
            .extend(locations.into_iter().map(StackFrame::At));
    }

    pub fn push_marker(&mut self, frame: Frame) {
        self.frames.push(StackFrame::Marker(frame));
    }
}

/// Every stack of a recording as named, behind its folded files: what its
/// pprof files are built from.
#[derive(Debug, Clone, Default)]
pub struct RecordedStacks {
    /// (stack, samples)
    pub oncpu: Vec<(NamedStack, u64)>,
    /// Per `oncpu` stack (same order; shorter: none for the rest): its
    /// statement's fingerprint, the pprof `statement` label.
    pub oncpu_statements: Vec<Option<String>>,
    /// (stack, microseconds blocked)
    pub offcpu: Vec<(NamedStack, u64)>,
    /// Per probe with stacks, in the summary's order.
    pub probes: Vec<ProbeStackSet>,
}

/// One probe's stacks as taken: each with its calls and wait time.
#[derive(Debug, Clone, Default)]
pub struct ProbeStackSet {
    pub probe: String,
    /// (stack, calls, wait ns); wait is 0 for a count probe.
    pub stacks: Vec<(NamedStack, u64, u64)>,
    /// The latch and call site labels of each stack, where it has them.
    pub labels: Vec<Vec<(String, String)>>,
}

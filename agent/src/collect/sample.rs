//! One stack counter as read from the BPF side, with the hits it carries.

use crate::bpf::abi::{Callsite, SlotId, StackKey};

#[derive(Debug, Clone)]
pub struct StackSample {
    pub slot: SlotId,
    /// Instruction pointers, innermost first; empty when the stack was lost.
    pub ips: Vec<u64>,
    pub site: Callsite,
    /// The role of the thread that took it (`thread_role` id; 0: unknown).
    pub role: u32,
    pub count: u64,
    pub wait_ns: u64,
    /// Its counter's key in `stack_counts`.
    pub key: StackKey,
    /// The fingerprint of the statement whose hits these are, when the
    /// statement book split the counter ([`StackSample::split`]).
    pub statement: Option<String>,
    /// No stack: the hits of a (call site, role) cell none of whose hits
    /// took one, made by [`scale_to_cells`] so the stacks keep the exact
    /// tables' split. (A sample with no `ips` and this false is a stack
    /// that was lost.)
    pub unsampled: bool,
}

impl StackSample {
    /// This counter split by statement: a sample per `(fingerprint, calls,
    /// wait)` part, and one without a statement for the rest (hits of
    /// threads with no statement, or not tied to one). The parts never
    /// take more than the counter holds.
    pub fn split(self, parts: &[(String, u64, u64)]) -> Vec<StackSample> {
        let (mut count, mut wait_ns) = (self.count, self.wait_ns);
        let mut out = Vec::with_capacity(parts.len() + 1);
        for (fingerprint, c, w) in parts {
            let c = (*c).min(count);
            if c == 0 {
                continue;
            }
            let w = (*w).min(wait_ns);
            count -= c;
            wait_ns -= w;
            out.push(StackSample {
                count: c,
                wait_ns: w,
                statement: Some(fingerprint.clone()),
                ..self.clone()
            });
        }
        if count > 0 {
            out.push(StackSample {
                count,
                wait_ns,
                ..self
            });
        }
        out
    }
}

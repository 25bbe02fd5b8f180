//! Raw stacks to a named profile: folded stacks (on-CPU by samples,
//! off-CPU by microseconds blocked), flame graphs, the top-symbols tables
//! and the summary counters.

use crate::model::files::{OFFCPU_FOLDED, OFFCPU_SVG, ONCPU_FOLDED, ONCPU_SVG};
use crate::model::named_stack::{NamedStack, StackFrame};
use crate::model::raw_stacks::{RawCpuSample, RawCpuStacks};
use crate::model::summary::{
    CpuSummary, OffCpuLost, OffCpuSummary, OnCpuLost, OnCpuSummary, ProgramCost,
};
use crate::model::top_symbols::{SelfFrame, TopBuilder, TopSymbols};
use crate::report::flamegraph;
use crate::report::folded::FoldedStacks;
use crate::symbolize::{Frame, FrameKind, StackSymbolizer, KERNEL_MODULE};

use crate::cpu::abi::{Counter, CpuStack, STACK_KERN_LOST, STACK_TRUNCATED, STACK_UNWIND_STOP};
use crate::cpu::RawCpuProfile;
use crate::report::flamegraph::FlameGraphError;

/// Rows of each top table kept in summary.json.
pub const TOP_ROWS: usize = 50;

#[derive(Debug, Clone)]
pub struct CpuProfile {
    pub summary: CpuSummary,
    pub oncpu_folded: String,
    pub offcpu_folded: Option<String>,
    /// The same stacks as named (for pprof): samples, microseconds.
    pub oncpu_stacks: Vec<(NamedStack, u64)>,
    /// Per on-CPU stack (same order): its statement's fingerprint, where
    /// known (the pprof `statement` label).
    pub oncpu_statements: Vec<Option<String>>,
    pub offcpu_stacks: Vec<(NamedStack, u64)>,
}

impl RawCpuProfile {
    /// The profile's stacks as a raw bundle keeps them (and as they are
    /// named, on the host as later: [`NamedCpu::of`]).
    pub fn raw_stacks(&self) -> RawCpuStacks {
        let sample = |s: &CpuStack, value: u64| RawCpuSample {
            flags: s.flags,
            thread: s.thread(),
            user: s.user_ips(),
            kernel: s.kernel_ips(),
            value,
            statement: (s.query_id != 0)
                .then(|| self.statement_names.get(&s.query_id))
                .flatten()
                .map(|fp| crate::model::raw_stacks::statement_label(fp)),
        };
        RawCpuStacks {
            exe_module: self.exe_module.clone(),
            oncpu: self.oncpu.iter().map(|(s, n)| sample(s, *n)).collect(),
            offcpu: self.opts.offcpu.then(|| {
                let blocked = self.offcpu.iter().map(|(s, v)| sample(s, v.total_ns));
                let still = self.still_blocked.iter().map(|(s, ns)| sample(s, *ns));
                blocked.chain(still).collect()
            }),
        }
    }

    /// The profile named: its stacks by `symbolizer`
    /// ([`NamedCpu::of`], from [`Self::raw_stacks`]), its counters as the
    /// BPF side kept them.
    pub fn symbolize(&self, symbolizer: &mut StackSymbolizer) -> CpuProfile {
        self.named(NamedCpu::of(&self.raw_stacks(), symbolizer))
    }

    /// The profile with its stacks named as `named`.
    pub fn named(&self, named: NamedCpu) -> CpuProfile {
        let samples = self.counter(Counter::Samples);
        let ticks_expected =
            (self.cpus as f64 * self.opts.frequency_hz as f64 * self.duration_s).round() as u64;
        let oncpu = OnCpuSummary {
            event: "cpu-clock".to_string(),
            frequency_hz: self.opts.frequency_hz,
            cpus: self.cpus,
            samples,
            ticks_seen: self.counter(Counter::Ticks),
            ticks_expected,
            target_cpu_pct: if ticks_expected > 0 {
                samples as f64 * 100.0 / ticks_expected as f64
            } else {
                0.0
            },
            lost: OnCpuLost {
                unwind_stopped: self.counter(Counter::UnwindStop),
                kernel_stack: self.counter(Counter::KernLost),
                truncated: self.counter(Counter::Truncated),
                map_full: self.counter(Counter::OnCpuFull),
            },
            distinct_stacks: self.oncpu.len(),
            probe_handling_samples: 0,
            program: self
                .programs
                .sample
                .map(|r| ProgramCost::new(r, self.duration_s)),
            folded: None,
            flamegraph: None,
            // Set by the naming (`NamedCpu::into_profile`).
            top: TopBuilder::new(SelfFrame::Leaf).build("samples", 0),
        };
        let offcpu = self.opts.offcpu.then(|| OffCpuSummary {
            min_block_ns: self.opts.offcpu_min_ns,
            weight_unit: "us".to_string(),
            blocks: self.counter(Counter::OffBlocks),
            blocked_ns_total: self.offcpu.iter().map(|(_, v)| v.total_ns).sum(),
            still_blocked_threads: self.still_blocked.len() as u64,
            still_blocked_ns: self.still_blocked.iter().map(|(_, ns)| ns).sum(),
            below_min_blocks: self.counter(Counter::OffShort),
            below_min_ns: self.counter(Counter::OffShortNs),
            preempted_switches: self.counter(Counter::OffPreempted),
            program: self
                .programs
                .switch
                .map(|r| ProgramCost::new(r, self.duration_s)),
            lost: OffCpuLost {
                unwind_stopped: self.counter(Counter::OffUnwindStop),
                map_full: self.counter(Counter::OffFull),
                start_map_full: self.counter(Counter::OffStartFull),
            },
            distinct_stacks: self.offcpu.len(),
            folded: None,
            flamegraph: None,
            top: TopBuilder::new(SelfFrame::Leaf).build("us", 0),
        });
        named.into_profile(CpuSummary {
            oncpu,
            offcpu,
            unwind: self.unwind.clone(),
        })
    }
}

/// What naming a profile's stacks gives: the folded stacks, the top
/// tables, the stacks as named (for pprof), and the samples taken in the
/// kernel's uprobe handling. The one naming of CPU stacks: a recording's
/// on the host, and a raw bundle's later (`innoprof report`), which is
/// why both name a stack alike.
pub struct NamedCpu {
    oncpu_folded: FoldedStacks,
    oncpu_top: TopSymbols,
    oncpu_stacks: Vec<(NamedStack, u64)>,
    /// Per on-CPU stack (same order): its statement label.
    oncpu_statements: Vec<Option<String>>,
    probe_handling_samples: u64,
    /// Folded, top table, stacks (microseconds blocked).
    offcpu: Option<(FoldedStacks, TopSymbols, Vec<(NamedStack, u64)>)>,
}

impl NamedCpu {
    /// Names `raw`'s stacks with `symbolizer`.
    pub fn of(raw: &RawCpuStacks, symbolizer: &mut StackSymbolizer) -> Self {
        let mut on_folded = FoldedStacks::default();
        let mut on_top = TopBuilder::new(SelfFrame::Leaf);
        let mut oncpu_stacks = Vec::with_capacity(raw.oncpu.len());
        let mut oncpu_statements = Vec::with_capacity(raw.oncpu.len());
        let mut probe_handling_samples = 0;
        // Every kernel address at once, with whether its stack's first
        // address is exact (as `named_stack` is called below): the
        // kernel's lookup runs per batch.
        let oncpu = raw.oncpu.iter().map(|s| (s, true));
        let offcpu = raw.offcpu.iter().flatten().map(|s| (s, false));
        symbolizer.name_kernel_stacks(
            oncpu
                .chain(offcpu)
                .filter(|(s, _)| s.flags & STACK_KERN_LOST == 0)
                .map(|(s, exact_first)| (s.kernel.clone(), exact_first)),
        );
        for s in &raw.oncpu {
            // A perf-event sample interrupts the thread: the first kernel
            // address is the interrupted instruction, not a return address.
            let named = named_stack(s, symbolizer, true);
            let frames = named.flat();
            if in_uprobe_handling(&frames) {
                probe_handling_samples += s.value;
            }
            on_folded.add_frames(&frames, s.value);
            on_top.add(&frames, s.value);
            oncpu_stacks.push((named, s.value));
            oncpu_statements.push(s.statement.clone());
        }
        let offcpu = raw.offcpu.as_ref().map(|stacks| {
            let mut folded = FoldedStacks::default();
            let mode = match &raw.exe_module {
                Some(m) => SelfFrame::InnermostIn(m.clone()),
                None => SelfFrame::UserLeaf,
            };
            let mut top = TopBuilder::new(mode);
            let mut named_stacks = Vec::with_capacity(stacks.len());
            for s in stacks {
                // Taken in the tracepoint: every kernel address is a return address.
                let named = without_tracing(named_stack(s, symbolizer, false));
                let frames = named.flat();
                let us = s.value.div_ceil(1000);
                folded.add_frames(&frames, us);
                top.add(&frames, us);
                named_stacks.push((named, us));
            }
            (folded, top.build("us", TOP_ROWS), named_stacks)
        });
        Self {
            oncpu_folded: on_folded,
            oncpu_top: on_top.build("samples", TOP_ROWS),
            oncpu_stacks,
            oncpu_statements,
            probe_handling_samples,
            offcpu,
        }
    }

    /// The profile of `summary` (its counters as recorded) with these
    /// names: its top tables, folded files and uprobe-handling samples
    /// replaced.
    pub fn into_profile(self, mut summary: CpuSummary) -> CpuProfile {
        let on = &mut summary.oncpu;
        on.probe_handling_samples = self.probe_handling_samples;
        on.top = self.oncpu_top;
        let some = !self.oncpu_folded.is_empty();
        on.folded = some.then(|| ONCPU_FOLDED.to_string());
        on.flamegraph = some.then(|| ONCPU_SVG.to_string());
        let mut offcpu_folded = None;
        let mut offcpu_stacks = Vec::new();
        if let (Some(off), Some((folded, top, stacks))) = (summary.offcpu.as_mut(), self.offcpu) {
            let some = !folded.is_empty();
            off.folded = some.then(|| OFFCPU_FOLDED.to_string());
            off.flamegraph = some.then(|| OFFCPU_SVG.to_string());
            off.top = top;
            offcpu_folded = Some(folded.render());
            offcpu_stacks = stacks;
        }
        CpuProfile {
            summary,
            oncpu_folded: self.oncpu_folded.render(),
            offcpu_folded,
            oncpu_stacks: self.oncpu_stacks,
            oncpu_statements: self.oncpu_statements,
            offcpu_stacks,
        }
    }
}

impl CpuProfile {
    /// The files this profile adds to an output directory: (name, contents).
    pub fn files(&self) -> Result<Vec<(String, String)>, FlameGraphError> {
        let mut out = Vec::new();
        let on = &self.summary.oncpu;
        if on.folded.is_some() {
            out.push((ONCPU_FOLDED.to_string(), self.oncpu_folded.clone()));
            let title = format!(
                "on-CPU: {} samples at {} Hz on {} CPUs",
                on.samples, on.frequency_hz, on.cpus
            );
            push_svg(&mut out, ONCPU_SVG, &self.oncpu_folded, &title, "samples")?;
        }
        if let (Some(off), Some(text)) = (&self.summary.offcpu, &self.offcpu_folded) {
            if off.folded.is_some() {
                out.push((OFFCPU_FOLDED.to_string(), text.clone()));
                let title = format!(
                    "off-CPU: time blocked >= {} us, by stack",
                    off.min_block_ns / 1000
                );
                push_svg(&mut out, OFFCPU_SVG, text, &title, "us")?;
            }
        }
        Ok(out)
    }
}

fn push_svg(
    out: &mut Vec<(String, String)>,
    name: &str,
    folded: &str,
    title: &str,
    unit: &str,
) -> Result<(), FlameGraphError> {
    if let Some(drawn) = flamegraph::render(folded, title, unit)? {
        out.push((
            name.to_string(),
            String::from_utf8(drawn.svg).expect("inferno writes UTF-8"),
        ));
    }
    Ok(())
}

/// The kernel frames above `__schedule` in an off-CPU stack are the
/// tracepoint and this profiler's own BPF program, not the thread's: cut
/// them.
fn without_tracing(mut stack: NamedStack) -> NamedStack {
    let schedule = |f: &StackFrame| match f {
        StackFrame::At(l) => l
            .frames
            .iter()
            .any(|f| f.kind == FrameKind::Kernel && f.name == "__schedule"),
        StackFrame::Marker(_) => false,
    };
    if let Some(i) = stack.frames.iter().rposition(schedule) {
        stack.frames.truncate(i + 1);
    }
    stack
}

/// A sample taken while the target's thread was in the kernel's uprobe
/// handling: the breakpoint trap (`asm_exc_int3`, `uprobe_notify_resume`,
/// `handle_swbp`), the link's handler and the probe programs it runs, the
/// out-of-line step's return (`handle_singlestep`) and the return
/// trampoline (`__x64_sys_uretprobe`, `handle_trampoline`). Every such
/// function of the kernel carries `uprobe` or `uretprobe` in its name but
/// the trap's entry and these three, which run in no other case in a
/// server (nothing else plants breakpoints in it).
///
/// The trap's entry runs with interrupts off: the cpu-clock timer that
/// expires then fires when they are back on, at `irqentry_exit_to_user_mode`
/// under `asm_exc_int3` (a quarter to a third of these samples on MySQL 5.6.24 under
/// `--probes all`): still the trap's time, counted by its entry frame.
fn in_uprobe_handling(frames: &[&Frame]) -> bool {
    frames.iter().any(|f| {
        f.kind == FrameKind::Kernel
            && (f.name.contains("uprobe")
                || f.name.contains("uretprobe")
                || f.name.ends_with("exc_int3")
                || matches!(
                    f.name.as_str(),
                    "handle_swbp" | "handle_singlestep" | "handle_trampoline"
                ))
    })
}

fn marker(name: &str, kind: FrameKind) -> Frame {
    let module = if kind == FrameKind::Kernel {
        KERNEL_MODULE
    } else {
        ""
    };
    Frame::new(name, module, kind)
}

/// Root→leaf: the user stack, then the kernel stack above it. Missing
/// root frames stay visible as a `[truncated]` or `[unwind stopped]` root,
/// an unreadable kernel part as `[kernel stack lost]`, so no sample changes
/// its meaning silently.
fn named_stack(
    stack: &RawCpuSample,
    symbolizer: &mut StackSymbolizer,
    exact_kernel_first: bool,
) -> NamedStack {
    let mut named = NamedStack {
        frames: Vec::new(),
        thread: stack.thread.clone(),
    };
    // The first user address is where the thread left user mode
    // (interrupted or at its syscall), never a return address.
    let user = symbolizer.user_locations(&stack.user, true);
    // The thread's role at the root, from the same marker functions the
    // probes' BPF side finds on a thread's stack (see `thread_role`).
    let role = crate::plan::thread_role::role_of_frames(
        user.iter()
            .flat_map(|l| l.frames.iter().map(|f| f.name.as_str())),
    );
    if role != 0 {
        let name = format!("[{}]", crate::plan::thread_role::role(role).0);
        named.push_marker(marker(&name, FrameKind::Unknown));
    }
    if stack.flags & STACK_TRUNCATED != 0 {
        named.push_marker(marker("[truncated]", FrameKind::Unknown));
    } else if stack.flags & STACK_UNWIND_STOP != 0 {
        named.push_marker(marker("[unwind stopped]", FrameKind::Unknown));
    }
    named.push_located(user);
    if stack.flags & STACK_KERN_LOST != 0 {
        named.push_marker(marker("[kernel stack lost]", FrameKind::Kernel));
    } else {
        named.push_located(symbolizer.kernel_locations(&stack.kernel, exact_kernel_first));
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, kind: FrameKind) -> Frame {
        Frame {
            name: name.to_string(),
            module: if kind == FrameKind::Kernel {
                KERNEL_MODULE.to_string()
            } else {
                "mysqld".to_string()
            },
            kind,
            source: None,
        }
    }

    #[test]
    fn samples_in_the_kernels_uprobe_handling_are_told_apart() {
        let user = frame("mutex_enter_func", FrameKind::User);
        let in_handling = |kernel: &[&str]| {
            let mut frames = vec![user.clone()];
            frames.extend(kernel.iter().map(|n| frame(n, FrameKind::Kernel)));
            in_uprobe_handling(&frames.iter().collect::<Vec<_>>())
        };
        // The trap and the program it runs; the return trampoline.
        assert!(in_handling(&[
            "asm_exc_int3",
            "exc_int3",
            "irqentry_exit_to_user_mode",
            "uprobe_notify_resume",
            "handle_swbp",
            "uprobe_multi_link_handler",
            "bpf_prog_0123456789abcdef_enter",
        ]));
        assert!(in_handling(&["entry_SYSCALL_64", "__x64_sys_uretprobe"]));
        assert!(in_handling(&["asm_exc_int3", "irqentry_exit_to_user_mode"]));
        // A syscall, an interrupt, a page fault: the server's own.
        assert!(!in_handling(&[
            "entry_SYSCALL_64",
            "do_syscall_64",
            "__x64_sys_futex"
        ]));
        assert!(!in_handling(&["asm_exc_page_fault", "exc_page_fault"]));
        assert!(!in_handling(&[]));
        // A user function of that name is not the kernel's.
        assert!(!in_uprobe_handling(&[&frame(
            "uprobe_notify_resume",
            FrameKind::User
        )]));
    }
}

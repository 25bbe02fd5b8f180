//! The CPU part of the stdout summary: what was sampled, what was lost,
//! and the top-symbols tables.

use crate::model::summary::CpuSummary;
use crate::model::top_symbols;
use crate::text::units;

/// Rows of the on-CPU and off-CPU tables on stdout (summary.json has more).
const ONCPU_ROWS: usize = 25;
const OFFCPU_ROWS: usize = 15;

pub fn render(cpu: &CpuSummary) -> String {
    render_rows(cpu, ONCPU_ROWS, OFFCPU_ROWS)
}

/// [`render`] with the number of table rows chosen (`innoprof top`).
pub fn render_rows(cpu: &CpuSummary, oncpu_rows: usize, offcpu_rows: usize) -> String {
    let on = &cpu.oncpu;
    let l = &on.lost;
    let mut out = format!(
        "\non-CPU: {} samples ({}-Hz {} on {} CPUs, target ran {:.1}% of their time); ticks seen {} of ~{} expected; \
         stacks incomplete: {} user walks stopped, {} kernel, {} truncated; not counted (map full): {}\n",
        on.samples,
        on.frequency_hz,
        on.event,
        on.cpus,
        on.target_cpu_pct,
        on.ticks_seen,
        on.ticks_expected,
        l.unwind_stopped,
        l.kernel_stack,
        l.truncated,
        l.map_full,
    );
    if on.samples > 0 {
        out.push_str(&top_symbols::render(&on.top, oncpu_rows));
    }
    if let Some(off) = &cpu.offcpu {
        out.push_str(&format!(
            "\noff-CPU: {} blocks >= {} ({} blocked), {} threads still blocked at the end ({}); \
             below threshold: {} blocks ({}); preempted (runnable) switches: {}; \
             lost: {} user walks stopped, {} map full, {} start map full\n",
            off.blocks,
            units::ns(off.min_block_ns),
            units::ns(off.blocked_ns_total),
            off.still_blocked_threads,
            units::ns(off.still_blocked_ns),
            off.below_min_blocks,
            units::ns(off.below_min_ns),
            off.preempted_switches,
            off.lost.unwind_stopped,
            off.lost.map_full,
            off.lost.start_map_full,
        ));
        if off.top.total > 0 {
            out.push_str(&top_symbols::render(&off.top, offcpu_rows));
        }
    }
    out
}

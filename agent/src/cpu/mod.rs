//! CPU profiling of the target: on-CPU samples from the cpu-clock perf
//! event and, on request, off-CPU (blocked) time from sched_switch, both
//! aggregated by stack in BPF maps (bpf/cpu.bpf.c).
//!
//! [`CpuProfiler::start`] loads and attaches; [`CpuProfiler::stop`] reads
//! the maps and detaches (dropping the profiler detaches too);
//! [`RawCpuProfile::symbolize`] turns stacks into folded stacks, flame
//! graphs and the top-symbols table.

pub mod abi;
mod error;
mod offcpu;
mod sampler;
pub mod unwind;
pub mod unwind_cache;
pub mod unwind_index;

use crate::bpf::layout::cpu as bpf;
pub use error::CpuError;
use std::time::Instant;

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder};

use crate::bpf::abi::from_bytes;
use crate::bpf::run_stats::ProgramRuns;
use crate::collect::{map, read_hash, CollectError};
use crate::symbolize::ProcessMaps;
use abi::{Counter, CpuStack, OffCpuVal, UnwindRow, COUNTERS, CPU_OBJ, PROG_SAMPLE, PROG_SWITCH};
use unwind::UnwindTable;
use unwind_index::{search_steps, UnwindIndex};

pub use unwind::UnwindInfo;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuOptions {
    /// cpu-clock samples per second per CPU. 99, not 100, so sampling does
    /// not run in lockstep with periodic timers.
    pub frequency_hz: u64,
    /// Also record off-CPU (blocked) time. Costs a stack walk at every
    /// context switch of the target, so it is opt-in.
    pub offcpu: bool,
    /// Blocks shorter than this are counted, but not by stack.
    pub offcpu_min_ns: u64,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self {
            frequency_hz: 99,
            offcpu: false,
            offcpu_min_ns: 1_000_000,
        }
    }
}

/// The wait probes' object whose statement maps the sampler shares
/// (`bpf/statement.bpf.h`), and where the target's THDs are. With it, a
/// sample of a connection thread is counted under its statement, whose
/// text lands in the same `stmt_text` the statements drain takes, and
/// its count in `stmt_cpu` (drained with the wait counters). Without it
/// (no probes attached, statements off), samples have no statement.
pub struct StatementShare<'a> {
    pub latency: &'a Object,
    pub thd: crate::bpf::abi::ThdLayout,
    /// Whether on-CPU stacks are keyed by statement too (each sample keeps
    /// its statement: the pprof label), or statements only counted. A key
    /// per (stack, statement run) fills the stack map sooner: fine for a
    /// bounded `record`, not for views that sample without end (`top`).
    pub key_stacks: bool,
}

/// The latency object's maps the sampler reuses: the per-thread
/// statement (so both number a statement alike and read its text once),
/// the texts and CPU counts the drain takes, and the threads' roles.
/// `stmt_scratch` and `stmt_lost` stay the sampler's own: a sample may
/// interrupt a uprobe's use of the scratch on its CPU, and a sample with
/// no statement is not a lost wait hit.
const SHARED_MAPS: [&str; 5] = [
    bpf::maps::STMT_NOW,
    bpf::maps::STMT_TEXT,
    bpf::maps::STMT_CPU,
    bpf::maps::THREAD_ROLE,
    bpf::maps::ROLE_RANGES,
];

/// Sampling and (optionally) switch tracing attached to one process.
pub struct CpuProfiler {
    obj: Object,
    opts: CpuOptions,
    sampler: sampler::Sampler,
    switches: Option<offcpu::Switches>,
    started: Instant,
    exe_module: Option<String>,
    unwind: UnwindInfo,
    /// Keeps the kernel's run statistics on (None: refused), so the
    /// programs' own cost is measured, not only modelled.
    run_stats_fd: Option<std::os::fd::OwnedFd>,
    /// Samples carry their statement (see [`StatementShare`]).
    statements: bool,
}

/// The profiler's programs' kernel-measured runs so far (None where run
/// statistics are off).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuProgramRuns {
    pub sample: Option<ProgramRuns>,
    /// None also without switch tracing.
    pub switch: Option<ProgramRuns>,
}

impl CpuProfiler {
    /// Builds the unwind rows of the target's mapped files, then starts.
    pub fn start(pid: u32, opts: &CpuOptions) -> Result<Self, CpuError> {
        let maps = ProcessMaps::read(pid).map_err(|source| CpuError::Maps { pid, source })?;
        Self::start_with(pid, opts, &UnwindTable::for_process(&maps))
    }

    /// As [`Self::start`], samples of connections counted per statement
    /// in `share`'s maps.
    pub fn start_sharing(
        pid: u32,
        opts: &CpuOptions,
        share: Option<StatementShare<'_>>,
    ) -> Result<Self, CpuError> {
        let maps = ProcessMaps::read(pid).map_err(|source| CpuError::Maps { pid, source })?;
        Self::start_shared(pid, opts, &UnwindTable::for_process(&maps), share)
    }

    /// Starts with unwind rows already built (`top` reuses them).
    pub fn start_with(pid: u32, opts: &CpuOptions, unwind: &UnwindTable) -> Result<Self, CpuError> {
        Self::start_shared(pid, opts, unwind, None)
    }

    fn start_shared(
        pid: u32,
        opts: &CpuOptions,
        unwind: &UnwindTable,
        share: Option<StatementShare<'_>>,
    ) -> Result<Self, CpuError> {
        if !(1..=10_000).contains(&opts.frequency_hz) {
            return Err(CpuError::Frequency(opts.frequency_hz));
        }
        let statements = share.as_ref().is_some_and(|s| s.thd.how != 0);
        let index = UnwindIndex::build(&unwind.rows);
        let mut obj = load_object(pid, opts, unwind.rows.len(), &index, share)?;
        // Before any program is attached: every run is then measured, so
        // the sampler's runs equal the ticks it counted.
        let run_stats = crate::bpf::run_stats::enable();
        load_rows(&obj, &unwind.rows, &index)?;
        // Off-CPU first: if the tracepoint is refused, no perf event was
        // opened for nothing.
        let switches = if opts.offcpu {
            Some(offcpu::Switches::attach(&mut obj)?)
        } else {
            None
        };
        let sampler = sampler::Sampler::attach(&mut obj, opts.frequency_hz)?;
        Ok(Self {
            obj,
            opts: opts.clone(),
            sampler,
            switches,
            started: Instant::now(),
            exe_module: exe_module(pid),
            unwind: UnwindInfo {
                rows: unwind.rows.len(),
                files: unwind.modules.clone(),
            },
            run_stats_fd: run_stats,
            statements,
        })
    }

    /// Whether samples are counted per statement (the wait probes' maps
    /// shared, statements on).
    pub fn statements(&self) -> bool {
        self.statements
    }

    /// The programs' runs so far, as the kernel counts them.
    fn program_runs(&self) -> CpuProgramRuns {
        let runs = |name| {
            self.run_stats_fd.as_ref()?;
            let prog = self.obj.progs().find(|p| p.name() == name)?;
            crate::bpf::run_stats::of_program(prog.as_fd().as_raw_fd())
        };
        CpuProgramRuns {
            sample: runs(PROG_SAMPLE),
            switch: self.switches.as_ref().and_then(|_| runs(PROG_SWITCH)),
        }
    }

    /// Perf events and tracepoint links held.
    pub fn attached_links(&self) -> usize {
        self.sampler.links() + usize::from(self.switches.is_some())
    }

    pub fn options(&self) -> &CpuOptions {
        &self.opts
    }

    /// Stops sampling and switch tracing, then reads every map.
    pub fn stop(mut self) -> Result<RawCpuProfile, CpuError> {
        if let Some(s) = self.switches.as_mut() {
            s.detach();
        }
        self.sampler.detach();
        self.snapshot()
    }

    /// Reads the totals so far, still sampling (`top` shows differences
    /// of successive snapshots, see [`RawCpuProfile::since`]).
    pub fn snapshot(&self) -> Result<RawCpuProfile, CpuError> {
        let duration_s = self.started.elapsed().as_secs_f64();
        let now = offcpu::monotonic_ns();
        let obj = &self.obj;
        let counters = read_counters(obj)?;
        let oncpu = read_hash::<CpuStack, u64>(obj, bpf::maps::ONCPU_COUNTS)?;
        let (offcpu, still_blocked) = if self.switches.is_some() {
            (
                read_hash::<CpuStack, OffCpuVal>(obj, bpf::maps::OFFCPU_COUNTS)?,
                offcpu::still_blocked(obj, now, self.opts.offcpu_min_ns)?,
            )
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(RawCpuProfile {
            opts: self.opts.clone(),
            cpus: self.sampler.cpus.len(),
            duration_s,
            counters,
            oncpu,
            offcpu,
            still_blocked,
            exe_module: self.exe_module.clone(),
            unwind: self.unwind.clone(),
            programs: self.program_runs(),
            statements: self.statements,
            statement_names: Default::default(),
        })
    }
}

/// Everything the maps held, as addresses.
#[derive(Debug, Clone)]
pub struct RawCpuProfile {
    pub opts: CpuOptions,
    pub cpus: usize,
    pub duration_s: f64,
    pub counters: [u64; COUNTERS],
    pub oncpu: Vec<(CpuStack, u64)>,
    pub offcpu: Vec<(CpuStack, OffCpuVal)>,
    /// Threads blocked at the stop, with the time blocked so far.
    pub still_blocked: Vec<(CpuStack, u64)>,
    /// File name of the target's executable, as frames name their module.
    pub exe_module: Option<String>,
    pub unwind: UnwindInfo,
    pub programs: CpuProgramRuns,
    /// Whether on-CPU stacks carry their statement (`CpuStack::query_id`).
    pub statements: bool,
    /// Per query id: its statement's fingerprint, the stacks' `statement`
    /// label (the recorder fills it from the statements it drained).
    pub statement_names: std::collections::HashMap<u64, String>,
}

impl RawCpuProfile {
    /// Every sampled stack's user part, innermost first: what
    /// [`crate::symbolize::StackSymbolizer::name_user_stacks`] names up
    /// front (each with its first address exact, as the samples take it).
    pub fn user_stacks(&self) -> Vec<Vec<u64>> {
        let on = self.oncpu.iter().map(|(s, _)| s);
        let off = self.offcpu.iter().map(|(s, _)| s);
        let still = self.still_blocked.iter().map(|(s, _)| s);
        on.chain(off).chain(still).map(CpuStack::user_ips).collect()
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.counters[c as usize]
    }

    /// What happened after `earlier`, a snapshot of the same profiler.
    /// Threads still blocked are charged in full (they are not a total).
    pub fn since(&self, earlier: &RawCpuProfile) -> RawCpuProfile {
        use std::collections::HashMap;
        let before_on: HashMap<&CpuStack, u64> =
            earlier.oncpu.iter().map(|(k, v)| (k, *v)).collect();
        let before_off: HashMap<&CpuStack, OffCpuVal> =
            earlier.offcpu.iter().map(|(k, v)| (k, *v)).collect();
        let mut counters = self.counters;
        for (c, e) in counters.iter_mut().zip(earlier.counters) {
            *c = c.saturating_sub(e);
        }
        RawCpuProfile {
            opts: self.opts.clone(),
            cpus: self.cpus,
            duration_s: (self.duration_s - earlier.duration_s).max(0.0),
            counters,
            oncpu: self
                .oncpu
                .iter()
                .map(|(k, v)| (*k, v - before_on.get(k).copied().unwrap_or(0)))
                .filter(|(_, v)| *v > 0)
                .collect(),
            offcpu: self
                .offcpu
                .iter()
                .map(|(k, v)| {
                    let b = before_off.get(k).copied().unwrap_or_default();
                    (
                        *k,
                        OffCpuVal {
                            count: v.count - b.count,
                            total_ns: v.total_ns - b.total_ns,
                        },
                    )
                })
                .filter(|(_, v)| v.count > 0)
                .collect(),
            still_blocked: self.still_blocked.clone(),
            exe_module: self.exe_module.clone(),
            unwind: self.unwind.clone(),
            programs: CpuProgramRuns {
                sample: since(self.programs.sample, earlier.programs.sample),
                switch: since(self.programs.switch, earlier.programs.switch),
            },
            statements: self.statements,
            statement_names: self.statement_names.clone(),
        }
    }
}

fn since(now: Option<ProgramRuns>, earlier: Option<ProgramRuns>) -> Option<ProgramRuns> {
    Some(now?.since(earlier?))
}

/// The executable's file name (`mysqld`), as frames name their module.
fn exe_module(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy();
    Some(name.trim_end_matches(" (deleted)").to_string())
}

/// Copies the rows into the `unwind_rows` array and the index over them
/// into `unwind_buckets` and `unwind_regions`, each sized at load.
fn load_rows(obj: &Object, rows: &[UnwindRow], index: &UnwindIndex) -> Result<(), CpuError> {
    load_array(obj, bpf::maps::UNWIND_ROWS, rows)?;
    load_array(obj, bpf::maps::UNWIND_BUCKETS, &index.buckets)?;
    let regions = map(obj, bpf::maps::UNWIND_REGIONS)?;
    for (i, region) in index.regions.iter().enumerate() {
        regions
            .update(
                &(i as u32).to_ne_bytes(),
                bytemuck::bytes_of(region),
                MapFlags::ANY,
            )
            .map_err(CpuError::Unwind)?;
    }
    Ok(())
}

/// Writes `values` at indexes 0.. of the array `name`: through an mmap of
/// it (one memcpy), else in batches (`BPF_MAP_UPDATE_BATCH`, Linux >= 5.6:
/// ~40 ms of kernel CPU for mysqld's ~175,000 rows), else one per call
/// (~0.1 s).
fn load_array<T: bytemuck::Pod>(
    obj: &Object,
    name: &'static str,
    values: &[T],
) -> Result<(), CpuError> {
    let map = map(obj, name)?;
    let fd = map.as_fd().as_raw_fd();
    if write_mapped(fd, values).is_ok() || update_batch(fd, values).is_ok() {
        return Ok(());
    }
    for (i, v) in values.iter().enumerate() {
        map.update(
            &(i as u32).to_ne_bytes(),
            bytemuck::bytes_of(v),
            MapFlags::ANY,
        )
        .map_err(CpuError::Unwind)?;
    }
    Ok(())
}

/// Opens the object, writes its configuration (the target, the off-CPU
/// threshold, the unwind rows' count) and sizes the unwind array, then
/// loads it: the switch program only for off-CPU (it alone needs the
/// kernel's BTF, and libbpf reads that only for a program that does).
fn load_object(
    pid: u32,
    opts: &CpuOptions,
    rows: usize,
    index: &UnwindIndex,
    share: Option<StatementShare<'_>>,
) -> Result<Object, CpuError> {
    let rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let regions = index.regions.len() as u32;
    // The frame cache's slots for every CPU a program may run on: with
    // fewer, two CPUs would write one slot at once.
    let cache_cpus = crate::bpf::percpu::possible_cpus().map_err(CpuError::Open)? as u32;
    // Statements only with the wait probes' maps to share: `thd` stays
    // off otherwise, and the sampler's own statement maps stay unused.
    let share = share.filter(|s| s.thd.how != 0);
    let mut builder = ObjectBuilder::default();
    let mut open = builder.open_memory(CPU_OBJ).map_err(CpuError::Open)?;
    for mut m in open.maps_mut() {
        let name = m.name().to_string_lossy().into_owned();
        if name.ends_with(".rodata") {
            let data = m.initial_value_mut().ok_or(CpuError::Map(".rodata"))?;
            for (global, value) in [
                (bpf::globals::TARGET_TGID, &pid.to_ne_bytes()[..]),
                (
                    bpf::globals::MIN_BLOCK_NS,
                    &opts.offcpu_min_ns.to_ne_bytes()[..],
                ),
                (bpf::globals::UNWIND_ROWS_LEN, &rows.to_ne_bytes()[..]),
                (
                    bpf::globals::UNWIND_STEPS,
                    &search_steps(rows).to_ne_bytes()[..],
                ),
                (bpf::globals::UNWIND_REGIONS_LEN, &regions.to_ne_bytes()[..]),
                (
                    bpf::globals::UNWIND_REGION_STEPS,
                    &index.region_steps.to_ne_bytes()[..],
                ),
                (bpf::globals::UNWIND_SHIFT, &index.shift.to_ne_bytes()[..]),
                (
                    bpf::globals::FRAME_CACHE_CPUS,
                    &cache_cpus.to_ne_bytes()[..],
                ),
                (
                    bpf::globals::UNWIND_BUCKET_STEPS,
                    &index.bucket_steps.to_ne_bytes()[..],
                ),
            ] {
                crate::bpf::abi::write_rodata(CPU_OBJ, data, global, value)
                    .ok_or(CpuError::Global(global))?;
            }
            if let Some(share) = &share {
                let role = crate::plan::thread_role::connection_role_id().to_ne_bytes();
                for (global, value) in [
                    (bpf::globals::THD, bytemuck::bytes_of(&share.thd)),
                    (bpf::globals::CONNECTION_ROLE, &role[..]),
                    (bpf::globals::STMT_IN_KEY, &[u8::from(share.key_stacks)][..]),
                ] {
                    crate::bpf::abi::write_rodata(CPU_OBJ, data, global, value)
                        .ok_or(CpuError::Global(global))?;
                }
            }
        } else if let Some(&shared) = SHARED_MAPS.iter().find(|&&n| n == name) {
            if let Some(share) = &share {
                let theirs = map(share.latency, shared)?;
                m.reuse_fd(theirs.as_fd()).map_err(CpuError::Open)?;
            } else if shared != bpf::maps::STMT_NOW {
                // Unused: the smallest map the kernel makes (task storage
                // has no size).
                m.set_max_entries(1).map_err(CpuError::Open)?;
            }
        } else if name == bpf::maps::FRAME_CACHE {
            m.set_max_entries(cache_cpus * abi::FRAME_CACHE_SLOTS)
                .map_err(CpuError::Open)?;
        } else if name == bpf::maps::UNWIND_ROWS {
            m.set_max_entries(rows.max(1)).map_err(CpuError::Open)?;
        } else if name == bpf::maps::UNWIND_BUCKETS {
            let buckets = u32::try_from(index.buckets.len()).unwrap_or(u32::MAX);
            m.set_max_entries(buckets.max(1)).map_err(CpuError::Open)?;
        } else if !opts.offcpu
            && (name == bpf::maps::OFFCPU_COUNTS || name == bpf::maps::OFFCPU_START)
        {
            // Unused without the switch program; a hash map's buckets are
            // allocated and set up at creation (~0.5 ms for 65,536).
            m.set_max_entries(1).map_err(CpuError::Open)?;
        }
    }
    for mut prog in open.progs_mut() {
        if prog.name() == abi::PROG_SWITCH && !opts.offcpu {
            prog.set_autoload(false);
        }
    }
    open.load().map_err(CpuError::Load)
}

/// Writes `rows` at indexes 0.. of a `BPF_F_MMAPABLE` array map of at
/// least `rows.len()` entries, through a shared mapping of it. An
/// mmapable array lays its elements out every round_up(value_size, 8)
/// bytes: exactly a `[T]` where T's size is a multiple of 8 (else the
/// batch update does it).
fn write_mapped<T: bytemuck::Pod>(map_fd: i32, rows: &[T]) -> std::io::Result<()> {
    if !std::mem::size_of::<T>().is_multiple_of(8) {
        return Err(std::io::Error::other("element size not a multiple of 8"));
    }
    if rows.is_empty() {
        return Ok(());
    }
    let bytes = std::mem::size_of_val(rows);
    // SAFETY: a fresh shared mapping of the map's own memory (the kernel
    // refuses it unless the map is mmapable and at least this large);
    // nothing else in this process refers to it.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map_fd,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `at` is `bytes` long and writable; `rows` is `bytes` of
    // #[repr(C)] rows; the mapping is ours alone and unmapped right after.
    unsafe {
        std::ptr::copy_nonoverlapping(rows.as_ptr().cast::<u8>(), at.cast::<u8>(), bytes);
        libc::munmap(at, bytes);
    }
    Ok(())
}

/// Rows per `BPF_MAP_UPDATE_BATCH` call (the kernel copies each one in).
const BATCH_ROWS: usize = 16_384;

/// Writes `rows` at indexes 0.. of an array map with BPF_MAP_UPDATE_BATCH.
fn update_batch<T: bytemuck::Pod>(map_fd: i32, rows: &[T]) -> std::io::Result<()> {
    /// `union bpf_attr`'s `batch` member.
    #[repr(C)]
    #[derive(Default)]
    struct BatchAttr {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
    for (n, chunk) in rows.chunks(BATCH_ROWS).enumerate() {
        let first = (n * BATCH_ROWS) as u32;
        let keys: Vec<u32> = (first..first + chunk.len() as u32).collect();
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            values: chunk.as_ptr() as u64,
            count: chunk.len() as u32,
            map_fd: map_fd as u32,
            ..Default::default()
        };
        // SAFETY: keys and values hold `count` u32 keys and `count`
        // #[repr(C)] rows of the map's value size, alive across the call;
        // the kernel writes back only `count`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_UPDATE_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if attr.count as usize != chunk.len() {
            return Err(std::io::Error::other("partial batch update"));
        }
    }
    Ok(())
}

fn read_counters(obj: &Object) -> Result<[u64; COUNTERS], CpuError> {
    let name = bpf::maps::CPU_COUNTERS;
    let map = map(obj, name)?;
    let mut out = [0u64; COUNTERS];
    for (i, slot) in out.iter_mut().enumerate() {
        let per_cpu = map
            .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(crate::collect::read_err(name))?
            .unwrap_or_default();
        for v in per_cpu {
            *slot += from_bytes::<u64>(&v).ok_or(CollectError::Layout(name))?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::StackSymbolizer;

    /// The sampler's cost is the kernel's measure of every run: statistics
    /// go on before it attaches, so its runs are exactly the ticks it
    /// counted, and a delta of two snapshots is the runs between them.
    #[test]
    fn the_samplers_runs_are_its_ticks_and_their_time_is_measured() {
        let opts = CpuOptions {
            frequency_hz: 997,
            ..CpuOptions::default()
        };
        let profiler =
            CpuProfiler::start_with(std::process::id(), &opts, &UnwindTable::default()).unwrap();
        let spin = |ms: u64| {
            let until = Instant::now() + std::time::Duration::from_millis(ms);
            let mut x = 0u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        };
        spin(200);
        let read = Instant::now();
        let first = profiler.snapshot().unwrap();
        let read_s = read.elapsed().as_secs_f64();
        spin(200);
        let raw = profiler.stop().unwrap();
        let runs = raw.programs.sample.expect("run statistics on (root)");
        assert_eq!(runs.runs, raw.counter(Counter::Ticks), "{runs:?}");
        assert!(raw.counter(Counter::Samples) > 0, "this process ran");
        // Time was measured, and each run is at least a nanosecond and at
        // most a millisecond (a frame-pointer walk of a test thread).
        assert!(
            runs.run_ns >= runs.runs && runs.run_ns < runs.runs * 1_000_000,
            "{runs:?}"
        );
        assert_eq!(raw.programs.switch, None, "no switch tracing asked");
        let later = raw.since(&first);
        let between = later.programs.sample.unwrap();
        assert!(between.runs > 0 && between.runs < runs.runs, "{between:?}");
        // A live snapshot reads the counters, then the stacks, then the
        // statistics: the ticks in between skew it, and there are at most
        // the sampler's frequency on each CPU over the time the read took
        // (the test binary's other threads run meanwhile, and on a loaded
        // machine the read itself can be preempted), plus one in flight
        // per CPU at each end.
        let skew = between.runs.abs_diff(later.counter(Counter::Ticks));
        let cpus = raw.cpus as f64;
        let bound = (read_s * opts.frequency_hz as f64 * cpus).ceil() as u64 + 2 * raw.cpus as u64;
        assert!(
            skew <= bound,
            "{between:?} skew {skew} > {bound} (read {read_s:.4} s)"
        );
        let summary = later
            .symbolize(&mut StackSymbolizer::new(ProcessMaps::default()))
            .summary;
        let cost = summary.oncpu.program.unwrap();
        let pct = between.run_ns as f64 / 1e9 / later.duration_s * 100.0;
        assert!((cost.pct_of_core - pct).abs() < 1e-9, "{cost:?}");
        assert_eq!(summary.program_pct_of_core(), Some(cost.pct_of_core));
    }

    /// Rows written in batches (more than one) read back at their index.
    #[test]
    fn unwind_rows_load_in_batches() {
        let n = BATCH_ROWS * 2 + 7;
        let rows: Vec<UnwindRow> = (0..n as u64)
            .map(|i| UnwindRow {
                addr: 0x1000 + i * 16,
                cfa_off: i as i32,
                rbp_off: (i % 100) as i16,
                cfa_reg: (i % 3) as u8,
                kind: (i % 5) as u8,
            })
            .collect();
        let index = UnwindIndex::build(&rows);
        let obj = load_object(std::process::id(), &CpuOptions::default(), n, &index, None).unwrap();
        let map = map(&obj, bpf::maps::UNWIND_ROWS).unwrap();
        update_batch(map.as_fd().as_raw_fd(), &rows).expect("batch update");
        for i in [0, 1, BATCH_ROWS - 1, BATCH_ROWS, BATCH_ROWS + 1, n - 1] {
            let v = map
                .lookup(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .unwrap();
            assert_eq!(
                bytemuck::pod_read_unaligned::<UnwindRow>(&v),
                rows[i],
                "row {i}"
            );
        }
    }
}

//! CFI unwind rows for the BPF stack walker.
//!
//! Frame pointers are not enough to walk the target's stacks: Debian's
//! libc and libstdc++, and much of mysqld, are built without them, and a
//! libc function that uses rbp as a plain register (the futex and
//! condition-variable waits do) cuts the chain at the leaf. So every
//! mapped file's `.eh_frame` (which the C++ runtime needs for exceptions
//! and therefore ships even in stripped binaries) is turned into rows: from
//! an address on, where the canonical frame address is (rsp or rbp plus an
//! offset), and where the caller's rbp was saved. The BPF walker
//! (bpf/cpu.bpf.c) binary-searches them; where no row covers an address it
//! falls back to the frame pointer.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};
use serde::{Deserialize, Serialize};

use crate::resolve::mapped::Mapped;
use crate::resolve::section::{inside_loaded_segment, section_bytes, SectionError};
use crate::symbolize::ProcessMaps;

use super::abi::{
    UnwindRow, UNWIND_CFA, UNWIND_END, UNWIND_FP, UNWIND_PLT, UNWIND_RBP_SAME, UNWIND_RBP_UNDEF,
    UNWIND_REG_RBP, UNWIND_REG_RSP, UNWIND_STOP,
};
use super::unwind_cache::{FileUnwind, UnwindCache};

/// The walker's binary search does 24 steps.
pub const MAX_ROWS: usize = 1 << 24;

/// The largest `.eh_frame` read (MariaDB 11's is 1.2 MiB): a header
/// claiming more is the file's word against its own size, not a table.
pub const MAX_EH_FRAME: u64 = 64 << 20;

/// Rows of every file the target maps, sorted by absolute address.
#[derive(Debug, Clone, Default)]
pub struct UnwindTable {
    pub rows: Vec<UnwindRow>,
    pub modules: Vec<ModuleUnwind>,
}

/// The rows the walker had, by file (summary.json `cpu.unwind`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnwindInfo {
    pub rows: usize,
    pub files: Vec<ModuleUnwind>,
}

/// What one mapped file contributed.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModuleUnwind {
    pub path: String,
    pub rows: usize,
    /// Why the file has no rows (its frames fall back to frame pointers).
    pub error: Option<String>,
}

impl UnwindTable {
    /// Builds the rows for every executable file mapping of a process,
    /// reusing rows kept earlier ([`UnwindCache`]).
    pub fn for_process(maps: &ProcessMaps) -> Self {
        Self::for_process_with(maps, &UnwindCache::default())
    }

    /// [`Self::for_process`] with the rows kept in `cache`.
    pub fn for_process_with(maps: &ProcessMaps, cache: &UnwindCache) -> Self {
        // One load bias per file: the first executable mapping decides.
        let mut files: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (start, _end, offset, path) in maps.executable_regions() {
            files.entry(path).or_insert((start, offset));
        }
        let mut modules = Vec::new();
        // (first placed address, bias, the file's rows at bias 0)
        let mut placed: Vec<(u64, u64, FileUnwind)> = Vec::new();
        for (path, (start, offset)) in files {
            let found = maps
                .opened(path)
                .map_err(str::to_string)
                .and_then(|f| module_rows(&f.fd_path(), start, offset, cache));
            match found {
                Ok((bias, unwind)) => {
                    modules.push(ModuleUnwind {
                        path: path.to_string(),
                        rows: unwind.rows.len(),
                        error: None,
                    });
                    let first = unwind.rows.first().map_or(0, |r| r.addr.wrapping_add(bias));
                    placed.push((first, bias, unwind));
                }
                Err(e) => modules.push(ModuleUnwind {
                    path: path.to_string(),
                    rows: 0,
                    error: Some(e),
                }),
            }
        }
        // Each file's rows are sorted and files do not overlap, so files in
        // address order give sorted rows in one copy (175,000 rows for
        // MariaDB: placing, appending and sorting them were ~4 copies).
        placed.sort_unstable_by_key(|&(first, ..)| first);
        let mut rows = Vec::with_capacity(placed.iter().map(|(.., u)| u.rows.len()).sum());
        for (_, bias, unwind) in &placed {
            unwind.place_into(*bias, &mut rows);
        }
        drop(placed);
        if !rows.is_sorted_by_key(|r| r.addr) {
            rows.sort_by_key(|r| r.addr);
        }
        // Modules do not overlap, so equal addresses only come from one
        // file, where module_rows already resolved them.
        rows.dedup_by(|later, earlier| same_rule(later, earlier));
        rows.truncate(MAX_ROWS);
        Self { rows, modules }
    }
}

fn same_rule(a: &UnwindRow, b: &UnwindRow) -> bool {
    (a.cfa_off, a.rbp_off, a.cfa_reg, a.kind) == (b.cfa_off, b.rbp_off, b.cfa_reg, b.kind)
}

/// Rows of one file, with the bias that places them where one of its
/// executable mappings starts (mapping that file offset).
fn module_rows(
    path: &Path,
    map_start: u64,
    map_offset: u64,
    cache: &UnwindCache,
) -> Result<(u64, FileUnwind), String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let unwind = match cache.load(&file) {
        Some(kept) => kept,
        None => {
            let built = file_rows(&file)?;
            // Not kept: the next recording builds them again.
            let _ = cache.store(&file, &built);
            built
        }
    };
    let bias = unwind
        .bias(map_start, map_offset)
        .ok_or("no executable segment holds the mapped offset")?;
    Ok((bias, unwind))
}

/// Rows of one file at its link-time addresses, with its executable
/// segments (to place them where a process maps it). The file is mapped,
/// not read: `.eh_frame` is parsed in place, and only once its header is
/// believed ([`usable_eh_frame`]).
fn file_rows(file: &File) -> Result<FileUnwind, String> {
    let map = Mapped::of(file).map_err(|e| e.to_string())?;
    let elf = object::File::parse(map.bytes()).map_err(|e| e.to_string())?;
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 1 != 0))
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();

    let data = usable_eh_frame(&elf, map.bytes()).map_err(|e| match e {
        SectionError::Missing { .. } => e.to_string(),
        _ => format!("no usable .eh_frame: {e}"),
    })?;
    let section = elf
        .section_by_name(".eh_frame")
        .ok_or("no .eh_frame section")?;
    let mut eh_frame = EhFrame::new(data, LittleEndian);
    eh_frame.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = elf.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = elf.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }

    // Address → row; a real row wins over the end-of-FDE marker of the
    // function before it, and of two real rows the later FDE's. Collected
    // and sorted once: a BTreeMap insert per row was ~60 ms for mysqld.
    let mut found: Vec<(u64, bool, std::cmp::Reverse<usize>, UnwindRow)> = Vec::new();
    let mut ctx = UnwindContext::new();
    let mut entries = eh_frame.entries(&bases);
    while let Some(entry) = entries.next().map_err(|e| e.to_string())? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        let Ok(mut table) = fde.rows(&eh_frame, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            let addr = row.start_address();
            let seq = std::cmp::Reverse(found.len());
            found.push((addr, false, seq, convert(row, addr, &eh_frame)));
        }
        let end = fde.end_address();
        let seq = std::cmp::Reverse(found.len());
        found.push((
            end,
            true,
            seq,
            UnwindRow {
                addr: end,
                cfa_off: 0,
                rbp_off: UNWIND_RBP_SAME,
                cfa_reg: UNWIND_REG_RSP,
                kind: UNWIND_FP,
            },
        ));
    }
    found.sort_unstable_by_key(|&(addr, marker, seq, _)| (addr, marker, seq));
    found.dedup_by_key(|&mut (addr, ..)| addr);
    let mut rows: Vec<UnwindRow> = found.into_iter().map(|(.., row)| row).collect();
    rows.dedup_by(|later, earlier| same_rule(later, earlier));
    Ok(FileUnwind { segments, rows })
}

/// The file's `.eh_frame`, where its header can be believed: inside the
/// file, at most [`MAX_EH_FRAME`] bytes, uncompressed, and inside a
/// loadable segment (what the runtime itself unwinds from).
fn usable_eh_frame<'d>(elf: &object::File<'d>, data: &'d [u8]) -> Result<&'d [u8], SectionError> {
    let bytes = section_bytes(elf, data, ".eh_frame", MAX_EH_FRAME)?;
    inside_loaded_segment(elf, ".eh_frame")?;
    Ok(bytes)
}

fn convert<R: gimli::Reader>(
    row: &gimli::UnwindTableRow<R::Offset>,
    addr: u64,
    eh_frame: &EhFrame<R>,
) -> UnwindRow {
    let stop = UnwindRow {
        addr,
        cfa_off: 0,
        rbp_off: UNWIND_RBP_SAME,
        cfa_reg: UNWIND_REG_RSP,
        kind: UNWIND_STOP,
    };
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        // The outermost frame (thread start, _start) has no caller.
        Some(RegisterRule::Undefined) => {
            return UnwindRow {
                kind: UNWIND_END,
                ..stop
            }
        }
        _ => return stop,
    }
    let (cfa_reg, cfa_off) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let reg = match *register {
                X86_64::RSP => UNWIND_REG_RSP,
                X86_64::RBP => UNWIND_REG_RBP,
                _ => return stop,
            };
            match i32::try_from(*offset) {
                Ok(off) => (reg, off),
                Err(_) => return stop,
            }
        }
        CfaRule::Expression(expr) => {
            return match expr
                .get(eh_frame)
                .ok()
                .and_then(|e| plt_threshold(e.0.to_slice().ok()?.as_ref()))
            {
                Some(threshold) => UnwindRow {
                    cfa_off: 8,
                    cfa_reg: threshold,
                    kind: UNWIND_PLT,
                    ..stop
                },
                // Signal trampolines and hand-written rules: a walk stops.
                None => stop,
            };
        }
    };
    let rbp_off = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) => UNWIND_RBP_SAME,
        Some(RegisterRule::Undefined) => UNWIND_RBP_UNDEF,
        Some(RegisterRule::Offset(off)) => match i16::try_from(off) {
            Ok(o) if o != UNWIND_RBP_SAME && o != UNWIND_RBP_UNDEF => o,
            _ => return stop,
        },
        Some(_) => return stop,
    };
    UnwindRow {
        addr,
        cfa_off,
        rbp_off,
        cfa_reg,
        kind: UNWIND_CFA,
    }
}

/// The rule binutils writes for every lazy-binding PLT entry: CFA is
/// rsp plus 8, plus 8 more once (rip & 15) >= N, i.e. a sample inside the
/// entry after its `push` has one more word on the stack. Returns N; any
/// other expression is None.
fn plt_threshold(expr: &[u8]) -> Option<u8> {
    use gimli::constants::*;
    let [b7, 8, b16, 0, l15, and, lit, ge, l3, shl, plus] = *expr else {
        return None;
    };
    let is = |byte: u8, op: DwOp| byte == op.0;
    let ok = is(b7, DW_OP_breg7)
        && is(b16, DW_OP_breg16)
        && is(l15, DW_OP_lit15)
        && is(and, DW_OP_and)
        && (DW_OP_lit0.0..=DW_OP_lit15.0).contains(&lit)
        && is(ge, DW_OP_ge)
        && is(l3, DW_OP_lit3)
        && is(shl, DW_OP_shl)
        && is(plus, DW_OP_plus);
    ok.then(|| lit - DW_OP_lit0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PLT rule is recognised byte for byte, with its threshold; any
    /// other expression (one byte changed) is not.
    #[test]
    fn plt_expression() {
        // DW_OP_breg7 8; breg16 0; lit15; and; lit11; ge; lit3; shl; plus
        let plt = [0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(plt_threshold(&plt), Some(11));
        let mut other = plt;
        other[8] = 0x34; // lit4: not the PLT's shift
        assert_eq!(plt_threshold(&other), None);
        assert_eq!(plt_threshold(&plt[..10]), None);
    }

    /// libstdc++ (the servers link it) binds lazily through a PLT whose CFI
    /// is an expression: its entries become PLT rows, threshold 11, not
    /// stops. A sample on an entry's `push` once ended a walk in CI.
    #[test]
    fn libstdcxx_plt_rows() {
        let path = Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
        let unwind = file_rows(&File::open(path).unwrap()).unwrap();
        let plt: Vec<_> = unwind
            .rows
            .iter()
            .filter(|r| r.kind == UNWIND_PLT)
            .collect();
        assert!(!plt.is_empty(), "no PLT row in {path:?}");
        assert!(
            plt.iter().all(|r| (r.cfa_off, r.cfa_reg) == (8, 11)),
            "{plt:?}"
        );
    }

    /// This test binary's own CFI: rows exist, are sorted, and the row
    /// covering a function's first instruction says the return address is
    /// right above the stack pointer (CFA = rsp + 8), as on every x86-64
    /// function entry.
    #[test]
    fn rows_of_this_process() {
        #[inline(never)]
        #[no_mangle]
        extern "C" fn innoprof_unwind_probe_target() -> u64 {
            std::hint::black_box(11)
        }
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let table = UnwindTable::for_process(&maps);
        assert!(table.rows.len() > 1000, "{:?}", table.modules);
        assert!(table.rows.windows(2).all(|w| w[0].addr < w[1].addr));
        let ip = innoprof_unwind_probe_target as *const () as u64;
        let idx = table.rows.partition_point(|r| r.addr <= ip) - 1;
        let row = table.rows[idx];
        assert_eq!(
            (row.kind, row.cfa_reg, row.cfa_off, row.rbp_off),
            (UNWIND_CFA, UNWIND_REG_RSP, 8, UNWIND_RBP_SAME),
            "{row:?}"
        );
        let libc = table
            .modules
            .iter()
            .find(|m| m.path.contains("libc.so"))
            .expect("libc mapped");
        assert!(libc.rows > 1000 && libc.error.is_none(), "{libc:?}");
    }

    /// Rows kept from an earlier build of the same files are the rows
    /// built anew, placed where this process maps them.
    #[test]
    fn kept_rows_are_the_rows_built_anew() {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let cache = UnwindCache::in_dir(d.path().join("run"));
        let built = UnwindTable::for_process_with(&maps, &cache);
        let kept = std::fs::read_dir(d.path().join("run")).unwrap().count();
        assert!(kept >= 2, "this test binary and libc at least: {kept}");
        let reused = UnwindTable::for_process_with(&maps, &cache);
        assert_eq!(reused.rows, built.rows);
        assert_eq!(
            format!("{:?}", reused.modules),
            format!("{:?}", built.modules)
        );
        // And without the cache at all.
        let none = UnwindCache::in_dir(d.path().join("absent/run"));
        assert_eq!(UnwindTable::for_process_with(&maps, &none).rows, built.rows);
    }
}

//! Where a connection thread's THD is, and what the probes read in it to
//! tie a hit to its connection and statement.
//!
//! A hit runs on the thread that made it, so the statement is the one the
//! thread's THD holds at that instant. Servers keep the THD in the thread:
//!
//! - a static TLS variable (`current_thd` in MySQL 8.0, `THR_THD` in
//!   MariaDB 10.4+): at a fixed offset from the thread pointer (x86-64
//!   TLS variant II: the executable's block ends at the thread pointer);
//! - a pthread key (`THR_THD` in MySQL 5.6 and MariaDB 10.2): glibc's
//!   `pthread_getspecific`, whose layout glibc itself publishes for
//!   debuggers (`_thread_db_pthread_specific`, ... in libc's `.dynsym`, as
//!   libthread_db reads them), so no offset of glibc's is assumed.
//!
//! The THD members (connection id, `query_id`, the query text) come from
//! DWARF, through the type of `do_command`'s parameter. Without DWARF, the
//! statements are not attributed, and the reason says so.

use object::read::elf::ProgramHeader as _;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use super::counter::{find_member, shape, CounterError, Shape};
use super::latch::{for_each_param_struct, LatchError};
use crate::bpf::abi::ThdLayout;
use crate::resolve::ElfImage;

#[derive(Debug, thiserror::Error)]
pub enum ThdError {
    #[error("the binary has no DWARF debug info: the THD's layout needs it")]
    NoDebugInfo,
    #[error("no DWARF, and no plugin accessor `{0}` to read the THD's layout from")]
    NoAccessor(&'static str),
    #[error("no `do_command(THD*)` in the symbol table")]
    NoDoCommand,
    #[error("`do_command`'s THD type has no DWARF members here")]
    NoThdType,
    #[error("THD has no {0} member in this build")]
    NoMember(&'static str),
    #[error("no `current_thd`/`THR_THD` in the symbol table: cannot find a thread's THD")]
    NoThdVariable,
    #[error("the executable has no TLS segment")]
    NoTls,
    #[error("the target maps no libc (needed to read the THD's pthread key)")]
    NoLibc,
    #[error("libc has no `{0}` descriptor (glibc's libthread_db layout)")]
    NoLibcDescriptor(&'static str),
    #[error("reading the target: {0}")]
    Target(String),
    #[error("the pthread key {0} is out of glibc's range")]
    BadKey(u32),
    #[error("reading DWARF")]
    Dwarf(#[source] gimli::Error),
    #[error("parsing an ELF file")]
    Object(#[from] object::Error),
}

impl From<LatchError> for ThdError {
    fn from(e: LatchError) -> Self {
        match e {
            LatchError::NoDebugInfo => Self::NoDebugInfo,
            LatchError::Dwarf(e) => Self::Dwarf(e),
            LatchError::Object(e) => Self::Object(e),
        }
    }
}

impl From<CounterError> for ThdError {
    fn from(e: CounterError) -> Self {
        match e {
            CounterError::Dwarf(e) => Self::Dwarf(e),
            CounterError::Object(e) => Self::Object(e),
            _ => Self::NoThdType,
        }
    }
}

/// The THD members a hit reads, as offsets from the THD's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Members {
    conn_off: u64,
    conn_size: u32,
    query_id_off: u64,
    query_off: u64,
    query_len_off: u64,
}

/// What the probes read to tie a connection's hit to its statement, for
/// the target `pid` running `image`; or why they cannot.
pub fn plan_thd(pid: u32, image: &ElfImage) -> Result<ThdLayout, ThdError> {
    // Without DWARF, the plugin API's accessors (exported by every server
    // for storage engines) say where the same members are.
    let members = match thd_members(image) {
        Err(ThdError::NoDebugInfo) => accessor_members(image)?,
        other => other?,
    };
    let mut layout = ThdLayout {
        conn_off: members.conn_off,
        conn_size: members.conn_size,
        query_id_off: members.query_id_off,
        query_off: members.query_off,
        query_len_off: members.query_len_off,
        ..ThdLayout::default()
    };
    let glibc = glibc_specific(pid)?;
    layout.pthread_tid_off = glibc.tid_off;
    match thd_variable(image)? {
        ThdVariable::Tls { offset } => {
            layout.how = 1;
            layout.tls_off = tls_offset(image.binary_data(), offset)?;
        }
        ThdVariable::FromThreadPointer { offset } => {
            layout.how = 1;
            layout.tls_off = offset;
        }
        ThdVariable::Key { address } => {
            let mut key = [0u8; 4];
            super::memcounters::TargetMemory::open(pid, image)
                .and_then(|m| m.read_linked(address, &mut key))
                .map_err(ThdError::Target)?;
            let key = u32::from_le_bytes(key);
            // glibc: keys below PTHREAD_KEYS_MAX, in blocks of
            // PTHREAD_KEY_2NDLEVEL_SIZE (the descriptor's element count).
            if key >= glibc.level2_len * glibc.level1_len {
                return Err(ThdError::BadKey(key));
            }
            layout.how = 2;
            layout.key_block_off = glibc.specific_off + u64::from(key / glibc.level2_len) * 8;
            layout.key_data_off =
                u64::from(key % glibc.level2_len) * glibc.key_data_size + glibc.key_data_data_off;
        }
    }
    Ok(layout)
}

/// One line for `innoprof probes` and the summary: how statements are read.
pub fn describe(layout: &ThdLayout) -> String {
    let at = match layout.how {
        1 => format!(
            "THD from TLS at fsbase{}{:#x}",
            if layout.tls_off < 0 { "-" } else { "+" },
            layout.tls_off.unsigned_abs()
        ),
        2 => format!(
            "THD from a pthread key (fsbase+{:#x} -> +{:#x})",
            layout.key_block_off, layout.key_data_off
        ),
        _ => return "off".into(),
    };
    let query_id = if layout.query_id_off == NO_QUERY_ID {
        "no query_id (statements told apart by their text changing: consecutive runs of one \
         text with no hit between count as one execution)"
            .to_string()
    } else {
        format!("query_id +{:#x}", layout.query_id_off)
    };
    format!(
        "{at}; connection id +{:#x} ({} bytes), {query_id}, query text +{:#x}/+{:#x}",
        layout.conn_off, layout.conn_size, layout.query_off, layout.query_len_off
    )
}

/// The THD members, from the type of `do_command`'s first parameter, or
/// of `this` in a THD method: a unit may hold only THD's declaration
/// (GCC writes the class whole where its key method is, sql_class.cc),
/// so the first place whose THD has the members wins.
fn thd_members(image: &ElfImage) -> Result<Members, ThdError> {
    if !image.has_debug_info {
        return Err(ThdError::NoDebugInfo);
    }
    let symbols = image.symbols();
    let do_command = symbols
        .iter()
        .find(|s| s.clone_suffix.is_none() && s.raw.starts_with("_Z10do_commandP3THD"))
        .ok_or(ThdError::NoDoCommand)?;
    let addresses: Vec<u64> = std::iter::once(do_command.address)
        .chain(
            symbols
                .iter()
                .filter(|s| s.clone_suffix.is_none() && s.raw.starts_with("_ZN3THD"))
                .map(|s| s.address)
                .take(MAX_THD_METHODS),
        )
        .collect();
    let mut found: Option<Result<Members, ThdError>> = None;
    for_each_param_struct(image, &addresses, 1, |dwarf, unit, _, thd| {
        let members = members_in(dwarf, unit, thd);
        let done = members.is_ok();
        if done || found.is_none() {
            found = Some(members);
        }
        Ok(!done)
    })?;
    found.unwrap_or(Err(ThdError::NoThdType))
}

/// The THD members from the code of the plugin API's accessors, for a
/// binary without DWARF (MySQL 8.0's release tarballs): each is a load
/// from the THD (`rdi`) into the return registers. `thd_get_thread_id`
/// gives the connection id; `thd_query_unsafe` (a `LEX_CSTRING` in
/// rax:rdx) or `thd_query_string` (a pointer to the `LEX_STRING {str,
/// length}`) the query text; `thd_get_query_id` or `thd_query_id` (MariaDB,
/// Debian's stripped 10.11 among them) the query id.
/// Where no accessor gives the query id, statements are told apart by
/// their text changing ([`NO_QUERY_ID`]).
fn accessor_members(image: &ElfImage) -> Result<Members, ThdError> {
    use iced_x86::Register::{EAX, RAX, RDX};
    let loads = |names: &[&str]| -> Option<Vec<Load>> {
        let symbols = image.symbols();
        let sym = symbols
            .iter()
            .find(|s| s.clone_suffix.is_none() && names.contains(&s.raw.as_str()))?;
        let code = image.bytes_at(sym.address, ACCESSOR_BYTES)?;
        Some(thd_loads(code, sym.address))
    };
    let conn = loads(&["thd_get_thread_id"])
        .and_then(|l| {
            l.iter().find_map(|l| match (l.dest, l.lea) {
                (EAX, false) => Some((l.disp, 4)),
                (RAX, false) => Some((l.disp, 8)),
                _ => None,
            })
        })
        .ok_or(ThdError::NoAccessor("thd_get_thread_id"))?;
    let text = loads(&["_Z16thd_query_unsafeP3THD"])
        .and_then(|l| {
            let str_ = l.iter().find(|l| l.dest == RAX && !l.lea && l.size == 8)?;
            let len = l.iter().find(|l| l.dest == RDX && !l.lea && l.size == 8)?;
            Some((str_.disp, len.disp))
        })
        .or_else(|| {
            let l = loads(&["thd_query_string"])?;
            let at = l.iter().find(|l| l.dest == RAX && l.lea)?;
            Some((at.disp, at.disp + 8))
        })
        .ok_or(ThdError::NoAccessor("thd_query_unsafe or thd_query_string"))?;
    let query_id_off = loads(&[
        "_Z16thd_get_query_idPK3THD",
        "thd_get_query_id",
        "thd_query_id",
    ])
    .and_then(|l| {
        l.iter()
            .find(|l| l.dest == RAX && !l.lea && l.size == 8)
            .map(|l| l.disp)
    })
    .or_else(|| query_id_from_dispatch(image))
    .unwrap_or(NO_QUERY_ID);
    Ok(Members {
        conn_off: conn.0,
        conn_size: conn.1,
        query_id_off,
        query_off: text.0,
        query_len_off: text.1,
    })
}

/// `THD::query_id` from the code of `dispatch_command`, where no accessor
/// gives it (MySQL 8.0 dropped `thd_get_query_id`): a statement's id is
/// `++atomic_global_query_id` (a `lock xadd` on the global, then +1), which
/// `THD::set_query_id` stores into the THD. The member is where that value
/// is stored (8 bytes, not on the stack, a stack spill followed); every
/// such store in the function must agree.
fn query_id_from_dispatch(image: &ElfImage) -> Option<u64> {
    let file = object::File::parse(image.binary_data()).ok()?;
    let global = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok("atomic_global_query_id") && !s.is_undefined())?
        .address();
    let symbols = image.symbols();
    let dispatch = symbols
        .iter()
        .find(|s| s.clone_suffix.is_none() && s.raw.starts_with("_Z16dispatch_commandP3THD"))?;
    let len = usize::try_from(dispatch.size.min(MAX_DISPATCH_BYTES)).ok()?;
    let code = image.bytes_at(dispatch.address, len)?;
    let stores = query_id_stores(code, dispatch.address, global);
    let first = *stores.first()?;
    stores.iter().all(|&d| d == first).then_some(first)
}

/// `dispatch_command` is ~20 KB in MySQL 8.0.15.
const MAX_DISPATCH_BYTES: u64 = 256 << 10;

/// The displacements of the 8-byte stores, to memory off the stack, of the
/// values `lock xadd` took from the global at `global` (its address put in
/// a register by `lea`, or addressed RIP-relative).
fn query_id_stores(code: &[u8], ip: u64, global: u64) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    const CALL_CLOBBERED: [Register; 9] = [
        Register::RAX,
        Register::RCX,
        Register::RDX,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
    ];
    let mut out = Vec::new();
    // Registers holding the global's address; registers and stack slots
    // (rbp/rsp displacements) holding a fresh query id.
    let mut address_in: Vec<Register> = Vec::new();
    let mut id_in: Vec<Register> = Vec::new();
    let mut id_at: Vec<(Register, i64)> = Vec::new();
    let on_stack = |r: Register| matches!(r, Register::RBP | Register::RSP);
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            break;
        }
        let mem_is_global = insn.op_kinds().any(|k| k == OpKind::Memory)
            && insn.memory_index() == Register::None
            && ((insn.is_ip_rel_memory_operand() && insn.ip_rel_memory_address() == global)
                || (address_in.contains(&insn.memory_base()) && insn.memory_displacement64() == 0));
        let reg0 = (insn.op_count() > 0 && insn.op0_kind() == OpKind::Register)
            .then(|| insn.op0_register().full_register());
        let reg1 = (insn.op_count() > 1 && insn.op1_kind() == OpKind::Register)
            .then(|| insn.op1_register().full_register());
        let mem_slot = (insn.op_kinds().any(|k| k == OpKind::Memory)
            && insn.memory_index() == Register::None)
            .then(|| (insn.memory_base(), insn.memory_displacement64() as i64));
        match insn.mnemonic() {
            Mnemonic::Xadd if mem_is_global && insn.op0_kind() == OpKind::Memory => {
                if let Some(r) = reg1 {
                    id_in.push(r);
                }
                continue;
            }
            Mnemonic::Lea if insn.is_ip_rel_memory_operand() => {
                if let Some(r) = reg0 {
                    id_in.retain(|&x| x != r);
                    address_in.retain(|&x| x != r);
                    if insn.ip_rel_memory_address() == global {
                        address_in.push(r);
                    }
                }
                continue;
            }
            // The id + 1 stays the id.
            Mnemonic::Add if reg0.is_some_and(|r| id_in.contains(&r)) => continue,
            Mnemonic::Mov if insn.op0_kind() == OpKind::Memory => {
                if let Some(slot) = mem_slot {
                    id_at.retain(|&x| x != slot);
                }
                if let (Some(r), Some((base, disp))) = (reg1, mem_slot) {
                    if id_in.contains(&r) && insn.op1_register().size() == 8 {
                        if on_stack(base) {
                            id_at.push((base, disp));
                        } else if base != Register::RIP && base != Register::None {
                            out.push(disp as u64);
                        }
                    }
                }
                continue;
            }
            Mnemonic::Mov if insn.op1_kind() == OpKind::Memory => {
                if let Some(r) = reg0 {
                    id_in.retain(|&x| x != r);
                    address_in.retain(|&x| x != r);
                    if mem_slot.is_some_and(|slot| id_at.contains(&slot))
                        && insn.op0_register().size() == 8
                    {
                        id_in.push(r);
                    }
                }
                continue;
            }
            Mnemonic::Call => {
                id_in.retain(|r| !CALL_CLOBBERED.contains(r));
                address_in.retain(|r| !CALL_CLOBBERED.contains(r));
                continue;
            }
            _ => {}
        }
        // Anything else written to a register ends what it held.
        if let Some(r) = reg0 {
            id_in.retain(|&x| x != r);
            address_in.retain(|&x| x != r);
        }
    }
    out
}

/// An accessor is a handful of instructions; this is ample.
const ACCESSOR_BYTES: usize = 64;

/// What the THD members' offset means when the query id is not known:
/// BPF then numbers a thread's statements itself, a new one whenever the
/// THD's query text (its address or length) changes.
pub const NO_QUERY_ID: u64 = crate::bpf::abi::THD_NO_QUERY_ID;

/// One `mov reg, [rdi + disp]` (or `lea`) of an accessor, up to its first
/// `ret`, before anything overwrites `rdi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Load {
    dest: iced_x86::Register,
    disp: u64,
    size: usize,
    lea: bool,
}

fn thd_loads(code: &[u8], ip: u64) -> Vec<Load> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let mut out = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() || insn.mnemonic() == Mnemonic::Ret || insn.is_jmp_short_or_near() {
            break;
        }
        let from_thd = insn.op_count() == 2
            && insn.op0_kind() == OpKind::Register
            && insn.op1_kind() == OpKind::Memory
            && insn.memory_base() == Register::RDI
            && insn.memory_index() == Register::None;
        if from_thd && matches!(insn.mnemonic(), Mnemonic::Mov | Mnemonic::Lea) {
            out.push(Load {
                dest: insn.op0_register(),
                disp: insn.memory_displacement64(),
                size: insn.op0_register().size(),
                lea: insn.mnemonic() == Mnemonic::Lea,
            });
        }
        // `rdi` overwritten: later loads are not from the THD.
        if insn.op_count() > 0
            && insn.op0_kind() == OpKind::Register
            && insn.op0_register().full_register() == Register::RDI
        {
            break;
        }
    }
    out
}

/// THD methods looked at for the class's definition (their units).
const MAX_THD_METHODS: usize = 64;

type Unit<'a> = gimli::Unit<crate::resolve::dwarf::Reader<'a>>;
type Dwarf<'a> = gimli::Dwarf<crate::resolve::dwarf::Reader<'a>>;

fn members_in(
    dwarf: &Dwarf<'_>,
    unit: &Unit<'_>,
    thd: gimli::UnitOffset,
) -> Result<Members, ThdError> {
    let integer = |names: &[&str], what: &'static str| -> Result<(u64, u64), ThdError> {
        for name in names {
            if let Some((off, ty)) = find_member(dwarf, unit, thd, name, 0)? {
                if let Shape::Integer { size, .. } = shape(dwarf, unit, ty)? {
                    return Ok((u64::from(off), size));
                }
            }
        }
        Err(ThdError::NoMember(what))
    };
    let (conn_off, conn_size) = integer(&["thread_id", "m_thread_id"], "connection id")?;
    let (query_id_off, query_id_size) = integer(&["query_id"], "query_id")?;
    if !matches!(conn_size, 4 | 8) || query_id_size != 8 {
        return Err(ThdError::NoMember(
            "connection id or query_id of a known size",
        ));
    }
    // The query: a LEX_STRING {str, length}, itself or inside a CSET_STRING.
    let mut text = None;
    for name in ["query_string", "m_query_string"] {
        let Some((off, ty)) = find_member(dwarf, unit, thd, name, 0)? else {
            continue;
        };
        let Shape::Aggregate(mut agg) = shape(dwarf, unit, ty)? else {
            continue;
        };
        let mut base = u64::from(off);
        if let Some((inner, ty)) = find_member(dwarf, unit, agg, "string", 0)? {
            if let Shape::Aggregate(a) = shape(dwarf, unit, ty)? {
                agg = a;
                base += u64::from(inner);
            }
        }
        let str_m = find_member(dwarf, unit, agg, "str", 0)?;
        let len_m = find_member(dwarf, unit, agg, "length", 0)?;
        if let (Some((s, _)), Some((l, lty))) = (str_m, len_m) {
            if matches!(shape(dwarf, unit, lty)?, Shape::Integer { size: 8, .. }) {
                text = Some((base + u64::from(s), base + u64::from(l)));
                break;
            }
        }
    }
    let (query_off, query_len_off) = text.ok_or(ThdError::NoMember("query text"))?;
    Ok(Members {
        conn_off,
        conn_size: conn_size as u32,
        query_id_off,
        query_off,
        query_len_off,
    })
}

enum ThdVariable {
    /// Offset of the variable inside the executable's TLS block.
    Tls { offset: u64 },
    /// Link-time address of the `pthread_key_t` (4 bytes).
    Key { address: u64 },
    /// Already relative to the thread pointer (read from an accessor's code).
    FromThreadPointer { offset: i64 },
}

/// The variable that holds (or keys) a thread's THD, from the symbol table.
fn thd_variable(image: &ElfImage) -> Result<ThdVariable, ThdError> {
    let file = object::File::parse(image.dwarf_data())?;
    let mut key = None;
    // A stripped binary keeps its exported ones (MySQL 8.0 exports
    // `current_thd` for plugins) in `.dynsym`.
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(name) = sym.name() else { continue };
        if sym.is_undefined() {
            continue;
        }
        match (name, sym.kind()) {
            ("current_thd" | "THR_THD" | "_ZL7THR_THD", SymbolKind::Tls) => {
                return Ok(ThdVariable::Tls {
                    offset: sym.address(),
                })
            }
            ("THR_THD", SymbolKind::Data) if sym.size() == 4 => {
                key = Some(ThdVariable::Key {
                    address: sym.address(),
                })
            }
            _ => {}
        }
    }
    key.or_else(|| current_thd_accessor(image))
        .ok_or(ThdError::NoThdVariable)
}

/// Where the THD is from the thread pointer, read from the code of the
/// accessor the server exports for plugins (`_current_thd` in MariaDB
/// 10.4+, `thd_get_current_thd()` in MySQL 8.0) when the variable itself
/// is not in the symbol tables (Debian's stripped mariadbd): the
/// executable's TLS is reached as `mov %fs:0,%rax; mov -0x68(%rax),%rax`
/// (or `mov %fs:-0x68,%rax`): that displacement is the offset.
fn current_thd_accessor(image: &ElfImage) -> Option<ThdVariable> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let symbols = image.symbols();
    let sym = symbols.iter().find(|s| {
        s.clone_suffix.is_none()
            && matches!(s.raw.as_str(), "_current_thd" | "_Z19thd_get_current_thdv")
    })?;
    let code = image.bytes_at(sym.address, ACCESSOR_BYTES)?;
    let mut decoder = Decoder::with_ip(64, code, sym.address, DecoderOptions::NONE);
    let mut tp_in: Option<Register> = None;
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() || insn.mnemonic() == Mnemonic::Ret || insn.is_call_near() {
            return None;
        }
        if insn.mnemonic() != Mnemonic::Mov
            || insn.op_count() != 2
            || insn.op0_kind() != OpKind::Register
            || insn.op1_kind() != OpKind::Memory
            || insn.memory_index() != Register::None
        {
            continue;
        }
        let disp = insn.memory_displacement64() as i64;
        if insn.segment_prefix() == Register::FS && insn.memory_base() == Register::None {
            if disp == 0 {
                // The thread pointer itself (its TCB's first word).
                tp_in = Some(insn.op0_register());
                continue;
            }
            return (disp < 0).then_some(ThdVariable::FromThreadPointer { offset: disp });
        }
        if tp_in.is_some() && Some(insn.memory_base()) == tp_in {
            return (disp < 0).then_some(ThdVariable::FromThreadPointer { offset: disp });
        }
    }
    None
}

/// The thread-pointer-relative offset of a variable at `offset` in the
/// executable's TLS block: glibc places the executable's block first,
/// right below the thread pointer (`_dl_determine_tlsoffset`, TLS_TCB_AT_TP).
fn tls_offset(binary: &[u8], offset: u64) -> Result<i64, ThdError> {
    let file = object::File::parse(binary)?;
    let elf = match &file {
        object::File::Elf64(f) => f,
        _ => return Err(ThdError::NoTls),
    };
    let endian = elf.endian();
    let tls = elf
        .elf_program_headers()
        .iter()
        .find(|p| p.p_type(endian) == object::elf::PT_TLS)
        .ok_or(ThdError::NoTls)?;
    let memsz = tls.p_memsz(endian);
    let align = tls.p_align(endian).max(1);
    if !align.is_power_of_two() || memsz > 1 << 20 || offset >= memsz {
        return Err(ThdError::NoTls);
    }
    let firstbyte = tls.p_vaddr(endian).wrapping_neg() & (align - 1);
    let block = (memsz - firstbyte).div_ceil(align) * align + firstbyte;
    Ok(offset as i64 - block as i64)
}

/// glibc's `struct pthread` keys layout, from libc's `_thread_db_*`.
struct GlibcSpecific {
    /// Offset of `specific` (the array of block pointers) in `struct pthread`.
    specific_off: u64,
    level1_len: u32,
    level2_len: u32,
    key_data_size: u64,
    key_data_data_off: u64,
    /// Offset of `tid` (the kernel's thread id) in `struct pthread`.
    tid_off: u64,
}

fn glibc_specific(pid: u32) -> Result<GlibcSpecific, ThdError> {
    let maps = crate::target::maps::of(pid).map_err(|e| ThdError::Target(e.to_string()))?;
    let path = maps
        .iter()
        .map(|m| m.path.as_str())
        .find(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            name == "libc.so.6" || (name.starts_with("libc-2.") && name.ends_with(".so"))
        })
        .ok_or(ThdError::NoLibc)?;
    let file = crate::target::rootfs::open_mapped_by_path(pid, path)
        .map_err(|e| ThdError::Target(crate::error_chain(&e)))?;
    // SAFETY: a read-only private map of a file checked to be the one the
    // target maps; a change under us could only yield wrong bytes, which
    // the checks below bound.
    let data = unsafe { memmap2::Mmap::map(file.file()) }
        .map_err(|e| ThdError::Target(format!("mapping {path}: {e}")))?;
    let elf = object::File::parse(&data[..])?;
    let descriptor = |name: &'static str| -> Result<[u32; 3], ThdError> {
        let sym = elf
            .dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .ok_or(ThdError::NoLibcDescriptor(name))?;
        let bytes = bytes_at(&elf, sym.address(), sym.size().min(12) as usize)
            .ok_or(ThdError::NoLibcDescriptor(name))?;
        let mut out = [0u32; 3];
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            out[i] = u32::from_le_bytes(c.try_into().expect("4 bytes"));
        }
        Ok(out)
    };
    // Each is [bits of one element, elements, offset]; a sizeof is [bytes].
    let specific = descriptor("_thread_db_pthread_specific")?;
    let data_field = descriptor("_thread_db_pthread_key_data_data")?;
    let size = descriptor("_thread_db_sizeof_pthread_key_data")?;
    let level2 = descriptor("_thread_db_pthread_key_data_level2_data")?;
    let tid = descriptor("_thread_db_pthread_tid")?;
    // `specific` is one array of pointers: its bits over 64 are its length.
    let level1_len = specific[0] / 64 * specific[1].max(1);
    let ok = specific[0] % 64 == 0
        && (1..=64).contains(&level1_len)
        && (1..=1024).contains(&level2[1])
        && specific[2] < 1 << 16
        && (8..=64).contains(&size[0])
        && data_field[2] < size[0]
        && tid[0] == 32
        && tid[2] < 1 << 16;
    if !ok {
        return Err(ThdError::NoLibcDescriptor("_thread_db_pthread_specific"));
    }
    Ok(GlibcSpecific {
        specific_off: u64::from(specific[2]),
        level1_len,
        level2_len: level2[1],
        key_data_size: u64::from(size[0]),
        key_data_data_off: u64::from(data_field[2]),
        tid_off: u64::from(tid[2]),
    })
}

/// `len` bytes at a virtual address, from the section holding it.
fn bytes_at<'a>(elf: &object::File<'a>, address: u64, len: usize) -> Option<&'a [u8]> {
    let section = elf
        .sections()
        .find(|s| address >= s.address() && address - s.address() + len as u64 <= s.size())?;
    let data = section.data().ok()?;
    let at = usize::try_from(address - section.address()).ok()?;
    data.get(at..at + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessor_loads_from_the_thd_are_read_up_to_ret() {
        use iced_x86::Register::{EAX, RAX, RDX};
        // MySQL 8.0.15's thd_get_thread_id: push rbp; mov eax,[rdi+0x1ff8];
        // mov rbp,rsp; pop rbp; ret; then the next function's load.
        let id = [
            0x55, 0x8b, 0x87, 0xf8, 0x1f, 0, 0, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0x8b, 0x87, 1, 0, 0,
            0,
        ];
        let loads = thd_loads(&id, 0x1000);
        assert_eq!(loads.len(), 1, "{loads:?}");
        assert_eq!(
            (loads[0].dest, loads[0].disp, loads[0].size),
            (EAX, 0x1ff8, 4)
        );
        // thd_query_unsafe: mov rax,[rdi+0x218]; mov rdx,[rdi+0x220]; ret.
        let query = [
            0x48, 0x8b, 0x87, 0x18, 0x02, 0, 0, 0x48, 0x8b, 0x97, 0x20, 0x02, 0, 0, 0xc3,
        ];
        let loads = thd_loads(&query, 0x1000);
        assert_eq!(
            loads.iter().map(|l| (l.dest, l.disp)).collect::<Vec<_>>(),
            vec![(RAX, 0x218), (RDX, 0x220)]
        );
        // thd_query_string: lea rax,[rdi+0x1a0]; ret.
        let lea = [0x48, 0x8d, 0x87, 0xa0, 0x01, 0, 0, 0xc3];
        let loads = thd_loads(&lea, 0x1000);
        assert!(loads[0].lea && loads[0].dest == RAX && loads[0].disp == 0x1a0);
        // rdi overwritten first (mov rdi,[rdi+8]): nothing after is the THD's.
        let moved = [0x48, 0x8b, 0x7f, 0x08, 0x8b, 0x87, 0x10, 0, 0, 0, 0xc3];
        let loads = thd_loads(&moved, 0x1000);
        assert!(loads.iter().all(|l| l.disp != 0x10), "{loads:?}");
    }

    #[test]
    fn query_id_is_where_dispatch_command_stores_the_global_ids_increment() {
        // MySQL 8.0.15's dispatch_command: lea rax,[rip+atomic_global_query_id];
        // mov r13d,1; lock xadd [rax],r13; mov rsi,[rbx+0xde8]; add r13,1;
        // call; mov [rbx+0x1fc8],r13.
        const GLOBAL: u64 = 0x3355ca8;
        let kept = [
            &[0x48, 0x8d, 0x05, 0x03, 0xed, 0x63, 0x02][..],
            &[0x41, 0xbd, 0x01, 0, 0, 0],
            &[0xf0, 0x4c, 0x0f, 0xc1, 0x28],
            &[0x48, 0x8b, 0xb3, 0xe8, 0x0d, 0, 0],
            &[0x49, 0x83, 0xc5, 0x01],
            &[0xe8, 0, 0, 0, 0],
            &[0x4c, 0x89, 0xab, 0xc8, 0x1f, 0, 0],
        ]
        .concat();
        assert_eq!(query_id_stores(&kept, 0xd16f9e, GLOBAL), vec![0x1fc8]);
        // Another global: nothing.
        assert!(query_id_stores(&kept, 0xd16f9e, GLOBAL + 8).is_empty());
        // In rax (clobbered by a call), spilled to the stack and reloaded:
        // lea rcx,[rip+global]; mov eax,1; lock xadd [rcx],rax; add rax,1;
        // mov [rbp-0x1370],rax; call; mov [rbx+0x10],rax (the call's result);
        // mov rax,[rbp-0x1370]; mov [rbx+0x1fc8],rax.
        let spilled = [
            &[0x48, 0x8d, 0x0d, 0x45, 0xc1, 0x63, 0x02][..],
            &[0xb8, 0x01, 0, 0, 0],
            &[0xf0, 0x48, 0x0f, 0xc1, 0x01],
            &[0x48, 0x83, 0xc0, 0x01],
            &[0x48, 0x89, 0x85, 0x90, 0xec, 0xff, 0xff],
            &[0xe8, 0, 0, 0, 0],
            &[0x48, 0x89, 0x43, 0x10],
            &[0x48, 0x8b, 0x85, 0x90, 0xec, 0xff, 0xff],
            &[0x48, 0x89, 0x83, 0xc8, 0x1f, 0, 0],
        ]
        .concat();
        // The lea sits 0xd19b5c - 0xd16f9e further, as in the binary.
        assert_eq!(query_id_stores(&spilled, 0xd19b5c, GLOBAL), vec![0x1fc8]);
    }

    #[test]
    fn describe_says_off_when_off() {
        assert_eq!(describe(&ThdLayout::default()), "off");
    }
}

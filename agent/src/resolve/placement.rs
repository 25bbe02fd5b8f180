//! Where a uprobe can go at the start of a function.
//!
//! The kernel refuses a uprobe on some x86-64 instructions: it checks each
//! one before placing the breakpoint (`arch_uprobe_analyze_insn` in
//! arch/x86/kernel/uprobes.c, Linux 6.x) and fails the attach with
//! ENOTSUPP (524, "Unknown error 524" to strerror) when
//!
//! - a legacy prefix is `lock` (f0) or an es/cs/ss/ds segment override
//!   (26, 2e, 36, 3e; the CET `notrack` prefix is 3e): `is_prefix_bad`;
//! - the instruction loads %ss (`mov …,%ss`, `pop %ss`), which masks
//!   exceptions: `insn_masking_exception`;
//! - its opcode byte is not in `good_insns_64` (int3, int, into, iret,
//!   hlt, cli, sti, in/out, ins/outs, icebp, and opcodes invalid in 64-bit
//!   mode). For VEX/EVEX instructions the byte checked is the opcode after
//!   the VEX prefix, against the same one-byte table, so e.g. `vmovdqu`
//!   (VEX 6f) and `vpxor` (VEX ef) are refused while `vmovups` (VEX 10) is
//!   not. Every two-byte (0f xx) opcode passes: bit 0x0f of the table is set;
//! - it is a relative branch with a 66 (operand size) prefix:
//!   `branch_setup_xol_ops`;
//!
//! and with ENOEXEC when its bytes do not decode. On 6.18.44 (this VM),
//! `perf_event_open` uprobes, uretprobes and uprobe_multi links all
//! answered 524 for each refused class above and attached every accepted
//! one tried (push, endbr64, nops, fs:, addr16, `syscall`, `ud2`, `mfence`,
//! `rdtscp`, VEX `vmovups`, EVEX `vmovups`, `repz ret`).
//!
//! A function whose first instruction is refused can still be probed on
//! its second instruction when that is equivalent: nothing may branch to
//! the second instruction or inside the first (else the probe would fire
//! where the function was not entered), the skipped instruction must fall
//! through and leave %rsp alone (so a return probe there still finds the
//! return address at (%rsp)), and it must not overwrite an argument
//! register the probe reads (call site, latch).

use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, FlowControl, Instruction, InstructionInfoFactory,
    OpAccess, OpKind, Register,
};
use serde::{Deserialize, Serialize};

/// The longest x86 instruction: what the first decode needs.
pub const MAX_INSN_LEN: usize = 15;

/// One-byte opcodes missing from the kernel's `good_insns_64` table.
const BAD_OPCODES_64: [u8; 40] = [
    0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62, 0x6c, 0x6d,
    0x6e, 0x6f, 0x82, 0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4, 0xe5, 0xe6, 0xe7, 0xea,
    0xec, 0xed, 0xee, 0xef, 0xf1, 0xf4, 0xfa, 0xfb,
];

/// Legacy prefix bytes (the kernel decoder records these as prefixes).
const LEGACY_PREFIXES: [u8; 11] = [
    0xf0, 0xf2, 0xf3, 0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65, 0x66, 0x67,
];

/// Why the kernel refuses a uprobe on an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "byte")]
pub enum KernelRefusal {
    /// The bytes do not decode (ENOEXEC at attach).
    Undecodable,
    /// `lock`, or an es/cs/ss/ds segment override prefix.
    Prefix(u8),
    /// Loads %ss, which delays interrupts by one instruction.
    LoadsSs,
    /// An opcode the kernel will not single-step or emulate.
    Opcode(u8),
    /// The opcode after a VEX/EVEX prefix, checked against the one-byte table.
    VexOpcode(u8),
    /// A relative jump or call with a 66 (16-bit operand) prefix.
    OperandSizeBranch,
}

impl std::fmt::Display for KernelRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelRefusal::Undecodable => f.write_str("its bytes do not decode as an instruction"),
            KernelRefusal::Prefix(0xf0) => f.write_str("the kernel refuses the lock prefix"),
            KernelRefusal::Prefix(p) => {
                let seg = match p {
                    0x26 => "es",
                    0x2e => "cs",
                    0x36 => "ss",
                    _ => "ds/notrack",
                };
                write!(f, "the kernel refuses the {seg} segment prefix ({p:#04x})")
            }
            KernelRefusal::LoadsSs => f.write_str("the kernel refuses instructions that load %ss"),
            KernelRefusal::Opcode(op) => write!(
                f,
                "the kernel does not single-step opcode {op:#04x} (not in its good_insns_64 table)"
            ),
            KernelRefusal::VexOpcode(op) => write!(
                f,
                "the kernel checks the opcode after the VEX/EVEX prefix ({op:#04x}) against its one-byte table and refuses it"
            ),
            KernelRefusal::OperandSizeBranch => {
                f.write_str("the kernel refuses relative branches with a 66 prefix")
            }
        }
    }
}

/// Argument registers the probe reads at its site, by 1-based argument
/// position (the catalog's `file_arg`, `line_arg`, `latch.arg`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArgReads(u8);

/// SysV x86-64: the six register arguments, in order.
const ARG_REGISTERS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

impl ArgReads {
    pub const NONE: ArgReads = ArgReads(0);

    /// From 1-based argument positions; positions past the sixth (never
    /// read from registers) are ignored.
    pub fn of(positions: impl IntoIterator<Item = u8>) -> Self {
        let mut mask = 0;
        for p in positions {
            if (1..=6).contains(&p) {
                mask |= 1 << (p - 1);
            }
        }
        ArgReads(mask)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The first read argument `register` holds (any width of it).
    fn position_of(self, register: Register) -> Option<u8> {
        let full = register.full_register();
        ARG_REGISTERS
            .iter()
            .position(|&r| r == full)
            .map(|i| i as u8)
            .filter(|&i| self.0 & (1 << i) != 0)
            .map(|i| i + 1)
    }
}

/// The probe sits past the function's first instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeMove {
    /// The skipped instruction, e.g. `lock cmpxchg`.
    pub skipped: String,
    /// Its length: the probe is this many bytes past the function's address.
    pub bytes: u64,
    pub refusal: KernelRefusal,
}

impl std::fmt::Display for ProbeMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "moved past `{}` (+{} bytes): {}",
            self.skipped, self.bytes, self.refusal
        )
    }
}

/// Where the probe goes for one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On the first instruction, as usual.
    Entry,
    Moved(ProbeMove),
    /// No place is both accepted by the kernel and equivalent to the entry.
    Refused(String),
}

/// A function's code, as the placement decision needs it.
#[derive(Debug, Clone, Copy)]
pub struct FunctionCode<'a> {
    /// Virtual address of the probe point (the function's entry, or an
    /// inline site).
    pub address: u64,
    /// Bytes from `address` on (at least the first two instructions).
    pub code: &'a [u8],
    /// The function holding the probe point (address and bytes), `None`
    /// when its extent is unknown.
    pub function: Option<(u64, &'a [u8])>,
    /// Other code of that function that may branch back into it: its
    /// `.cold` parts.
    pub fragments: &'a [(u64, &'a [u8])],
}

/// The kernel's verdict on the instruction at the start of `code`
/// (`None`: accepted), with the decoded instruction.
pub fn kernel_refusal(code: &[u8]) -> Option<KernelRefusal> {
    let insn = decode_one(code, 0);
    refusal_of(&insn, code)
}

fn decode_one(code: &[u8], ip: u64) -> Instruction {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    decoder.decode()
}

fn refusal_of(insn: &Instruction, code: &[u8]) -> Option<KernelRefusal> {
    if insn.is_invalid() || insn.len() > code.len() {
        // The kernel's decoder takes opcodes invalid in 64-bit mode (`06`,
        // `d6`) and refuses them by its table.
        let op = code.iter().find(|b| !LEGACY_PREFIXES.contains(b));
        return Some(match op {
            Some(&op) if BAD_OPCODES_64.contains(&op) => KernelRefusal::Opcode(op),
            _ => KernelRefusal::Undecodable,
        });
    }
    let bytes = &code[..insn.len()];
    // Legacy prefixes first, then at most one REX, then the opcode: the
    // order the kernel's decoder reads them in (`48 f0 ff 07` has `f0` as
    // its opcode byte there, and the kernel accepts it).
    let mut i = 0;
    while i < bytes.len() && LEGACY_PREFIXES.contains(&bytes[i]) {
        if matches!(bytes[i], 0xf0 | 0x26 | 0x2e | 0x36 | 0x3e) {
            return Some(KernelRefusal::Prefix(bytes[i]));
        }
        i += 1;
    }
    let operand_size_prefix = bytes[..i].contains(&0x66);
    if matches!(bytes.get(i), Some(0x40..=0x4f)) {
        i += 1;
    }
    let op = *bytes.get(i)?;
    match insn.encoding() {
        EncodingKind::VEX | EncodingKind::EVEX => {
            let at = match op {
                0xc5 => i + 2,
                0xc4 => i + 3,
                _ => i + 4, // 62: EVEX
            };
            let vop = *bytes.get(at)?;
            return BAD_OPCODES_64
                .contains(&vop)
                .then_some(KernelRefusal::VexOpcode(vop));
        }
        // AMD's XOP: whether the kernel decodes it as we do is unknown.
        EncodingKind::XOP => return Some(KernelRefusal::Undecodable),
        _ => {}
    }
    let modrm_reg = bytes.get(i + 1).map(|m| (m >> 3) & 7);
    if op == 0x17 || (op == 0x8e && modrm_reg == Some(2)) {
        return Some(KernelRefusal::LoadsSs);
    }
    if BAD_OPCODES_64.contains(&op) {
        return Some(KernelRefusal::Opcode(op));
    }
    let relative_branch = matches!(op, 0xe8 | 0xe9 | 0xeb | 0x70..=0x7f)
        || (op == 0x0f && matches!(bytes.get(i + 1), Some(0x80..=0x8f)));
    if operand_size_prefix && relative_branch {
        return Some(KernelRefusal::OperandSizeBranch);
    }
    None
}

/// `lock cmpxchg`, `cs nop`, `vmovdqu`: what the message names.
fn describe(insn: &Instruction, refusal: KernelRefusal) -> String {
    let mnemonic = format!("{:?}", insn.mnemonic()).to_lowercase();
    match refusal {
        KernelRefusal::Prefix(0xf0) => format!("lock {mnemonic}"),
        KernelRefusal::Prefix(0x26) => format!("es {mnemonic}"),
        KernelRefusal::Prefix(0x2e) => format!("cs {mnemonic}"),
        KernelRefusal::Prefix(0x36) => format!("ss {mnemonic}"),
        KernelRefusal::Prefix(0x3e) => format!("ds {mnemonic}"),
        _ => mnemonic,
    }
}

/// Decides where the probe for the function at `code.address` goes.
/// `reads`: the argument registers the probe reads there.
pub fn place(code: &FunctionCode, reads: ArgReads) -> Placement {
    let first = decode_one(code.code, code.address);
    let Some(refusal) = refusal_of(&first, code.code) else {
        return Placement::Entry;
    };
    // What we cannot decode the kernel may still take (or answer ENOEXEC,
    // which `attach_errno` explains): leave it to the attach.
    if refusal == KernelRefusal::Undecodable {
        return Placement::Entry;
    }
    let skipped = describe(&first, refusal);
    let refuse = |why: String| {
        Placement::Refused(format!(
            "first instruction `{skipped}`: {refusal}; not moved past it: {why}"
        ))
    };
    if first.flow_control() != FlowControl::Next {
        return refuse("control does not simply pass to the next instruction (branch, call, return, interrupt)".into());
    }
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(&first);
    for used in info.used_registers() {
        if used.register().full_register() == Register::RSP {
            return refuse(
                "it uses the stack pointer, and a return probe past it needs the return address at (%rsp)"
                    .into(),
            );
        }
        let writes = matches!(
            used.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        );
        if let Some(arg) = reads.position_of(used.register()).filter(|_| writes) {
            return refuse(format!(
                "it overwrites {:?} (argument {arg}), which the probe reads for call sites or latches",
                used.register().full_register()
            )
            .to_lowercase());
        }
    }

    let len = first.len() as u64;
    let Some((body_start, body)) = code.function else {
        return refuse(
            "the function's extent is unknown, so branches into it cannot be checked".into(),
        );
    };
    let probe = code.address + len;
    if probe >= body_start + body.len() as u64 {
        return refuse("the function ends there".into());
    }
    let Some(rest) = code.code.get(len as usize..) else {
        return refuse("the next instruction is not in the file".into());
    };
    let next = decode_one(rest, probe);
    if let Some(r) = refusal_of(&next, rest) {
        return refuse(format!("the next instruction is refused too ({r})"));
    }
    for &(start, bytes) in std::iter::once(&(body_start, body)).chain(code.fragments) {
        if let Err(why) = no_branch_into(start, bytes, code.address, probe) {
            return refuse(why);
        }
    }
    Placement::Moved(ProbeMove {
        skipped,
        bytes: len,
        refusal,
    })
}

/// Checks that no instruction of `body` branches into `(skipped, probe]`:
/// a jump to `probe` would fire the moved probe where the function was
/// not entered; one inside the skipped instruction would miss it.
fn no_branch_into(start: u64, body: &[u8], skipped: u64, probe: u64) -> Result<(), String> {
    let mut decoder = Decoder::with_ip(64, body, start, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            return Err(format!(
                "the function's code does not decode at {:#x}, so branches into it cannot be checked",
                insn.ip()
            ));
        }
        match insn.flow_control() {
            FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::XbeginXabortXend => {
                let target = insn.near_branch_target();
                if target > skipped && target <= probe {
                    return Err(format!(
                        "the branch at {:#x} jumps to {:#x}, past the function's entry",
                        insn.ip(),
                        target
                    ));
                }
            }
            // A jump through a pointer loaded from memory without an index
            // (`jmp *0x10(%rax)`: a virtual tail call; `jmp *x(%rip)`: one
            // via the GOT) lands on a function's entry. A jump through a
            // register or an indexed slot may be a switch's jump table and
            // could land anywhere (so boost's sp_counted_base::release in
            // MySQL 8.0.15, `lock sub` first, ending in `jmp *%rax`, stays
            // refused).
            FlowControl::IndirectBranch
                if insn.op0_kind() != OpKind::Memory || insn.memory_index() != Register::None =>
            {
                return Err(format!(
                    "the indirect jump at {:#x} (a jump table?) could land past the entry",
                    insn.ip()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;

    fn place_in(body: &[u8], reads: ArgReads) -> Placement {
        place(
            &FunctionCode {
                address: BASE,
                code: body,
                function: Some((BASE, body)),
                fragments: &[],
            },
            reads,
        )
    }

    /// Matches what 6.18.44 answered to perf_event_open on each (524 or ok).
    #[test]
    fn mirrors_the_kernel_verdicts() {
        let refused: &[(&[u8], KernelRefusal)] = &[
            (&[0xf0, 0xff, 0x07], KernelRefusal::Prefix(0xf0)),
            (&[0xf0, 0x48, 0x0f, 0xb1, 0x0f], KernelRefusal::Prefix(0xf0)),
            (&[0xf2, 0xf0, 0xff, 0x07], KernelRefusal::Prefix(0xf0)),
            (&[0x2e, 0x8b, 0x07], KernelRefusal::Prefix(0x2e)),
            (&[0x3e, 0x8b, 0x07], KernelRefusal::Prefix(0x3e)),
            (&[0x26, 0x8b, 0x07], KernelRefusal::Prefix(0x26)),
            (&[0x36, 0x8b, 0x07], KernelRefusal::Prefix(0x36)),
            (&[0x3e, 0xff, 0xe0], KernelRefusal::Prefix(0x3e)),
            (
                &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
                KernelRefusal::Prefix(0x2e),
            ),
            (&[0xcc], KernelRefusal::Opcode(0xcc)),
            (&[0xf4], KernelRefusal::Opcode(0xf4)),
            (&[0xe4, 0x10], KernelRefusal::Opcode(0xe4)),
            (&[0xcd, 0x80], KernelRefusal::Opcode(0xcd)),
            (&[0xfa], KernelRefusal::Opcode(0xfa)),
            (&[0xf1], KernelRefusal::Opcode(0xf1)),
            (&[0x8e, 0xd0], KernelRefusal::LoadsSs),
            (&[0xc5, 0xfa, 0x6f, 0x07], KernelRefusal::VexOpcode(0x6f)),
            (&[0xc5, 0xf9, 0xef, 0xc0], KernelRefusal::VexOpcode(0xef)),
            (
                &[0xc4, 0xe1, 0x7a, 0x6f, 0x07],
                KernelRefusal::VexOpcode(0x6f),
            ),
            (
                &[0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x07],
                KernelRefusal::VexOpcode(0x6f),
            ),
            (&[0x66, 0x74, 0x00], KernelRefusal::OperandSizeBranch),
            (&[0x06], KernelRefusal::Opcode(0x06)),
            (&[0xd6], KernelRefusal::Opcode(0xd6)),
            (&[], KernelRefusal::Undecodable),
        ];
        for (bytes, want) in refused {
            assert_eq!(kernel_refusal(bytes), Some(*want), "{bytes:02x?}");
        }
        let accepted: &[&[u8]] = &[
            &[0x55],
            &[0x41, 0x57],
            &[0xf3, 0x0f, 0x1e, 0xfa],
            &[0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x64, 0x8b, 0x07],
            &[0x67, 0x8b, 0x07],
            &[0x0f, 0x05],
            &[0x0f, 0x0b],
            &[0x0f, 0xae, 0xf0],
            &[0x0f, 0x01, 0xf9],
            &[0xc5, 0xf8, 0x10, 0x07],
            &[0xc4, 0xe1, 0x78, 0x10, 0x07],
            &[0x62, 0xf1, 0x7c, 0x48, 0x10, 0x07],
            &[0xc4, 0xe2, 0x79, 0x00, 0xc1],
            &[0xf3, 0xc3],
            &[0xf2, 0xeb, 0x00],
            &[0x8e, 0xd8],
            &[0x8f, 0x07],
            &[0x48, 0x8d, 0x05, 0, 0, 0, 0],
        ];
        for bytes in accepted {
            assert_eq!(kernel_refusal(bytes), None, "{bytes:02x?}");
        }
    }

    #[test]
    fn lock_prefixed_entry_moves_to_the_next_instruction() {
        // lock cmpxchg %rcx,(%rdi); push %rbp; mov %rsp,%rbp; pop %rbp; ret
        let body = [
            0xf0, 0x48, 0x0f, 0xb1, 0x0f, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3,
        ];
        let Placement::Moved(m) = place_in(&body, ArgReads::NONE) else {
            panic!("{:?}", place_in(&body, ArgReads::NONE))
        };
        assert_eq!(m.bytes, 5);
        assert_eq!(m.skipped, "lock cmpxchg");
        assert_eq!(
            m.to_string(),
            "moved past `lock cmpxchg` (+5 bytes): the kernel refuses the lock prefix"
        );
        // Reading argument 1 (%rdi) is fine: cmpxchg writes %rax and memory.
        assert!(matches!(
            place_in(&body, ArgReads::of([1, 2])),
            Placement::Moved(_)
        ));
    }

    #[test]
    fn accepted_or_undecodable_entry_stays() {
        assert_eq!(place_in(&[0x55, 0xc3], ArgReads::NONE), Placement::Entry);
        assert_eq!(place_in(&[0x0f, 0xff], ArgReads::NONE), Placement::Entry);
    }

    #[test]
    fn branch_to_the_moved_probe_refuses() {
        // lock incl (%rdi); 1: dec %esi; jg 1b; ret — the loop re-enters
        // right after the lock: a probe there would count every iteration.
        let body = [0xf0, 0xff, 0x07, 0xff, 0xce, 0x7f, 0xfc, 0xc3];
        let Placement::Refused(why) = place_in(&body, ArgReads::NONE) else {
            panic!("moved")
        };
        assert!(why.contains("`lock inc`"), "{why}");
        assert!(
            why.contains("the branch at 0x1005 jumps to 0x1003"),
            "{why}"
        );
    }

    #[test]
    fn branch_into_the_skipped_instruction_refuses() {
        // lock incl (%rdi); nop; jmp 0x1001 (mid-instruction); ret
        let body = [0xf0, 0xff, 0x07, 0x90, 0xeb, 0xfb, 0xc3];
        assert!(matches!(
            place_in(&body, ArgReads::NONE),
            Placement::Refused(w) if w.contains("jumps to 0x1001")
        ));
        // A jump back to the entry itself is fine: it passes the probe again,
        // as it would pass one on the entry.
        let to_entry = [0xf0, 0xff, 0x07, 0x90, 0xeb, 0xfa, 0xc3];
        assert!(matches!(
            place_in(&to_entry, ArgReads::NONE),
            Placement::Moved(_)
        ));
    }

    #[test]
    fn stack_pointer_use_refuses() {
        // lock addl $0,(%rsp) (a full fence idiom); ret
        let body = [0xf0, 0x83, 0x04, 0x24, 0x00, 0xc3];
        let Placement::Refused(why) = place_in(&body, ArgReads::NONE) else {
            panic!("moved")
        };
        assert!(why.contains("stack pointer"), "{why}");
    }

    #[test]
    fn overwritten_argument_refuses_only_when_read() {
        // lock xadd %esi,(%rdi): writes %esi (argument 2); push %rbp; ret
        let body = [0xf0, 0x0f, 0xc1, 0x37, 0x55, 0xc3];
        assert!(matches!(
            place_in(&body, ArgReads::NONE),
            Placement::Moved(_)
        ));
        assert!(matches!(
            place_in(&body, ArgReads::of([1])),
            Placement::Moved(_)
        ));
        let Placement::Refused(why) = place_in(&body, ArgReads::of([2])) else {
            panic!("moved")
        };
        assert!(why.contains("rsi (argument 2)"), "{why}");
    }

    #[test]
    fn indirect_jumps_and_unknown_extent_refuse() {
        // lock incl (%rdi); jmp *%rax
        let body = [0xf0, 0xff, 0x07, 0xff, 0xe0];
        assert!(matches!(
            place_in(&body, ArgReads::NONE),
            Placement::Refused(w) if w.contains("indirect jump at 0x1003")
        ));
        // jmp *0x0(,%rax,8): a non-PIC jump table.
        let table = [0xf0, 0xff, 0x07, 0xff, 0x24, 0xc5, 0, 0, 0, 0];
        assert!(matches!(
            place_in(&table, ArgReads::NONE),
            Placement::Refused(w) if w.contains("indirect jump at 0x1003")
        ));
        // Tail calls through a vtable or the GOT land on function entries.
        let vtable = [0xf0, 0xff, 0x07, 0xff, 0x60, 0x10];
        assert!(matches!(
            place_in(&vtable, ArgReads::NONE),
            Placement::Moved(_)
        ));
        let got = [0xf0, 0xff, 0x07, 0xff, 0x25, 0, 0, 0, 0];
        assert!(matches!(
            place_in(&got, ArgReads::NONE),
            Placement::Moved(_)
        ));
        let unknown = place(
            &FunctionCode {
                address: BASE,
                code: &got,
                function: None,
                fragments: &[],
            },
            ArgReads::NONE,
        );
        assert!(matches!(unknown, Placement::Refused(w) if w.contains("extent is unknown")));
    }

    #[test]
    fn refused_next_instruction_and_function_end_refuse() {
        let both = [0xf0, 0xff, 0x07, 0xf0, 0xff, 0x07, 0xc3];
        assert!(matches!(
            place_in(&both, ArgReads::NONE),
            Placement::Refused(w) if w.contains("next instruction is refused too")
        ));
        let alone = [0xf0, 0xff, 0x07];
        assert!(matches!(
            place_in(&alone, ArgReads::NONE),
            Placement::Refused(w) if w.contains("function ends there")
        ));
        // A branch or return cannot be skipped.
        let branch = [0x66, 0x74, 0x00, 0xc3];
        assert!(matches!(
            place_in(&branch, ArgReads::NONE),
            Placement::Refused(w) if w.contains("(branch, call, return, interrupt)")
        ));
    }

    #[test]
    fn branch_from_a_cold_part_counts() {
        let hot = [0xf0, 0xff, 0x07, 0x55, 0x5d, 0xc3];
        // At 0x2000, `jmp 0x1003`: back from the cold part to the moved probe.
        let rel = (0x1003i64 - 0x2005) as i32;
        let mut cold = vec![0xe9];
        cold.extend(rel.to_le_bytes());
        let code = |fragments| FunctionCode {
            address: BASE,
            code: &hot,
            function: Some((BASE, &hot)),
            fragments,
        };
        assert!(matches!(
            place(&code(&[]), ArgReads::NONE),
            Placement::Moved(_)
        ));
        assert!(matches!(
            place(&code(&[(0x2000, &cold)]), ArgReads::NONE),
            Placement::Refused(w) if w.contains("the branch at 0x2000 jumps to 0x1003")
        ));
    }
}

//! Kernel addresses named by the kernel itself: a BPF syscall program
//! (bpf/ksym.bpf.c) formats each address with `%ps`, which looks it up
//! the way `/proc/kallsyms` is built (`kallsyms_lookup`: the symbol at or
//! below the address in core text, a module or a BPF program).
//!
//! Why not read `/proc/kallsyms`: the kernel formats all of it for every
//! reader (~120,000 lines here, ~35 ms of system time), and a recording
//! names a few hundred kernel addresses. A kept copy
//! ([`crate::symbolize::kernel_symbols`]) makes later reads cheap, but the first
//! recording on a host paid the whole read: ~10 % of its CPU (issue 12
//! item 8). Asking the kernel costs one small program's load (~1 ms) and
//! a few microseconds per address, at every recording, and names BPF
//! programs and trampolines too (`bpf_prog_<tag>_<name>`), which the table
//! leaves unnamed. Where the program cannot load (an older kernel without
//! `bpf_loop`, BPF_PROG_TYPE_SYSCALL or `bpf_snprintf`'s `%ps`), the
//! caller falls back to the table.

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder, ProgramInput};

use crate::bpf::layout::defines;
use crate::bpf::layout::ksym as bpf;

const BATCH: usize = defines::KSYM_BATCH as usize;
const NAME_BYTES: usize = defines::KSYM_NAME_BYTES as usize;

/// `struct ksym_slot`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct KsymSlot {
    addr: u64,
    len: i64,
    name: [u8; NAME_BYTES],
}
mirrors_ksym_slot!(KsymSlot);

/// `struct ksym_batch`: the one value of the program's array.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct KsymBatch {
    count: u32,
    pad: u32,
    slots: [KsymSlot; BATCH],
}
mirrors_ksym_batch!(KsymBatch);

/// The compiled BPF object (built by agent/build.rs from bpf/ksym.bpf.c).
static KSYM_OBJ: &[u8] =
    crate::bpf::abi::include_bpf_object!(concat!(env!("OUT_DIR"), "/ksym.bpf.o"));

#[derive(Debug, thiserror::Error)]
pub enum KernelNamesError {
    #[error(
        "loading the kernel-name program (needs BPF_PROG_TYPE_SYSCALL, bpf_loop and bpf_snprintf)"
    )]
    Load(#[source] libbpf_rs::Error),
    #[error("the kernel-name object has no `{0}`")]
    Missing(&'static str),
    #[error("running the kernel-name program")]
    Run(#[source] libbpf_rs::Error),
}

/// What the kernel says of one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelName {
    /// The function (or BPF program) holding it.
    Named(String),
    /// No symbol holds it (`%ps` printed the address).
    NotASymbol,
    /// Not read: the name was longer than a slot, or formatting failed.
    Unread,
}

/// The loaded program; one per symbolizer, reused for every batch.
pub struct KernelNamer {
    object: Object,
}

impl KernelNamer {
    pub fn load() -> Result<Self, KernelNamesError> {
        let mut builder = ObjectBuilder::default();
        let open = builder
            .open_memory(KSYM_OBJ)
            .map_err(KernelNamesError::Load)?;
        let object = open.load().map_err(KernelNamesError::Load)?;
        Ok(Self { object })
    }

    /// What the kernel names each of `addrs`, in order.
    pub fn names(&mut self, addrs: &[u64]) -> Result<Vec<KernelName>, KernelNamesError> {
        let map = self
            .object
            .maps()
            .find(|m| m.name() == bpf::maps::KSYM_BATCHES)
            .ok_or(KernelNamesError::Missing(bpf::maps::KSYM_BATCHES))?;
        let mut progs = self.object.progs_mut();
        let prog = progs
            .find(|p| p.name() == bpf::programs::NAME_KERNEL_ADDRS)
            .ok_or(KernelNamesError::Missing(bpf::programs::NAME_KERNEL_ADDRS))?;
        let key = 0u32.to_ne_bytes();
        // ~34 KiB: on the heap.
        let mut batch: Box<KsymBatch> = Box::new(bytemuck::Zeroable::zeroed());
        let mut out = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(BATCH) {
            batch.count = chunk.len() as u32;
            for (slot, &addr) in batch.slots.iter_mut().zip(chunk) {
                *slot = KsymSlot {
                    addr,
                    ..bytemuck::Zeroable::zeroed()
                };
            }
            map.update(&key, bytemuck::bytes_of(&*batch), MapFlags::ANY)
                .map_err(KernelNamesError::Run)?;
            prog.test_run(ProgramInput::default())
                .map_err(KernelNamesError::Run)?;
            let value = map
                .lookup(&key, MapFlags::ANY)
                .map_err(KernelNamesError::Run)?
                .ok_or(KernelNamesError::Missing(bpf::maps::KSYM_BATCHES))?;
            let done: &KsymBatch = bytemuck::try_from_bytes(&value)
                .map_err(|_| KernelNamesError::Missing(bpf::maps::KSYM_BATCHES))?;
            out.extend(done.slots[..chunk.len()].iter().map(read_slot));
        }
        Ok(out)
    }
}

/// A slot's text as a name: `%ps` gives `name` or, in a module,
/// `name [module]` (the module is dropped, as the kallsyms table drops
/// it), and `0x…` where no symbol holds the address.
fn read_slot(slot: &KsymSlot) -> KernelName {
    // With its NUL; a negative errno, or longer than the slot: unread.
    let Ok(len) = usize::try_from(slot.len) else {
        return KernelName::Unread;
    };
    if len == 0 || len > NAME_BYTES {
        return KernelName::Unread;
    }
    let Ok(text) = std::str::from_utf8(&slot.name[..len - 1]) else {
        return KernelName::Unread;
    };
    if text.starts_with("0x") || text.is_empty() {
        return KernelName::NotASymbol;
    }
    let name = text.split_once(" [").map_or(text, |(name, _)| name);
    KernelName::Named(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::kernel_symbols::KernelSymbols;

    fn slot(text: &str, len: i64) -> KsymSlot {
        let mut s: KsymSlot = bytemuck::Zeroable::zeroed();
        s.name[..text.len()].copy_from_slice(text.as_bytes());
        s.len = len;
        s
    }

    #[test]
    fn slots_read_as_names() {
        let named = |t: &str| KernelName::Named(t.to_string());
        assert_eq!(
            read_slot(&slot("do_syscall_64", 14)),
            named("do_syscall_64")
        );
        assert_eq!(
            read_slot(&slot("nf_hook [nf_tables]", 20)),
            named("nf_hook")
        );
        assert_eq!(
            read_slot(&slot("0xffffffffc0001234", 19)),
            KernelName::NotASymbol
        );
        assert_eq!(read_slot(&slot("cut", 400)), KernelName::Unread);
        assert_eq!(read_slot(&slot("", -22)), KernelName::Unread);
    }

    /// Against the running kernel: every text address the kallsyms table
    /// names (function starts, a byte inside, the byte before the next
    /// symbol, across the whole text) gets the same name from the
    /// kernel's own lookup, in batches larger than one map value.
    #[test]
    fn the_kernel_names_addresses_as_kallsyms_does() {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let starts: Vec<u64> = kallsyms
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                matches!(f.next()?, "T" | "t").then_some(addr)
            })
            .filter(|&a| a != 0)
            .collect();
        assert!(
            starts.len() > 1000,
            "kallsyms readable with addresses (root)"
        );
        let table = KernelSymbols::parse(kallsyms.as_bytes(), "");
        let step = starts.len() / 300;
        let mut addrs = Vec::new();
        for w in starts.windows(2).step_by(step) {
            if w[1] > w[0] {
                addrs.extend([w[0], w[0] + (w[1] - w[0]) / 2, w[1] - 1]);
            }
        }
        let mut namer = KernelNamer::load().unwrap();
        let got = namer.names(&addrs).unwrap();
        assert_eq!(got.len(), addrs.len());
        let mut compared = 0;
        for (addr, name) in addrs.iter().zip(&got) {
            if let Some(want) = table.name(*addr) {
                assert_eq!(name, &KernelName::Named(want.to_string()), "{addr:#x}");
                compared += 1;
            }
        }
        assert!(compared > 600, "{compared} addresses compared");
        // Nothing holds address 1.
        assert_eq!(namer.names(&[1]).unwrap(), vec![KernelName::NotASymbol]);
    }
}

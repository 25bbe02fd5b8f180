//! Kernel function names for kernel stack frames, from `/proc/kallsyms`,
//! kept for the rest of the boot.
//!
//! Generating `/proc/kallsyms` (~120,000 text symbols, ~5 MB of text) costs
//! the kernel ~30–40 ms of CPU and innoprof the parse, at the end of every
//! recording with CPU samples: ~4 % of a 30 s default recording's agent CPU
//! on this VM. The kernel's text does not move within a boot (KASLR picks
//! its place at boot), so the parsed table is kept in the per-boot directory
//! ([`crate::run_dir`]) and reused by the same innoprof binary, as long as
//! the loaded modules are the same ones at the same addresses and sizes
//! (`/proc/modules`). BPF programs and trampolines also appear in
//! kallsyms, but outside the text ranges named here, so their coming and
//! going does not matter.
//!
//! kallsyms has no symbol sizes, so an address names the function starting
//! at or below it, and only inside core text, init text and module cores:
//! outside those ranges (a BPF program, a module unloaded since) the
//! preceding symbol would be whatever came before, and such addresses stay
//! unnamed instead. Without a readable kallsyms (or with addresses hidden,
//! all zero) nothing is named. A vmlinux with DWARF, where one exists, is
//! not read: kernel frames carry no inline frames.

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::run_dir::{self, BootAndBuild};

/// A kept table larger than this is not read (the real one is ~4.5 MB).
const MAX_KEPT_BYTES: u64 = 64 << 20;
const KEPT_FILE: &str = "kallsyms.syms";

#[derive(Debug, Default, PartialEq, Eq)]
pub struct KernelSymbols {
    /// Function starts, sorted; of several names at one address, the
    /// first kallsyms lists.
    starts: Vec<u64>,
    /// For each start, the offset of its name in `names`.
    name_at: Vec<u32>,
    /// Every name, each ended by a NUL.
    names: String,
    /// Text ranges: core text, init text, each module's core.
    ranges: Vec<(u64, u64)>,
}

impl KernelSymbols {
    /// The kept table of this boot, or one read of `/proc/kallsyms` (then
    /// kept for the next recording).
    pub fn load() -> Self {
        Self::load_in(run_dir::default_dir(), Path::new("/proc"))
    }

    fn load_in(dir: &Path, proc: &Path) -> Self {
        let modules = std::fs::read_to_string(proc.join("modules")).unwrap_or_default();
        let key = BootAndBuild::current().map(|build| Key {
            build,
            modules: modules_fingerprint(&modules),
        });
        let path = dir.join(KEPT_FILE);
        if let Some(key) = &key {
            if let Some(kept) = run_dir::read_own_file(dir, &path, MAX_KEPT_BYTES)
                .and_then(|bytes| decode(bytes, key))
            {
                return kept;
            }
        }
        let read = match std::fs::File::open(proc.join("kallsyms")) {
            // Line by line: the whole file is ~5 MB, held at the end of a
            // recording when the agent's memory peaks anyway.
            Ok(f) => Self::parse(std::io::BufReader::with_capacity(64 << 10, f), &modules),
            Err(_) => Self::default(),
        };
        // Hidden addresses (or no kallsyms) give an empty table: not kept,
        // the next recording may be allowed to see them.
        if let (Some(key), false) = (key, read.starts.is_empty()) {
            // A failure only means the next recording reads kallsyms again.
            let _ = run_dir::write_own_file(dir, &path, &encode(&read, key));
        }
        read
    }

    pub fn parse(mut kallsyms: impl std::io::BufRead, modules: &str) -> Self {
        let mut marks: Vec<(&'static str, u64)> = Vec::new();
        let mut starts: Vec<(u64, u32)> = Vec::new();
        let mut names = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            match kallsyms.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // `address type name [module]`
            let mut it = line.split_whitespace();
            let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            for mark in ["_stext", "_etext", "_sinittext", "_einittext"] {
                if name == mark {
                    marks.push((mark, addr));
                }
            }
            // Text symbols only: data names must not name a code address.
            if addr == 0 || !matches!(ty, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(at) = u32::try_from(names.len()) else {
                break;
            };
            names.push_str(name);
            names.push('\0');
            starts.push((addr, at));
        }
        // Stable: of equal addresses the first listed stays first.
        starts.sort_by_key(|&(addr, _)| addr);
        starts.dedup_by_key(|&mut (addr, _)| addr);
        let mark = |m: &str| marks.iter().find(|(n, _)| *n == m).map(|&(_, a)| a);
        let mut ranges = Vec::new();
        for (start, end) in [("_stext", "_etext"), ("_sinittext", "_einittext")] {
            if let (Some(s), Some(e)) = (mark(start), mark(end)) {
                ranges.push((s, e));
            }
        }
        // `name size refs deps state address`
        for line in modules.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(size), Some(addr)) = (f.get(1), f.get(5)) {
                let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap_or(0);
                if let (true, Ok(size)) = (addr != 0, size.parse::<u64>()) {
                    ranges.push((addr, addr + size));
                }
            }
        }
        names.shrink_to_fit();
        Self {
            starts: starts.iter().map(|&(a, _)| a).collect(),
            name_at: starts.iter().map(|&(_, at)| at).collect(),
            names,
            ranges,
        }
    }

    /// The function containing `ip`, if it is kernel or module text.
    pub fn name(&self, ip: u64) -> Option<&str> {
        if !self.ranges.iter().any(|&(s, e)| ip >= s && ip < e) {
            return None;
        }
        let i = self.starts.partition_point(|&addr| addr <= ip);
        let at = *self.name_at.get(i.checked_sub(1)?)?;
        let rest = self.names.get(at as usize..)?;
        rest.split('\0').next()
    }
}

/// What a kept table was read for: this boot and binary, these modules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Key {
    build: BootAndBuild,
    modules: Vec<(String, u64, u64)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    key: Key,
    ranges: Vec<(u64, u64)>,
    symbols: usize,
    names_len: usize,
}

/// Each module's name, size and address: what places its text. (Its
/// reference count and state change while it is used; not its text.)
fn modules_fingerprint(modules: &str) -> Vec<(String, u64, u64)> {
    modules
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let size = f.get(1)?.parse().ok()?;
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            Some((f.first()?.to_string(), size, addr))
        })
        .collect()
}

/// A JSON header line, then the starts (8 bytes each, little-endian), the
/// name offsets (4 bytes each), the names.
fn encode(table: &KernelSymbols, key: Key) -> Vec<u8> {
    let header = Header {
        key,
        ranges: table.ranges.clone(),
        symbols: table.starts.len(),
        names_len: table.names.len(),
    };
    let mut out = serde_json::to_vec(&header).expect("plain data serializes");
    out.push(b'\n');
    out.reserve(table.starts.len() * 12 + table.names.len());
    out.extend(table.starts.iter().flat_map(|a| a.to_le_bytes()));
    out.extend(table.name_at.iter().flat_map(|a| a.to_le_bytes()));
    out.extend_from_slice(table.names.as_bytes());
    out
}

/// The table of a kept file, if it is whole, well formed and was read for
/// `key`.
fn decode(mut bytes: Vec<u8>, key: &Key) -> Option<KernelSymbols> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    if header.key != *key {
        return None;
    }
    let n = header.symbols;
    let body = newline + 1;
    let names_start = body.checked_add(n.checked_mul(12)?)?;
    if bytes.len() != names_start.checked_add(header.names_len)? {
        return None;
    }
    let word = |at: usize, len: usize| &bytes[at..at + len];
    let starts: Vec<u64> = (0..n)
        .map(|i| u64::from_le_bytes(word(body + i * 8, 8).try_into().expect("8 bytes")))
        .collect();
    let name_at: Vec<u32> = (0..n)
        .map(|i| u32::from_le_bytes(word(body + n * 8 + i * 4, 4).try_into().expect("4 bytes")))
        .collect();
    // Sorted and distinct, as `parse` leaves them; names inside the names
    // and each ended (checked below, after the names are taken).
    if !starts.windows(2).all(|w| w[0] < w[1])
        || name_at.iter().any(|&at| at as usize >= header.names_len)
    {
        return None;
    }
    // The names in place: moved to the front of the buffer, no copy.
    bytes.drain(..names_start);
    bytes.shrink_to_fit();
    let names = String::from_utf8(bytes).ok()?;
    if !names.is_empty() && !names.ends_with('\0') {
        return None;
    }
    Some(KernelSymbols {
        starts,
        name_at,
        names,
        ranges: header.ranges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where tests keep a table: never the real per-boot one.
    fn test_dir(d: &tempfile::TempDir) -> PathBuf {
        d.path().join("run")
    }

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t early_helper
ffffffff81000180 D some_data
ffffffff81000200 T schedule
ffffffff81100000 T _etext
ffffffffa0001000 t bpf_prog_1234_x\t[bpf]
ffffffffc0100000 t mod_fn\t[virtio]
";
    const MODULES: &str = "virtio 4096 1 - Live 0xffffffffc0100000\n";

    /// Names come from the function at or below the address, text only,
    /// inside the text ranges; a data symbol or an address past the text
    /// (a BPF program) names nothing.
    #[test]
    fn kernel_symbols_name_text_inside_its_ranges() {
        let k = KernelSymbols::parse(KALLSYMS.as_bytes(), MODULES);
        assert_eq!(k.name(0xffffffff81000000), Some("_stext"));
        assert_eq!(k.name(0xffffffff81000150), Some("early_helper"));
        // `some_data` is not code: the text symbol before it names it.
        assert_eq!(k.name(0xffffffff810001a0), Some("early_helper"));
        assert_eq!(k.name(0xffffffff81000fff), Some("schedule"));
        assert_eq!(k.name(0xffffffffa0001010), None);
        assert_eq!(k.name(0xffffffffc0100010), Some("mod_fn"));
        assert_eq!(k.name(0xffffffffc0101000), None);
        // Hidden addresses (all zero, no CAP_SYSLOG) name nothing.
        let hidden = KernelSymbols::parse(
            "0000000000000000 T _stext\n0000000000000000 T schedule\n".as_bytes(),
            "",
        );
        assert_eq!(hidden.name(0xffffffff81000200), None);
    }

    /// A fake /proc with the fixture's kallsyms and modules.
    fn fake_proc(d: &tempfile::TempDir, kallsyms: &str, modules: &str) -> PathBuf {
        let proc = d.path().join("proc");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(proc.join("kallsyms"), kallsyms).unwrap();
        std::fs::write(proc.join("modules"), modules).unwrap();
        proc
    }

    /// The first load reads kallsyms and keeps the table; the next one
    /// gets the very same table from the kept file without reading
    /// kallsyms (here: gone); another module list reads kallsyms again.
    #[test]
    fn the_table_is_kept_for_the_same_modules_only() {
        let d = tempfile::tempdir().unwrap();
        let (dir, proc) = (test_dir(&d), fake_proc(&d, KALLSYMS, MODULES));
        let read = KernelSymbols::load_in(&dir, &proc);
        assert_eq!(read, KernelSymbols::parse(KALLSYMS.as_bytes(), MODULES));
        assert!(dir.join(KEPT_FILE).is_file());

        std::fs::write(proc.join("kallsyms"), "").unwrap();
        // The module's use count changed, not its text: still kept.
        std::fs::write(proc.join("modules"), MODULES.replace(" 1 - ", " 3 - ")).unwrap();
        assert_eq!(KernelSymbols::load_in(&dir, &proc), read);

        // Reloaded elsewhere: kallsyms is read again (now empty: nothing
        // named, and an empty table is not kept).
        std::fs::write(
            proc.join("modules"),
            MODULES.replace("c0100000", "c0200000"),
        )
        .unwrap();
        let reread = KernelSymbols::load_in(&dir, &proc);
        assert_eq!(reread.name(0xffffffff81000200), None);
        assert_eq!(KernelSymbols::load_in(&dir, &proc), reread, "still nothing");
    }

    /// A kept file cut short, out of order or with a name offset past the
    /// names is not used.
    #[test]
    fn a_damaged_kept_table_is_refused() {
        let k = KernelSymbols::parse(KALLSYMS.as_bytes(), MODULES);
        let key = Key {
            build: BootAndBuild::current().unwrap(),
            modules: modules_fingerprint(MODULES),
        };
        let good = encode(&k, key.clone());
        assert_eq!(decode(good.clone(), &key).as_ref(), Some(&k));
        assert_eq!(decode(good[..good.len() - 1].to_vec(), &key), None);
        let body = good.iter().position(|&b| b == b'\n').unwrap() + 1;
        let mut swapped = good.clone();
        swapped[body..body + 16].rotate_left(8);
        assert_eq!(decode(swapped, &key), None);
        let mut far = good.clone();
        let n = k.starts.len();
        far[body + n * 8..body + n * 8 + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(far, &key), None);
        let other = Key {
            modules: Vec::new(),
            ..key
        };
        assert_eq!(decode(good, &other), None);
    }

    /// This host's table, kept and reloaded, names this host's kernel
    /// addresses as a fresh read does.
    #[test]
    fn this_hosts_table_survives_keeping() {
        let d = tempfile::tempdir().unwrap();
        let dir = test_dir(&d);
        let fresh = KernelSymbols::load_in(&dir, Path::new("/proc"));
        assert!(
            !fresh.starts.is_empty(),
            "/proc/kallsyms shows no addresses: the tests run as root"
        );
        let kept = KernelSymbols::load_in(&dir, Path::new("/proc"));
        assert_eq!(kept, fresh);
    }
}

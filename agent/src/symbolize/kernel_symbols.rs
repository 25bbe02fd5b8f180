//! Kernel function names for kernel stack frames, from `/proc/kallsyms`,
//! kept across boots: the fallback where the kernel cannot name the
//! addresses itself ([`crate::symbolize::kernel_names`], which needs `bpf_loop`), and
//! for a name longer than its slot there.
//!
//! Generating `/proc/kallsyms` (~120,000 text symbols, ~5 MB of text) costs
//! the kernel ~30–40 ms of CPU and innoprof the parse, at the end of every
//! recording with CPU samples: ~4 % of a 30 s default recording's agent CPU
//! on this VM, ~0.06 s of a first recording after a reboot. Where a
//! symbol sits relative to its text's start is fixed by the kernel's build
//! (and a module's by its file); KASLR only moves the core text as a whole
//! at boot, and each module's text where it loads. So the parsed table is
//! kept in the kept directory ([`crate::persist`]) with the starts it was
//! read at (`_stext`, each module's base) and reused by the same innoprof
//! binary for the same kernel build (its GNU build-id, from
//! `/sys/kernel/notes`; without one, for this boot only) with the same
//! modules (names and sizes, `/proc/modules`), moved by how far each text
//! moved: finding where `_stext` is now reads only the head of
//! `/proc/kallsyms`. BPF programs and trampolines also appear in kallsyms,
//! but outside the text ranges named here, so their coming and going does
//! not matter.
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

use crate::persist::{self, Build};

/// A kept table larger than this is not read (the real one is ~4.5 MB).
const MAX_KEPT_BYTES: u64 = 64 << 20;
const KEPT_FILE: &str = "kallsyms.syms";
/// How much of `/proc/kallsyms` is read to find `_stext` (it is among the
/// first lines, after the per-CPU variables' few hundred).
const HEAD_BYTES: u64 = 1 << 20;

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
    /// Where each range's text starts, which moves it: `_stext` for the
    /// core and init text, the module's base for a module's.
    anchors: Vec<Anchor>,
}

/// What moves a text range: the kernel's core text (`_stext`) or a
/// module's (its base in `/proc/modules`), and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Anchor {
    /// None: the kernel's core text.
    module: Option<String>,
    at: u64,
}

impl KernelSymbols {
    /// The kept table of this kernel build, moved to where its text is
    /// now, or one read of `/proc/kallsyms` (then kept for the next
    /// recording).
    pub fn load() -> Self {
        Self::load_in(
            persist::kept_dir(),
            Path::new("/proc"),
            Path::new("/sys/kernel/notes"),
        )
    }

    fn load_in(dir: &Path, proc: &Path, notes: &Path) -> Self {
        let modules = std::fs::read_to_string(proc.join("modules")).unwrap_or_default();
        let key = Build::current().and_then(|build| {
            Some(Key {
                build,
                kernel: kernel_build(notes)?,
                modules: modules_fingerprint(&modules),
            })
        });
        let path = dir.join(KEPT_FILE);
        if let Some(key) = &key {
            if let Some(kept) = persist::read_own_file(dir, &path, MAX_KEPT_BYTES)
                .and_then(|bytes| decode(bytes, key))
            {
                let now = anchors_now(proc, &modules);
                if let Some(moved) = now.and_then(|now| kept.moved_to(&now)) {
                    return moved;
                }
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
            let _ = persist::write_own_file(dir, &path, &encode(&read, key));
        }
        read
    }

    pub fn parse(mut kallsyms: impl std::io::BufRead, modules: &str) -> Self {
        let mut marks: Vec<(&'static str, u64)> = Vec::new();
        let mut starts: Vec<(u64, u32)> = Vec::new();
        let mut names = String::new();
        let mut line: Vec<u8> = Vec::with_capacity(256);
        // Bytes, not `read_line`: the ~120,000 lines were checked as UTF-8
        // and split as text, ~half of parsing's time. Names are ASCII;
        // a line that is not is skipped.
        loop {
            line.clear();
            match kallsyms.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // `address type name [module]`
            let mut it = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|f| !f.is_empty());
            let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let Some(addr) = std::str::from_utf8(addr)
                .ok()
                .and_then(|a| u64::from_str_radix(a, 16).ok())
            else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            for mark in ["_stext", "_etext", "_sinittext", "_einittext"] {
                if name == mark {
                    marks.push((mark, addr));
                }
            }
            // Text symbols only: data names must not name a code address.
            if addr == 0 || !matches!(ty, b"t" | b"T" | b"w" | b"W") {
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
        // (Starts outside every range are dropped below, once the ranges
        // are known: they never name anything.)
        starts.dedup_by_key(|&mut (addr, _)| addr);
        let mark = |m: &str| marks.iter().find(|(n, _)| *n == m).map(|&(_, a)| a);
        let mut ranges = Vec::new();
        for (start, end) in [("_stext", "_etext"), ("_sinittext", "_einittext")] {
            if let (Some(s), Some(e)) = (mark(start), mark(end)) {
                ranges.push((s, e));
            }
        }
        let mut anchors = Vec::new();
        if let Some(stext) = mark("_stext") {
            let core = ranges.len();
            anchors.resize(
                core,
                Anchor {
                    module: None,
                    at: stext,
                },
            );
        } else {
            // No `_stext`: the core text cannot be placed later; dropped.
            ranges.clear();
        }
        for (name, size, at) in modules_placed(modules) {
            ranges.push((at, at + size));
            anchors.push(Anchor {
                module: Some(name),
                at,
            });
        }
        starts.retain(|&(addr, _)| ranges.iter().any(|&(s, e)| addr >= s && addr < e));
        names.shrink_to_fit();
        Self {
            starts: starts.iter().map(|&(a, _)| a).collect(),
            name_at: starts.iter().map(|&(_, at)| at).collect(),
            names,
            ranges,
            anchors,
        }
    }

    /// This table with each text range moved from where it was read to
    /// where `now` says its text starts; None if a range's text is not in
    /// `now` (another module list) or a move overflows. Starts outside
    /// every range (BPF programs) are dropped: never named.
    fn moved_to(&self, now: &[Anchor]) -> Option<Self> {
        let anchors: Vec<Anchor> = self
            .anchors
            .iter()
            .map(|a| now.iter().find(|n| n.module == a.module).cloned())
            .collect::<Option<_>>()?;
        let delta: Vec<i128> = anchors
            .iter()
            .zip(&self.anchors)
            .map(|(n, a)| i128::from(n.at) - i128::from(a.at))
            .collect();
        let shift = |addr: u64, d: i128| u64::try_from(i128::from(addr) + d).ok();
        let mut moved: Vec<(u64, u32)> = Vec::with_capacity(self.starts.len());
        for (&addr, &at) in self.starts.iter().zip(&self.name_at) {
            if let Some(i) = self.ranges.iter().position(|&(s, e)| addr >= s && addr < e) {
                moved.push((shift(addr, delta[i])?, at));
            }
        }
        moved.sort_by_key(|&(addr, _)| addr);
        moved.dedup_by_key(|&mut (addr, _)| addr);
        let ranges = self
            .ranges
            .iter()
            .zip(&delta)
            .map(|(&(s, e), &d)| Some((shift(s, d)?, shift(e, d)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            starts: moved.iter().map(|&(a, _)| a).collect(),
            name_at: moved.iter().map(|&(_, at)| at).collect(),
            names: self.names.clone(),
            ranges,
            anchors,
        })
    }

    /// The function containing `ip`, if it is kernel or module text: the
    /// symbol at or below it in the same text range.
    pub fn name(&self, ip: u64) -> Option<&str> {
        let &(start, _) = self.ranges.iter().find(|&&(s, e)| ip >= s && ip < e)?;
        let i = self
            .starts
            .partition_point(|&addr| addr <= ip)
            .checked_sub(1)?;
        if self.starts[i] < start {
            return None;
        }
        let at = *self.name_at.get(i)?;
        let rest = self.names.get(at as usize..)?;
        rest.split('\0').next()
    }
}

/// What a kept table was read for: this innoprof binary, this kernel
/// build, these modules (names and sizes; where they load moves their
/// text, see [`KernelSymbols::moved_to`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Key {
    build: Build,
    kernel: String,
    modules: Vec<(String, u64)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    key: Key,
    ranges: Vec<(u64, u64)>,
    anchors: Vec<Anchor>,
    symbols: usize,
    names_len: usize,
}

/// The kernel build: `build-id:HEX` from the GNU build-id note in
/// `notes` (`/sys/kernel/notes`), else `boot:ID` (this boot only).
fn kernel_build(notes: &Path) -> Option<String> {
    if let Ok(bytes) = std::fs::read(notes) {
        // The kernel's own notes, in its (this host's) byte order, 4-aligned.
        use object::read::elf::NoteIterator;
        let endian = object::Endianness::default();
        if let Ok(mut it) =
            NoteIterator::<object::elf::FileHeader64<object::Endianness>>::new(endian, 4, &bytes)
        {
            while let Ok(Some(note)) = it.next() {
                if note.name() == b"GNU" && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID {
                    return Some(format!(
                        "build-id:{}",
                        crate::resolve::elf::hex(note.desc())
                    ));
                }
            }
        }
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(format!("boot:{}", boot.trim()))
}

/// Each module's name and size: what the kept table holds for. (Its
/// reference count and state change while it is used; not its text.)
fn modules_fingerprint(modules: &str) -> Vec<(String, u64)> {
    modules_placed(modules)
        .into_iter()
        .map(|(name, size, _)| (name, size))
        .collect()
}

/// `/proc/modules`' loaded modules: name, size and base (`name size refs
/// deps state address`), those with an address only.
fn modules_placed(modules: &str) -> Vec<(String, u64, u64)> {
    modules
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let size = f.get(1)?.parse().ok()?;
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            let name = f.first()?.to_string();
            (addr != 0).then_some((name, size, addr))
        })
        .collect()
}

/// Where the texts start now: `_stext`, from the head of `/proc/kallsyms`
/// (hidden, zero, or not in the first [`HEAD_BYTES`]: None), and each
/// module's base.
fn anchors_now(proc: &Path, modules: &str) -> Option<Vec<Anchor>> {
    use std::io::{BufRead, Read};
    let f = std::fs::File::open(proc.join("kallsyms")).ok()?;
    let head = std::io::BufReader::with_capacity(16 << 10, f.take(HEAD_BYTES));
    let stext = head.lines().map_while(Result::ok).find_map(|line| {
        let mut it = line.split_whitespace();
        let (addr, _, name) = (it.next()?, it.next()?, it.next()?);
        (name == "_stext").then(|| u64::from_str_radix(addr, 16).ok())?
    })?;
    if stext == 0 {
        return None;
    }
    Some(
        std::iter::once(Anchor {
            module: None,
            at: stext,
        })
        .chain(
            modules_placed(modules)
                .into_iter()
                .map(|(name, _, at)| Anchor {
                    module: Some(name),
                    at,
                }),
        )
        .collect(),
    )
}

/// A JSON header line, then the starts (8 bytes each, little-endian), the
/// name offsets (4 bytes each), the names.
fn encode(table: &KernelSymbols, key: Key) -> Vec<u8> {
    let header = Header {
        key,
        ranges: table.ranges.clone(),
        anchors: table.anchors.clone(),
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
    // One anchor per range.
    if header.ranges.len() != header.anchors.len() {
        return None;
    }
    Some(KernelSymbols {
        starts,
        name_at,
        names,
        ranges: header.ranges,
        anchors: header.anchors,
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

    /// A fake /proc with the fixture's kallsyms and modules, and a fake
    /// `/sys/kernel/notes` with a build-id note (after another note).
    fn fake_proc(d: &tempfile::TempDir, kallsyms: &str, modules: &str) -> (PathBuf, PathBuf) {
        let proc = d.path().join("proc");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(proc.join("kallsyms"), kallsyms).unwrap();
        std::fs::write(proc.join("modules"), modules).unwrap();
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 1u32, &[7u8; 6][..]),
            (b"GNU\0", 3, &[0xab; 20]),
        ] {
            notes.extend((name.len() as u32).to_ne_bytes());
            notes.extend((desc.len() as u32).to_ne_bytes());
            notes.extend(kind.to_ne_bytes());
            notes.extend(name);
            notes.extend(desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        let notes_path = d.path().join("notes");
        std::fs::write(&notes_path, notes).unwrap();
        (proc, notes_path)
    }

    /// The kernel build is the note's build-id; another note before it is
    /// stepped over.
    #[test]
    fn the_kernel_build_is_its_build_id() {
        let d = tempfile::tempdir().unwrap();
        let (_, notes) = fake_proc(&d, KALLSYMS, MODULES);
        assert_eq!(
            kernel_build(&notes).unwrap(),
            format!("build-id:{}", "ab".repeat(20))
        );
        let this_host = kernel_build(Path::new("/sys/kernel/notes")).unwrap();
        assert!(this_host.starts_with("build-id:"), "{this_host}");
    }

    /// The first load reads kallsyms and keeps the table; the next one,
    /// with only the head of kallsyms there (`_stext`), gets the same
    /// table; after a reboot that moved the core text and the module
    /// elsewhere (KASLR), the kept table is moved with them and names the
    /// new addresses as a full read of the moved kallsyms does; another
    /// module list reads kallsyms again.
    #[test]
    fn the_table_is_kept_across_boots_and_moved_with_the_text() {
        let d = tempfile::tempdir().unwrap();
        let dir = test_dir(&d);
        let (proc, notes) = fake_proc(&d, KALLSYMS, MODULES);
        let read = KernelSymbols::load_in(&dir, &proc, &notes);
        assert_eq!(read, KernelSymbols::parse(KALLSYMS.as_bytes(), MODULES));
        assert!(dir.join(KEPT_FILE).is_file());

        // Only the head: what finding `_stext` reads.
        std::fs::write(proc.join("kallsyms"), "ffffffff81000000 T _stext\n").unwrap();
        // The module's use count changed, not its text: still kept.
        std::fs::write(proc.join("modules"), MODULES.replace(" 1 - ", " 3 - ")).unwrap();
        let kept = KernelSymbols::load_in(&dir, &proc, &notes);
        assert_eq!(kept.name(0xffffffff81000150), Some("early_helper"));
        assert_eq!(kept.name(0xffffffffc0100010), Some("mod_fn"));

        // Another boot: core text 0x2400000 higher, the module 0x300000.
        let moved_kallsyms = KALLSYMS
            .replace("ffffffff810", "ffffffff834")
            .replace("ffffffff811", "ffffffff835")
            .replace("ffffffffc01", "ffffffffc04");
        let moved_modules = MODULES.replace("c0100000", "c0400000");
        std::fs::write(proc.join("kallsyms"), "ffffffff83400000 T _stext\n").unwrap();
        std::fs::write(proc.join("modules"), &moved_modules).unwrap();
        let moved = KernelSymbols::load_in(&dir, &proc, &notes);
        let fresh = KernelSymbols::parse(moved_kallsyms.as_bytes(), &moved_modules);
        for ip in [
            0xffffffff83400000,
            0xffffffff83400150,
            0xffffffff834001a0,
            0xffffffff83400fff,
            0xffffffff834ffffe,
            0xffffffffc0400010,
            0xffffffffc0401000,
            0xffffffff81000150,
            0xffffffffc0100010,
        ] {
            assert_eq!(moved.name(ip), fresh.name(ip), "{ip:x}");
        }
        assert_eq!(moved.name(0xffffffffc0400010), Some("mod_fn"));
        assert_eq!(
            moved.name(0xffffffff81000150),
            None,
            "the old place names nothing"
        );

        // Another module loaded: kallsyms is read again (now only its
        // head: the core's one symbol, nothing else named).
        std::fs::write(
            proc.join("modules"),
            format!("{moved_modules}extra 8192 0 - Live 0xffffffffc0500000\n"),
        )
        .unwrap();
        let reread = KernelSymbols::load_in(&dir, &proc, &notes);
        assert_eq!(reread.name(0xffffffffc0400010), None);
    }

    /// A kept file cut short, out of order or with a name offset past the
    /// names is not used.
    #[test]
    fn a_damaged_kept_table_is_refused() {
        let k = KernelSymbols::parse(KALLSYMS.as_bytes(), MODULES);
        let key = Key {
            build: Build::current().unwrap(),
            kernel: "build-id:ab".into(),
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
        let notes = Path::new("/sys/kernel/notes");
        let fresh = KernelSymbols::load_in(&dir, Path::new("/proc"), notes);
        assert!(
            !fresh.starts.is_empty(),
            "/proc/kallsyms shows no addresses: the tests run as root"
        );
        let kept = KernelSymbols::load_in(&dir, Path::new("/proc"), notes);
        assert_eq!(kept, fresh);
    }
}

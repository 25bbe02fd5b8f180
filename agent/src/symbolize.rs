//! User stack addresses to names: blazesym over the ELF files the target
//! had mapped (DWARF where present, for inline frames), demangled.
//!
//! The memory map is snapshotted while the target runs, and symbolisation
//! goes by (file, file offset), so stacks still resolve after the target
//! exited. Frames that cannot be named are `module+0xoffset`, or
//! `[unknown]` outside any file mapping: never a guessed name.

use std::collections::HashMap;
use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

#[derive(Debug, Clone)]
struct Region {
    start: u64,
    end: u64,
    file_offset: u64,
    path: String,
}

/// File-backed executable mappings of a process.
#[derive(Debug, Clone, Default)]
pub struct ProcessMaps {
    pid: u32,
    regions: Vec<Region>,
}

impl ProcessMaps {
    pub fn read(pid: u32) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Ok(Self {
            pid,
            regions: text.lines().filter_map(parse_maps_line).collect(),
        })
    }

    fn lookup(&self, ip: u64) -> Option<(&Region, u64)> {
        self.regions
            .iter()
            .find(|r| ip >= r.start && ip < r.end)
            .map(|r| (r, ip - r.start + r.file_offset))
    }

    /// Where to open a mapped file: through the target's root while it
    /// lives (containers), else the path as named.
    fn open_path(&self, path: &str) -> PathBuf {
        let rooted = PathBuf::from(format!("/proc/{}/root{path}", self.pid));
        if rooted.exists() {
            rooted
        } else {
            PathBuf::from(path)
        }
    }
}

fn parse_maps_line(line: &str) -> Option<Region> {
    let mut it = line.split_whitespace();
    let range = it.next()?;
    let perms = it.next()?;
    let offset = it.next()?;
    let _dev = it.next()?;
    let _inode = it.next()?;
    let path = it.collect::<Vec<_>>().join(" ");
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some(Region {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        file_offset: u64::from_str_radix(offset, 16).ok()?,
        path,
    })
}

pub struct StackSymbolizer {
    maps: ProcessMaps,
    symbolizer: Symbolizer,
    /// Address (already adjusted) → frames at that address, outermost first.
    cache: HashMap<u64, Vec<String>>,
}

impl StackSymbolizer {
    pub fn new(maps: ProcessMaps) -> Self {
        let symbolizer = Symbolizer::builder()
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .enable_code_info(false)
            .build();
        Self {
            maps,
            symbolizer,
            cache: HashMap::new(),
        }
    }

    /// Names a stack (innermost first, as BPF gives it) as frames root→leaf.
    /// `exact_first`: the first address is the probed instruction itself;
    /// every other address is a return address, looked up at `ip - 1` so it
    /// lands inside the call instruction (and its inline context).
    pub fn frames(&mut self, ips: &[u64], exact_first: bool) -> Vec<String> {
        let adjusted: Vec<u64> = ips
            .iter()
            .enumerate()
            .map(|(i, &ip)| {
                if i == 0 && exact_first {
                    ip
                } else {
                    ip.saturating_sub(1)
                }
            })
            .collect();
        self.resolve(&adjusted);
        adjusted
            .iter()
            .rev()
            .flat_map(|ip| self.cache[ip].clone())
            .collect()
    }

    /// Batch-resolves addresses not yet cached, one blazesym call per file.
    fn resolve(&mut self, ips: &[u64]) {
        let mut by_file: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
        for &ip in ips {
            if self.cache.contains_key(&ip) {
                continue;
            }
            match self.maps.lookup(ip) {
                Some((region, off)) => by_file
                    .entry(region.path.clone())
                    .or_default()
                    .push((ip, off)),
                None => {
                    self.cache.insert(ip, vec!["[unknown]".into()]);
                }
            }
        }
        for (path, pairs) in by_file {
            let module = path.rsplit('/').next().unwrap_or(&path).to_string();
            let offsets: Vec<u64> = pairs.iter().map(|(_, off)| *off).collect();
            let src = Source::Elf(Elf::new(self.maps.open_path(&path)));
            let results = self
                .symbolizer
                .symbolize(&src, Input::FileOffset(&offsets))
                .unwrap_or_default();
            for (i, (ip, off)) in pairs.iter().enumerate() {
                let frames = match results.get(i) {
                    Some(Symbolized::Sym(sym)) => {
                        let mut f = vec![sym.name.to_string()];
                        f.extend(
                            sym.inlined
                                .iter()
                                .map(|inl| format!("{} [inlined]", inl.name)),
                        );
                        f
                    }
                    _ => vec![format!("{module}+{off:#x}")],
                };
                self.cache.insert(*ip, frames);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executable_file_mappings_only() {
        let r =
            parse_maps_line("55d0c0a00000-55d0c1200000 r-xp 00200000 fd:01 123 /usr/sbin/mariadbd")
                .unwrap();
        assert_eq!(
            (r.start, r.end, r.file_offset),
            (0x55d0c0a00000, 0x55d0c1200000, 0x200000)
        );
        assert_eq!(r.path, "/usr/sbin/mariadbd");
        assert!(parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]").is_none());
        assert!(parse_maps_line("7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]").is_none());
        assert!(parse_maps_line("7f00-7f10 r--p 00000000 fd:01 5 /lib/libc.so.6").is_none());
    }

    /// Symbolises an address of this very test binary.
    #[test]
    fn names_a_function_of_this_process() {
        #[inline(never)]
        #[no_mangle]
        extern "C" fn innoprof_symbolize_probe_target() -> u64 {
            std::hint::black_box(7)
        }
        let ip = innoprof_symbolize_probe_target as *const () as u64;
        let mut s = StackSymbolizer::new(ProcessMaps::read(std::process::id()).unwrap());
        let frames = s.frames(&[ip], true);
        assert!(
            frames
                .last()
                .unwrap()
                .contains("innoprof_symbolize_probe_target"),
            "{frames:?}"
        );
        assert_eq!(s.frames(&[1], true), vec!["[unknown]".to_string()]);
    }
}

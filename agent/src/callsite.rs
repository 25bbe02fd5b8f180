//! Naming call sites: the BPF side keeps only the caller's `__FILE__`
//! pointer and `__LINE__`; the string is read here, once per pointer, from
//! the target's memory (or from the binary when the target is gone and
//! its addresses are the file's own, i.e. not position independent).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;

use crate::bpf_abi::{Callsite, SiteVal};
use crate::resolve::ElfImage;

/// Longest file name read; InnoDB's `__FILE__` are build paths.
const MAX_PATH: usize = 512;

pub struct CallsiteNamer<'a> {
    mem: Option<std::fs::File>,
    image: &'a ElfImage,
    files: HashMap<u64, Option<String>>,
}

impl<'a> CallsiteNamer<'a> {
    pub fn new(pid: u32, image: &'a ElfImage) -> Self {
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok();
        Self {
            mem,
            image,
            files: HashMap::new(),
        }
    }

    /// The full `__FILE__` string, if it could be read.
    pub fn file(&mut self, ptr: u64) -> Option<String> {
        if let Some(f) = self.files.get(&ptr) {
            return f.clone();
        }
        let from_mem = self.mem.as_ref().and_then(|m| {
            let mut buf = vec![0u8; MAX_PATH];
            let n = m.read_at(&mut buf, ptr).ok()?;
            c_string(&buf[..n])
        });
        let name = from_mem.or_else(|| {
            (!self.image.position_independent)
                .then(|| self.image.bytes_at(ptr, MAX_PATH).and_then(c_string))
                .flatten()
        });
        self.files.insert(ptr, name.clone());
        name
    }

    /// `btr0cur.cc:304`, the form SHOW ENGINE INNODB STATUS uses.
    pub fn label(&mut self, site: Callsite) -> String {
        match self.file(site.file) {
            Some(f) => format!("{}:{}", f.rsplit('/').next().unwrap_or(&f), site.line),
            None => format!("{:#x}:{}", site.file, site.line),
        }
    }
}

/// Labels remembered across reads, for readers that run while the probes
/// stay attached (interval series, exporter): each read names only the
/// call sites it has not seen before.
#[derive(Debug, Default)]
pub struct LabelCache {
    known: HashMap<Callsite, String>,
}

impl LabelCache {
    /// A probe's call sites summed per label: two `__FILE__` pointers (a
    /// header's name in two translation units) can name the same line.
    pub fn by_label(
        &mut self,
        sites: impl Iterator<Item = (Callsite, SiteVal)>,
        namer: &mut CallsiteNamer,
    ) -> BTreeMap<String, SiteVal> {
        let mut out: BTreeMap<String, SiteVal> = BTreeMap::new();
        for (site, val) in sites {
            let label = self
                .known
                .entry(site)
                .or_insert_with(|| namer.label(site))
                .clone();
            let sum = out.entry(label).or_default();
            sum.calls += val.calls;
            sum.wait_ns_total += val.wait_ns_total;
            sum.wait_ns_max = sum.wait_ns_max.max(val.wait_ns_max);
        }
        out
    }
}

/// A NUL-terminated, printable string at the start of `bytes`.
fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|b| *b == 0)?;
    let s = &bytes[..end];
    (!s.is_empty() && s.iter().all(|b| (0x20..0x7f).contains(b)))
        .then(|| String::from_utf8_lossy(s).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strings_from_own_memory() {
        static FILE: &[u8] = b"/build/storage/innobase/btr/btr0cur.cc\0";
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let mut namer = CallsiteNamer::new(std::process::id(), &image);
        let site = Callsite {
            file: FILE.as_ptr() as u64,
            line: 304,
            latch: 0,
        };
        assert_eq!(namer.label(site), "btr0cur.cc:304");
        assert_eq!(
            namer.file(site.file).as_deref(),
            Some("/build/storage/innobase/btr/btr0cur.cc")
        );
        assert_eq!(
            namer.label(Callsite {
                file: 8,
                line: 1,
                latch: 0,
            }),
            "0x8:1"
        );
    }

    #[test]
    fn c_strings() {
        assert_eq!(c_string(b"a.cc\0zz").as_deref(), Some("a.cc"));
        assert_eq!(c_string(b"no terminator"), None);
        assert_eq!(c_string(b"\x01bad\0"), None);
        assert_eq!(c_string(b"\0"), None);
    }
}

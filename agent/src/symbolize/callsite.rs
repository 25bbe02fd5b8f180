//! Naming call sites: the BPF side keeps only the caller's `__FILE__`
//! pointer and `__LINE__`; the string is read here, once per pointer, from
//! the target's memory (or from the binary when the target is gone and
//! its addresses are the file's own, i.e. not position independent).
//!
//! Only the server binary's own read-only mappings are ever read, and never
//! past their end: a `__FILE__` literal lives there, while query text and
//! row data live in writable memory (heap, stacks, buffer pool). A pointer
//! anywhere else is labelled by its address, not followed.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;

use crate::bpf::abi::{Callsite, SiteVal};
use crate::resolve::lines::SourceLines;
use crate::resolve::ElfImage;

/// Longest file name read; InnoDB's `__FILE__` are build paths.
const MAX_PATH: usize = 512;

pub struct CallsiteNamer<'a> {
    mem: Option<std::fs::File>,
    /// The binary's non-writable mappings in the target: [start, end).
    readable: Vec<(u64, u64)>,
    image: &'a ElfImage,
    files: HashMap<u64, Option<String>>,
    /// Made on the first creation site named (the image indexes its
    /// DWARF units once, see `ElfImage::unit_index`).
    lines: Option<Option<SourceLines<'a>>>,
    /// Loaded on the first creation site named.
    creators: Option<KeptCreators>,
}

/// The functions that created latches, by (`__FILE__`, line): found in
/// the line tables (~10 ms of a recording's end on MariaDB 10.2.11, whose
/// rw-locks are named by creation site) for a result that depends only
/// on the DWARF file and innoprof's code, so kept across boots
/// ([`crate::persist`], `creators-MAJOR-MINOR-INODE.json`) for the very
/// same DWARF file read by the same innoprof binary.
#[derive(Debug, Default)]
struct KeptCreators {
    key: Option<crate::persist::FileKey>,
    found: HashMap<(String, u32), Option<String>>,
    added: bool,
}

/// A kept file larger than this is not read (a few KB in practice).
const MAX_KEPT_BYTES: u64 = 1 << 20;
/// Past this many kept files, the least recently used makes room.
const MAX_KEPT_FILES: usize = 256;
const KEPT_PREFIX: &str = "creators";

impl KeptCreators {
    fn load(key: Option<crate::persist::FileKey>, dir: &std::path::Path) -> Self {
        type Kept = Vec<(String, u32, Option<String>)>;
        let kept: Kept = key
            .as_ref()
            .and_then(|k| crate::persist::load_json(dir, k, KEPT_PREFIX, MAX_KEPT_BYTES))
            .unwrap_or_default();
        Self {
            key,
            found: kept.into_iter().map(|(f, l, c)| ((f, l), c)).collect(),
            added: false,
        }
    }

    fn store(&self, dir: &std::path::Path) {
        let Some(key) = self.key.as_ref().filter(|_| self.added) else {
            return;
        };
        let mut kept: Vec<(&str, u32, &Option<String>)> = self
            .found
            .iter()
            .map(|((f, l), c)| (f.as_str(), *l, c))
            .collect();
        kept.sort_unstable();
        crate::persist::store_json(dir, key, KEPT_PREFIX, MAX_KEPT_FILES, &kept);
    }
}

impl Drop for CallsiteNamer<'_> {
    fn drop(&mut self) {
        if let Some(creators) = &self.creators {
            creators.store(crate::persist::kept_dir());
        }
    }
}

impl<'a> CallsiteNamer<'a> {
    pub fn new(pid: u32, image: &'a ElfImage) -> Self {
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok();
        Self {
            mem,
            readable: binary_read_only_mappings(pid),
            image,
            files: HashMap::new(),
            lines: None,
            creators: None,
        }
    }

    /// The full `__FILE__` string, if it could be read.
    pub fn file(&mut self, ptr: u64) -> Option<String> {
        if let Some(f) = self.files.get(&ptr) {
            return f.clone();
        }
        let from_mem = self.mem.as_ref().and_then(|m| {
            let &(_, end) = self
                .readable
                .iter()
                .find(|(start, end)| (*start..*end).contains(&ptr))?;
            let mut buf = vec![0u8; MAX_PATH.min((end - ptr) as usize)];
            let n = m.read_at(&mut buf, ptr).ok()?;
            c_string(&buf[..n])
        });
        let name = from_mem.or_else(|| {
            (!self.image.position_independent)
                .then(|| {
                    self.image
                        .read_only_bytes_at(ptr, MAX_PATH)
                        .and_then(c_string)
                })
                .flatten()
        });
        self.files.insert(ptr, name.clone());
        name
    }

    /// `btr0cur.cc:304`, the form SHOW ENGINE INNODB STATUS uses.
    pub fn label(&mut self, site: Callsite) -> String {
        self.file_line(site.file, site.line)
    }

    /// [`Self::label`] of a bare (`__FILE__` pointer, line).
    pub fn file_line(&mut self, file: u64, line: u32) -> String {
        match self.file(file) {
            Some(f) => format!("{}:{}", f.rsplit('/').next().unwrap_or(&f), line),
            None => format!("{file:#x}:{line}"),
        }
    }
}

impl CallsiteNamer<'_> {
    /// A latch named by its creation site, as SHOW ENGINE INNODB STATUS
    /// does, plus the function that created it when DWARF's line table
    /// knows: `created in dict_init (dict0dict.cc:1107)`.
    pub fn created_label(&mut self, file_ptr: u64, line: u32) -> String {
        let Some(path) = self.file(file_ptr) else {
            return format!("created at {file_ptr:#x}:{line}");
        };
        let base = path.rsplit('/').next().unwrap_or(&path).to_string();
        let image = self.image;
        let creators = self.creators.get_or_insert_with(|| {
            KeptCreators::load(image.dwarf_file_key(), crate::persist::kept_dir())
        });
        let creator = match creators.found.get(&(path.clone(), line)) {
            Some(found) => found,
            None => {
                let lines = self
                    .lines
                    .get_or_insert_with(|| SourceLines::new(image).ok());
                let found = lines
                    .as_ref()
                    .and_then(|l| l.function_at(&path, line).ok().flatten());
                creators.added = true;
                creators.found.entry((path.clone(), line)).or_insert(found)
            }
        };
        match creator {
            Some(f) => format!("created in {f} ({base}:{line})"),
            None => format!("created at {base}:{line}"),
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
            *out.entry(label).or_default() += &val;
        }
        out
    }
}

/// Address ranges where `/proc/PID/maps` shows the process's own
/// executable mapped without write permission.
fn binary_read_only_mappings(pid: u32) -> Vec<(u64, u64)> {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return Vec::new();
    };
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe).to_string();
    crate::target::maps::of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.path == exe && !m.writable)
        .map(|m| (m.start, m.end))
        .collect()
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

    /// Creators found are kept for the same DWARF file, added to and read
    /// back; nothing is kept without a key.
    #[test]
    fn latch_creators_are_kept_for_the_same_file() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let image = crate::resolve::ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let key = image.dwarf_file_key();
        assert!(key.is_some());
        let mut first = KeptCreators::load(key.clone(), &dir);
        assert!(first.found.is_empty());
        first.store(&dir);
        assert!(!dir.exists(), "nothing added, nothing kept");
        first
            .found
            .insert(("dict0dict.cc".into(), 1107), Some("dict_init".into()));
        first.found.insert(("srv0srv.cc".into(), 12), None);
        first.added = true;
        first.store(&dir);
        let second = KeptCreators::load(key, &dir);
        assert_eq!(second.found, first.found);
        assert!(!second.added);
        // Another file's key reads nothing of it.
        let other = crate::resolve::ElfImage::open(std::path::Path::new("/bin/true")).unwrap();
        assert!(KeptCreators::load(other.dwarf_file_key(), &dir)
            .found
            .is_empty());
    }

    #[test]
    fn reads_strings_from_own_memory() {
        static FILE: &[u8] = b"/build/storage/innobase/btr/btr0cur.cc\0";
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let mut namer = CallsiteNamer::new(std::process::id(), &image);
        let site = Callsite {
            file: FILE.as_ptr() as u64,
            line: 304,
            ..Default::default()
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
                ..Default::default()
            }),
            "0x8:1"
        );
    }

    /// Query text and rows live in writable memory: a "file" pointer into
    /// the heap or into writable data is labelled by address, never read.
    #[test]
    fn never_reads_outside_the_binarys_read_only_mappings() {
        static mut WRITABLE: [u8; 16] = *b"/secret/data.cc\0";
        let heap = b"/query/text.cc\0".to_vec();
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let mut namer = CallsiteNamer::new(std::process::id(), &image);
        let heap_ptr = heap.as_ptr() as u64;
        assert_eq!(namer.file(heap_ptr), None);
        assert_eq!(
            namer.label(Callsite {
                file: heap_ptr,
                line: 7,
                ..Default::default()
            }),
            format!("{heap_ptr:#x}:7")
        );
        let data_ptr = std::ptr::addr_of!(WRITABLE) as u64;
        assert_eq!(namer.file(data_ptr), None);
        assert!(!namer.readable.is_empty());
        assert!(namer.readable.iter().all(|(s, e)| s < e));
    }

    #[test]
    fn c_strings() {
        assert_eq!(c_string(b"a.cc\0zz").as_deref(), Some("a.cc"));
        assert_eq!(c_string(b"no terminator"), None);
        assert_eq!(c_string(b"\x01bad\0"), None);
        assert_eq!(c_string(b"\0"), None);
    }
}

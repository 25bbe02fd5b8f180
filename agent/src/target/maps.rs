//! A process's memory mappings, as /proc/PID/maps lists them: the one
//! reader every stage uses (opening a target's files, the load bias of
//! in-memory counters, naming stacks, call sites, the symbolizer's own
//! trimming), parsed by the `procfs` crate.

use procfs::process::{MMPermissions, MMapPath, MemoryMaps, Process};
use procfs::FromBufRead;

use crate::target::file_id::FileId;

/// One mapping of a file (anonymous, stack, heap and vDSO mappings are
/// left out: nothing reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// Device and inode: what an opened file must be to be this one.
    pub id: FileId,
    /// The path as the process sees it, ` (deleted)` removed.
    pub path: String,
    /// Whether the file's text was deleted (replaced on disk) while mapped.
    pub deleted: bool,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    pub shared: bool,
}

/// The file mappings of `pid`.
pub fn of(pid: u32) -> std::io::Result<Vec<Mapping>> {
    let pid =
        i32::try_from(pid).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    read(Process::new(pid).map_err(to_io)?)
}

/// This process's own file mappings.
pub fn of_self() -> std::io::Result<Vec<Mapping>> {
    read(Process::myself().map_err(to_io)?)
}

/// Mappings from the text of a maps file.
pub fn parse(text: &str) -> std::io::Result<Vec<Mapping>> {
    Ok(files_of(
        MemoryMaps::from_buf_read(text.as_bytes()).map_err(to_io)?,
    ))
}

fn read(process: Process) -> std::io::Result<Vec<Mapping>> {
    Ok(files_of(process.maps().map_err(to_io)?))
}

fn files_of(maps: MemoryMaps) -> Vec<Mapping> {
    maps.into_iter()
        .filter_map(|m| {
            let MMapPath::Path(path) = m.pathname else {
                return None;
            };
            let path = path.to_string_lossy();
            let (path, deleted) = match path.strip_suffix(" (deleted)") {
                Some(p) => (p.to_string(), true),
                None => (path.into_owned(), false),
            };
            Some(Mapping {
                start: m.address.0,
                end: m.address.1,
                offset: m.offset,
                id: FileId {
                    major: u32::try_from(m.dev.0).ok()?,
                    minor: u32::try_from(m.dev.1).ok()?,
                    inode: m.inode,
                },
                path,
                deleted,
                readable: m.perms.contains(MMPermissions::READ),
                writable: m.perms.contains(MMPermissions::WRITE),
                executable: m.perms.contains(MMPermissions::EXECUTE),
                shared: m.perms.contains(MMPermissions::SHARED),
            })
        })
        .collect()
}

fn to_io(e: procfs::ProcError) -> std::io::Error {
    match e {
        procfs::ProcError::Io(e, _) => e,
        procfs::ProcError::NotFound(_) => std::io::Error::from(std::io::ErrorKind::NotFound),
        procfs::ProcError::PermissionDenied(_) => {
            std::io::Error::from(std::io::ErrorKind::PermissionDenied)
        }
        other => std::io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_mappings_with_their_fields_and_odd_paths() {
        let text = "55d0c0a00000-55d0c1200000 r-xp 00200000 fd:01 123 /usr/sbin/mariadbd\n\
                    7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n\
                    7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n\
                    7f00-7f10 r--s 00001000 fd:01 5 /tmp/a b (deleted)\n";
        let m = parse(text).unwrap();
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(
            (m[0].start, m[0].end, m[0].offset, m[0].path.as_str()),
            (
                0x55d0c0a00000,
                0x55d0c1200000,
                0x200000,
                "/usr/sbin/mariadbd"
            )
        );
        assert_eq!(
            m[0].id,
            FileId {
                major: 0xfd,
                minor: 1,
                inode: 123
            }
        );
        assert!(m[0].executable && !m[0].writable && !m[0].shared && !m[0].deleted);
        assert_eq!((m[1].path.as_str(), m[1].deleted), ("/tmp/a b", true));
        assert!(m[1].shared && m[1].readable && !m[1].executable);
    }

    /// This test binary is mapped from its own file: executable, private,
    /// at offset 0 somewhere, with the device and inode of the file.
    #[test]
    fn own_executable_is_listed_with_its_file_identity() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy();
        let own = of_self().unwrap();
        let mine: Vec<&Mapping> = own.iter().filter(|m| m.path == exe).collect();
        assert!(mine
            .iter()
            .any(|m| m.executable && !m.shared && !m.writable));
        assert!(mine.iter().any(|m| m.offset == 0));
        let id = FileId::of(&std::fs::File::open(&*exe).unwrap()).unwrap();
        assert!(mine.iter().all(|m| m.id == id && !m.deleted));
        // By PID, the same (other tests of this process map files meanwhile:
        // only this one's mappings are compared).
        let by_pid = of(std::process::id()).unwrap();
        let mine_by_pid: Vec<&Mapping> = by_pid.iter().filter(|m| m.path == exe).collect();
        assert_eq!(mine_by_pid, mine);
    }
}

//! Which server a binary is: family and version, read from the version
//! strings compiled into its read-only data (no need to run or query it).

use serde::{Deserialize, Serialize};

use memchr::memmem;

use crate::resolve::ElfImage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Mysql,
    Percona,
    Mariadb,
    Unknown,
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Mysql => "MySQL",
            Family::Percona => "Percona Server",
            Family::Mariadb => "MariaDB",
            Family::Unknown => "unknown server",
        })
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// `"10.2.11"`, `"10.2"` (patch 0), with any `-suffix` ignored.
    pub fn parse(s: &str) -> Option<Self> {
        let core = s.split(['-', '+', '~']).next()?;
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
        })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerInfo {
    pub family: Family,
    pub version: Option<Version>,
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version {
            Some(v) => write!(f, "{} {v}", self.family),
            None => write!(f, "{}", self.family),
        }
    }
}

/// A kept identity larger than this is not read (it is ~300 bytes).
const MAX_KEPT_BYTES: u64 = 4 << 10;
/// Past this many kept identities, the least recently used makes room.
const MAX_KEPT_FILES: usize = 256;
const KEPT_PREFIX: &str = "server";

impl ServerInfo {
    /// The server `image` is, from its strings. Finding them reads
    /// `.rodata` and `.data` (~3 ms on MariaDB 10.2.11, see
    /// [`Detector::scan`]), so the answer is kept (across boots)
    /// for the very same binary ([`crate::persist`],
    /// `server-MAJOR-MINOR-INODE.json`) and read back by the same
    /// innoprof binary.
    pub fn detect(image: &ElfImage) -> Self {
        Self::detect_kept_in(image, crate::persist::kept_dir())
    }

    fn detect_kept_in(image: &ElfImage, dir: &std::path::Path) -> Self {
        let key = image.file_key();
        if let Some(kept) = key
            .as_ref()
            .and_then(|k| crate::persist::load_json(dir, k, KEPT_PREFIX, MAX_KEPT_BYTES))
        {
            return kept;
        }
        let mut detector = Detector::default();
        image.for_each_rodata_section(|data| detector.scan(data));
        let found = detector.finish();
        if let Some(key) = &key {
            crate::persist::store_json(dir, key, KEPT_PREFIX, MAX_KEPT_FILES, &found);
        }
        found
    }

    /// MariaDB embeds `"10.2.11-MariaDB"`; MySQL and Percona embed the bare
    /// `"5.6.24"` next to their compilation comment.
    pub fn from_strings(strings: &[String]) -> Self {
        let mut detector = Detector::default();
        detector.scan(strings.join("\0").as_bytes());
        detector.finish()
    }
}

/// What the server's strings say, gathered in one pass (in file order).
#[derive(Default)]
struct Detector {
    /// The first `"X.Y.Z-MariaDB"`.
    mariadb: Option<Version>,
    percona: bool,
    mysql: bool,
    /// The first bare `X.Y.Z` of a MySQL server line.
    mysql_version: Option<Version>,
}

impl Detector {
    /// Reads one section's strings (NUL-terminated, 4–200 printable ASCII
    /// bytes). The family's marks are found with `memmem` and only the
    /// strings around them are checked; a MySQL version, a short string
    /// of digits and dots, by a first-byte test on each string, and only
    /// while no MariaDB version is found (MariaDB's decides). Checking
    /// every byte of every string of MariaDB 10.2.11 was ~8 ms of a first
    /// recording's start.
    fn scan(&mut self, data: &[u8]) {
        if self.mariadb.is_none() {
            self.mariadb = memmem::find_iter(data, "-MariaDB").find_map(|at| {
                string_around(data, at, "-MariaDB".len())?
                    .strip_suffix("-MariaDB")
                    .and_then(Version::parse)
            });
        }
        let mark = |mark: &str, at_start: bool| {
            memmem::find_iter(data, mark).any(|at| {
                (!at_start || at == 0 || data[at - 1] == 0)
                    && string_around(data, at, mark.len()).is_some()
            })
        };
        self.percona |= mark("Percona Server", false);
        self.mysql |= mark("MySQL Community Server", true) || mark("MySQL Enterprise Server", true);
        if self.mariadb.is_some() || self.mysql_version.is_some() {
            return;
        }
        let mut start = 0;
        for end in memchr::memchr_iter(0, data).chain([data.len()]) {
            let s = &data[start..end];
            start = end + 1;
            if !s.first().is_some_and(u8::is_ascii_digit) {
                continue;
            }
            // Other libraries' versions live in the same binary (zlib
            // "1.2.11", "3.23.57" for old clients); MySQL server lines
            // are 5.x, 8.x, 9.x.
            let found = as_string(s)
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
                .filter(|s| s.matches('.').count() == 2)
                .and_then(Version::parse);
            if let Some(v) = found.filter(|v| matches!(v.major, 5 | 8 | 9) && v.minor <= 7) {
                self.mysql_version = Some(v);
                return;
            }
        }
    }

    fn finish(self) -> ServerInfo {
        if let Some(v) = self.mariadb {
            return ServerInfo {
                family: Family::Mariadb,
                version: Some(v),
            };
        }
        let family = if self.percona {
            Family::Percona
        } else if self.mysql {
            Family::Mysql
        } else {
            return ServerInfo {
                family: Family::Unknown,
                version: None,
            };
        };
        ServerInfo {
            family,
            version: self.mysql_version,
        }
    }
}

/// The string of `data` holding bytes `at..at + len`: between NULs (or
/// the data's ends), if [`as_string`] takes it.
fn string_around(data: &[u8], at: usize, len: usize) -> Option<&str> {
    let start = memchr::memrchr(0, &data[..at]).map_or(0, |i| i + 1);
    let end = memchr::memchr(0, &data[at + len..]).map_or(data.len(), |i| at + len + i);
    as_string(&data[start..end])
}

/// `s` as the detector reads a string: 4–200 printable ASCII bytes.
fn as_string(s: &[u8]) -> Option<&str> {
    if !(4..=200).contains(&s.len()) || !s.iter().all(|b| (0x20..0x7f).contains(b)) {
        return None;
    }
    std::str::from_utf8(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// What a binary's strings say is kept for that very binary: read
    /// back (a kept answer, marked here, is returned), and not for another.
    #[test]
    fn the_server_identity_is_kept_for_the_same_binary() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let first = ServerInfo::detect_kept_in(&image, &dir);
        assert_eq!(first.family, Family::Unknown);
        let kept: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(kept.len(), 1);
        let kept = kept[0].as_ref().unwrap().path();
        let text = std::fs::read_to_string(&kept).unwrap();
        let marked = text.replace("\"unknown\"", "\"percona\"");
        assert_ne!(marked, text);
        std::fs::write(&kept, marked).unwrap();
        assert_eq!(
            ServerInfo::detect_kept_in(&image, &dir).family,
            Family::Percona
        );
        // Another binary (a copy: another inode) is read anew.
        let copy = d.path().join("copy");
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        let other = ElfImage::open(&copy).unwrap();
        assert_eq!(
            ServerInfo::detect_kept_in(&other, &dir).family,
            Family::Unknown
        );
    }

    #[test]
    fn mariadb() {
        let s = ServerInfo::from_strings(&strings(&["10.2.11", "5.5.5-", "10.2.11-MariaDB"]));
        assert_eq!(s.family, Family::Mariadb);
        assert_eq!(s.version, Version::parse("10.2.11"));
    }

    #[test]
    fn mysql_skips_library_versions() {
        let s = ServerInfo::from_strings(&strings(&[
            "1.2.11",
            "3.23.57",
            "8.0.15",
            "MySQL Community Server - GPL",
        ]));
        assert_eq!(s.family, Family::Mysql);
        assert_eq!(s.version.unwrap().to_string(), "8.0.15");
    }

    /// Marks count only as whole strings: a suffix that goes on, a mark
    /// inside a longer or unprintable string, a MySQL name not at a
    /// string's start, are not read as a server's.
    #[test]
    fn marks_are_read_as_whole_strings() {
        let s = ServerInfo::from_strings(&strings(&[
            "10.1.1-MariaDB-log",
            "x\u{1}10.3.0-MariaDB",
            "10.4.2-MariaDB",
            "10.5.5-MariaDB",
        ]));
        assert_eq!(s.version, Version::parse("10.4.2"));
        let long = format!("{}Percona Server", "x".repeat(190));
        let not =
            ServerInfo::from_strings(&strings(&[&long, "see MySQL Community Server", "5.6.24"]));
        assert_eq!(not.family, Family::Unknown);
        let percona = ServerInfo::from_strings(&strings(&["5.7.1", "a Percona Server build"]));
        assert_eq!(percona.family, Family::Percona);
        assert_eq!(percona.version, Version::parse("5.7.1"));
        // Version strings at the data's very start and end.
        let edges = ServerInfo::from_strings(&strings(&["8.0.1", "MySQL Enterprise Server", "x"]));
        assert_eq!(
            (edges.family, edges.version),
            (Family::Mysql, Version::parse("8.0.1"))
        );
        let end = ServerInfo::from_strings(&strings(&["MySQL Community Server", "9.7.1"]));
        assert_eq!(end.version, Version::parse("9.7.1"));
        // A version string is a string too: at most 200 bytes.
        let padded = format!("5.6.{}24", "0".repeat(195));
        let long =
            ServerInfo::from_strings(&strings(&["MySQL Community Server", &padded, "8.0.2"]));
        assert_eq!(long.version, Version::parse("8.0.2"));
    }

    #[test]
    fn unknown() {
        assert_eq!(
            ServerInfo::from_strings(&strings(&["hello"])).family,
            Family::Unknown
        );
        assert_eq!(
            Version::parse("10.2"),
            Some(Version {
                major: 10,
                minor: 2,
                patch: 0
            })
        );
        assert_eq!(Version::parse("x.2"), None);
    }
}

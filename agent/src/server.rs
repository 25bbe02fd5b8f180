//! Which server a binary is: family and version, read from the version
//! strings compiled into its read-only data (no need to run or query it).

use serde::{Deserialize, Serialize};

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
    /// The server `image` is, from its strings. Reading them scans every
    /// string of `.rodata` and `.data` (~10 ms of CPU on MariaDB 10.2.11,
    /// at every recording's start), so the answer is kept (across boots)
    /// for the very same binary ([`crate::run_dir`],
    /// `server-MAJOR-MINOR-INODE.json`) and read back by the same
    /// innoprof binary.
    pub fn detect(image: &ElfImage) -> Self {
        Self::detect_kept_in(image, crate::run_dir::kept_dir())
    }

    fn detect_kept_in(image: &ElfImage, dir: &std::path::Path) -> Self {
        let key = image.file_key();
        if let Some(kept) = key
            .as_ref()
            .and_then(|k| crate::run_dir::load_json(dir, k, KEPT_PREFIX, MAX_KEPT_BYTES))
        {
            return kept;
        }
        let mut detector = Detector::default();
        image.for_each_rodata_string(|s| detector.see(s));
        let found = detector.finish();
        if let Some(key) = &key {
            crate::run_dir::store_json(dir, key, KEPT_PREFIX, MAX_KEPT_FILES, &found);
        }
        found
    }

    /// MariaDB embeds `"10.2.11-MariaDB"`; MySQL and Percona embed the bare
    /// `"5.6.24"` next to their compilation comment.
    pub fn from_strings(strings: &[String]) -> Self {
        let mut detector = Detector::default();
        for s in strings {
            detector.see(s);
        }
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
    fn see(&mut self, s: &str) {
        if self.mariadb.is_none() {
            self.mariadb = s.strip_suffix("-MariaDB").and_then(Version::parse);
        }
        self.percona |= s.contains("Percona Server");
        self.mysql |=
            s.starts_with("MySQL Community Server") || s.starts_with("MySQL Enterprise Server");
        // Other libraries' versions live in the same binary (zlib "1.2.11",
        // "3.23.57" for old clients); MySQL server lines are 5.x, 8.x, 9.x.
        if self.mysql_version.is_none()
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && s.matches('.').count() == 2
        {
            self.mysql_version =
                Version::parse(s).filter(|v| matches!(v.major, 5 | 8 | 9) && v.minor <= 7);
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

//! A missing debug file fetched by build id from debuginfod servers, as
//! perf, gdb, systemtap and bpftrace fetch them: `GET
//! URL/buildid/HEX/debuginfo` (the debuginfod protocol, elfutils'
//! `debuginfod(8)`), the servers named by `DEBUGINFOD_URLS` (space
//! separated) or `--debuginfod URL`.
//!
//! Asked only when the local search ([`super::debuginfo`]) found nothing,
//! and only for a binary with a build id (the name a debug file is asked
//! by). Before the network, two local sources: innoprof's own kept files
//! (`/var/cache/innoprof/debuginfod-HEX.debug`, fetched by an earlier run)
//! and elfutils' client cache (`~/.cache/debuginfod_client/HEX/debuginfo`,
//! or `DEBUGINFOD_CACHE_PATH`), filled by gdb or perf.
//!
//! Trust: what a server sends is streamed into an exclusively created
//! temporary file in the kept directory (never into memory whole), at most
//! `DEBUGINFOD_MAXSIZE` bytes (default 2 GiB), and used only if it is an
//! ELF file with the very build id asked for (NT_GNU_BUILD_ID) and debug
//! sections (`.debug_info` or `.symtab`); anything else is removed. Kept
//! files follow the kept directory's rules (`persist`: root's directory,
//! root's files nobody else can write, capped by count and bytes, least
//! recently used first) and are checked again each time they are used.
//!
//! Time: one fetch is bounded as a whole (`DEBUGINFOD_MAXTIME`, default
//! 60 s, shared by every server asked), and each connect and read may wait
//! at most `DEBUGINFOD_TIMEOUT` (default 5 s, where elfutils waits 90 s):
//! a server that accepts and never answers costs a recording 5 s, then it
//! goes on without the names. A debug file is fetched once per host; later
//! runs read it from the kept directory without the network.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSection, ObjectSymbol};

use super::mapped::Mapped;
use crate::persist::{self, KeptById};

/// Connect and per-read wait (`DEBUGINFOD_TIMEOUT` overrides).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// One fetch as a whole, every server included (`DEBUGINFOD_MAXTIME`).
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(60);
/// The largest debug file taken (`DEBUGINFOD_MAXSIZE`): MariaDB 11.4's
/// DWARF is ~400 MB uncompressed.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Kept debug files: `debuginfod-HEX.debug`, at most this many ...
const KEPT_FILES: usize = 8;
/// ... and this many bytes together.
const KEPT_BYTES: u64 = 4 << 30;
const KEPT_PREFIX: &str = "debuginfod";
const KEPT_EXT: &str = "debug";

/// Where and how debug files are fetched.
#[derive(Debug, Clone)]
pub struct Debuginfod {
    /// Servers asked in turn; none: only local copies (kept, elfutils').
    pub urls: Vec<String>,
    /// Connect and per-read wait.
    pub timeout: Duration,
    /// One fetch, every server included.
    pub max_time: Duration,
    pub max_bytes: u64,
    /// Where fetched files are kept (innoprof's kept directory).
    pub kept_dir: PathBuf,
    /// elfutils' client cache, read (never written) as a local source.
    pub elfutils_cache: Option<PathBuf>,
    /// `DEBUGINFOD_URLS` entries not used (not http or https), to say so.
    pub ignored: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DebuginfodError {
    #[error("{url}: {source}")]
    Http {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("{url}: timed out ({what}) after {after:?}")]
    TimedOut {
        url: String,
        what: ureq::Timeout,
        after: Duration,
    },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: larger than {limit} bytes (DEBUGINFOD_MAXSIZE)")]
    TooLarge { url: String, limit: u64 },
    #[error("{url}: reading the body")]
    Body {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: {reason}; not used")]
    Rejected { url: String, reason: Rejected },
    #[error("{url}: not asked: DEBUGINFOD_MAXTIME ({max_time:?}) spent")]
    OutOfTime { url: String, max_time: Duration },
    #[error("cannot write the fetched file in {dir}")]
    Temp {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why a file is not the debug file asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("not an ELF file")]
    NotElf,
    #[error("build id {found}, asked for {expected}")]
    OtherBuildId { expected: String, found: String },
    #[error("no build id")]
    NoBuildId,
    #[error("no debug sections (.debug_info, .symtab)")]
    NoDebugSections,
    #[error("cannot map it: {0}")]
    Unreadable(String),
}

/// Where a debug file by build id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// innoprof's kept copy, fetched by an earlier run.
    Kept,
    /// elfutils' client cache.
    ElfutilsCache,
    /// A server, by this run.
    Server,
}

/// A debug file found or fetched, open, with where it came from.
#[derive(Debug)]
pub struct Found {
    pub file: File,
    /// As shown: the kept file, elfutils' file, or (not kept) the URL.
    pub path: PathBuf,
    pub found_by: Source,
    /// The server it was fetched from, this run.
    pub url: Option<String>,
    /// Why a fetched file was not kept, if it was not.
    pub note: Option<String>,
}

impl Debuginfod {
    /// As elfutils' client reads its environment: `DEBUGINFOD_URLS`,
    /// `DEBUGINFOD_TIMEOUT`, `DEBUGINFOD_MAXTIME`, `DEBUGINFOD_MAXSIZE` (a
    /// value that is not a positive number keeps the default), and
    /// `DEBUGINFOD_CACHE_PATH` (else `$XDG_CACHE_HOME/debuginfod_client`,
    /// else `$HOME/.cache/debuginfod_client`).
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let positive = |name: &str| {
            var(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&n| n > 0)
        };
        let (urls, ignored) = split_urls(var("DEBUGINFOD_URLS").as_deref().unwrap_or(""));
        let elfutils_cache = var("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| Path::new(&d).join("debuginfod_client")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client")))
            .filter(|p| p.is_absolute());
        Self {
            urls,
            timeout: positive("DEBUGINFOD_TIMEOUT").map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            max_time: positive("DEBUGINFOD_MAXTIME").map_or(DEFAULT_MAX_TIME, Duration::from_secs),
            max_bytes: positive("DEBUGINFOD_MAXSIZE").unwrap_or(DEFAULT_MAX_BYTES),
            kept_dir: persist::kept_dir().to_path_buf(),
            elfutils_cache,
            ignored,
        }
    }

    /// `build_id`'s debug file: kept by an earlier run, in elfutils'
    /// cache, or fetched from the servers in turn (and kept); checked
    /// each way (see [`verify`]). The error says, in one line, what each
    /// server answered.
    pub fn find(&self, build_id: &str) -> Result<Found, Vec<DebuginfodError>> {
        if !persist::is_build_id(build_id) {
            return Err(Vec::new());
        }
        let kept = self.kept();
        if let Some((file, _, path)) = kept.open(build_id, self.max_bytes) {
            if verify(&file, build_id).is_ok() {
                return Ok(Found {
                    file,
                    path,
                    found_by: Source::Kept,
                    url: None,
                    note: None,
                });
            }
        }
        if let Some(found) = self.in_elfutils_cache(build_id) {
            return Ok(found);
        }
        let deadline = Instant::now() + self.max_time;
        let mut failures = Vec::new();
        for url in &self.urls {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                failures.push(DebuginfodError::OutOfTime {
                    url: url.clone(),
                    max_time: self.max_time,
                });
                continue;
            }
            match self.fetch(url, build_id, left, &kept) {
                Ok(found) => return Ok(found),
                Err(e) => failures.push(e),
            }
        }
        Err(failures)
    }

    fn kept(&self) -> KeptById {
        KeptById::in_dir(
            &self.kept_dir,
            KEPT_PREFIX,
            KEPT_EXT,
            KEPT_FILES,
            KEPT_BYTES,
        )
    }

    /// elfutils' `CACHE/HEX/debuginfo`, if its directory is root's alone
    /// and the file root's, nobody else's to write, and the debug file
    /// asked for.
    fn in_elfutils_cache(&self, build_id: &str) -> Option<Found> {
        let dir = self.elfutils_cache.as_ref()?.join(build_id);
        persist::trusted_dir(&dir).ok()?;
        let path = dir.join("debuginfo");
        let (file, _) = persist::open_root_file(&path, self.max_bytes)?;
        verify(&file, build_id).ok()?;
        Some(Found {
            file,
            path,
            found_by: Source::ElfutilsCache,
            url: None,
            note: None,
        })
    }

    /// One server's answer, streamed to a temporary file in the kept
    /// directory (or, where that cannot be, to an unnamed one in the
    /// temporary directory, used for this run only), checked, then kept.
    fn fetch(
        &self,
        url: &str,
        build_id: &str,
        left: Duration,
        kept: &KeptById,
    ) -> Result<Found, DebuginfodError> {
        let full = format!("{}/buildid/{build_id}/debuginfo", url.trim_end_matches('/'));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(left))
            .timeout_connect(Some(self.timeout.min(left)))
            .timeout_per_read(Some(self.timeout))
            .http_status_as_error(false)
            .user_agent(format!("innoprof/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let http = |source| match source {
            // Which limit ran out, in the variables' own terms.
            ureq::Error::Timeout(what) => DebuginfodError::TimedOut {
                url: url.to_string(),
                what,
                after: match what {
                    ureq::Timeout::Global => left,
                    _ => self.timeout.min(left),
                },
            },
            source => DebuginfodError::Http {
                url: url.to_string(),
                source,
            },
        };
        let response = agent.get(&full).call().map_err(http)?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(DebuginfodError::Status {
                url: url.to_string(),
                status,
            });
        }
        let too_large = || DebuginfodError::TooLarge {
            url: url.to_string(),
            limit: self.max_bytes,
        };
        let announced = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n > self.max_bytes) {
            return Err(too_large());
        }
        let (mut file, tmp, not_kept) = match kept.create_temp(build_id) {
            Ok((f, tmp)) => (f, Some(tmp), None),
            Err(e) => {
                let dir = std::env::temp_dir();
                let f = tempfile::tempfile_in(&dir).map_err(|source| DebuginfodError::Temp {
                    dir: dir.clone(),
                    source,
                })?;
                (
                    f,
                    None,
                    Some(format!("not kept: {}: {e}", kept.dir().display())),
                )
            }
        };
        let discard = |tmp: &Option<PathBuf>| {
            if let Some(t) = tmp {
                kept.discard(t);
            }
        };
        let body = response.into_body().into_reader();
        let copied = copy_bounded(body, &mut file, self.max_bytes);
        let len = match copied {
            Ok(Some(len)) => len,
            Ok(None) => {
                discard(&tmp);
                return Err(too_large());
            }
            Err(source) => {
                discard(&tmp);
                return Err(DebuginfodError::Body {
                    url: url.to_string(),
                    source,
                });
            }
        };
        if let Err(reason) = verify(&file, build_id) {
            discard(&tmp);
            return Err(DebuginfodError::Rejected {
                url: url.to_string(),
                reason,
            });
        }
        let (path, note) = match tmp {
            Some(tmp) => match kept.keep(build_id, &tmp, len) {
                Ok(path) => (path, None),
                // The open file is still good for this run.
                Err(e) => (
                    PathBuf::from(&full),
                    Some(format!("not kept: {}: {e}", kept.dir().display())),
                ),
            },
            None => (PathBuf::from(&full), not_kept),
        };
        let _ = file.rewind();
        Ok(Found {
            file,
            path,
            found_by: Source::Server,
            url: Some(url.to_string()),
            note,
        })
    }
}

/// `DEBUGINFOD_URLS` split at white space (as elfutils splits it): the
/// http and https URLs, and the rest (ignored, said).
pub fn split_urls(text: &str) -> (Vec<String>, Vec<String>) {
    text.split_whitespace()
        .map(str::to_string)
        .partition(|u| is_http_url(u))
}

/// An `http://` or `https://` URL with a host: what innoprof asks.
pub fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && url.len() > scheme.len()
            && !url[scheme.len()..].starts_with('/')
    })
}

/// Copies `from` into `to`, at most `max` bytes: the length, or None when
/// there was more.
fn copy_bounded(from: impl Read, to: &mut File, max: u64) -> std::io::Result<Option<u64>> {
    let mut limited = from.take(max.saturating_add(1));
    let mut writer = std::io::BufWriter::with_capacity(1 << 20, to);
    let n = std::io::copy(&mut limited, &mut writer)?;
    writer.flush()?;
    Ok((n <= max).then_some(n))
}

/// Whether `file` is the debug file of `build_id`: an ELF file (only its
/// headers, section table and notes are read, from a map) with that build
/// id and DWARF or a symbol table.
pub fn verify(file: &File, build_id: &str) -> Result<(), Rejected> {
    let map = Mapped::of(file).map_err(|e| Rejected::Unreadable(e.to_string()))?;
    let elf = object::File::parse(map.bytes()).map_err(|_| Rejected::NotElf)?;
    if !matches!(elf.format(), object::BinaryFormat::Elf) {
        return Err(Rejected::NotElf);
    }
    let found = match elf.build_id() {
        Ok(Some(id)) => super::elf::hex(id),
        _ => return Err(Rejected::NoBuildId),
    };
    if found != build_id {
        return Err(Rejected::OtherBuildId {
            expected: build_id.to_string(),
            found,
        });
    }
    let dwarf = elf
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0);
    // A symbol table naming functions (not an empty one's null entry).
    let functions = || elf.symbols().any(|s| s.kind() == object::SymbolKind::Text);
    if !(dwarf || functions()) {
        return Err(Rejected::NoDebugSections);
    }
    Ok(())
}

/// What the servers answered, one line: `URL: why; URL: why`.
pub fn failures_line(failures: &[DebuginfodError]) -> String {
    failures
        .iter()
        .map(|e| crate::error_chain(e))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;

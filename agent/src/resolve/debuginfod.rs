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
//! Trust: what a server sends, or any cache holds, is untrusted content,
//! whoever owns the file (a kept file is root's; its bytes are the
//! server's, and a server reads the build id to answer from the request).
//! An answer is streamed into an unnamed file in the kept directory
//! (`O_TMPFILE`: a fetch killed mid-body leaves nothing; never into memory
//! whole), at most `DEBUGINFOD_MAXSIZE` bytes (default 2 GiB), and used
//! only if it is an ELF file with the very build id asked for
//! (NT_GNU_BUILD_ID), debug sections (`.debug_info` or `.symtab`), and
//! compressed sections within innoprof's inflation caps
//! ([`super::section::check_inflation`]: what each claims, its ratio, the
//! total, and each zlib stream inflated against its claim); anything else
//! is dropped. Kept files follow the kept directory's rules (`persist`:
//! root's directory, root's files nobody else can write, capped by count
//! and by the bytes of the whole directory, least recently used first),
//! are checked again each time they are used, and removed when a check
//! fails (innoprof wrote them).
//!
//! Time: the whole exchange (connects, requests, headers, bodies, every
//! server and redirect) ends by one deadline, `DEBUGINFOD_MAXTIME`
//! (default 60 s) after it starts; within it, each connect, each
//! response's headers and each read of a body may take at most
//! `DEBUGINFOD_TIMEOUT` (default 5 s, where elfutils waits 90 s): a server
//! that accepts and never answers, or drips its headers, costs a
//! recording 5 s, then it goes on without the names. It all happens
//! before any probe is attached. A debug file is fetched once per host;
//! later runs read it from the kept directory without the network.
//!
//! Redirects are followed by hand ([`follow_redirect`], at most
//! [`MAX_REDIRECTS`]): only on the host and port of the URL configured,
//! never from https to http.

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
/// Redirects followed in one exchange with a server.
pub const MAX_REDIRECTS: usize = 4;
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
    #[error("{url}: redirected to {to}: {reason}; not followed")]
    Redirect {
        url: String,
        to: String,
        reason: RedirectRefused,
    },
    #[error("kept {path}: {reason}; removed")]
    KeptRejected { path: PathBuf, reason: Rejected },
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
    #[error(transparent)]
    Inflates(super::section::InflateError),
}

/// Why a redirect is not followed: only to the host and port asked, never
/// from https to http (see [`follow_redirect`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    #[error("no Location")]
    NoLocation,
    #[error("not a URL")]
    NotUrl,
    #[error("not http or https")]
    Scheme,
    #[error("https to http")]
    Downgrade,
    #[error("another host than {0}")]
    Host(String),
    #[error("another port than {0}")]
    Port(u16),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
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
        let mut failures = Vec::new();
        if let Some((file, _, path)) = kept.open(build_id, self.max_bytes) {
            match verify(&file, build_id) {
                Ok(()) => {
                    return Ok(Found {
                        file,
                        path,
                        found_by: Source::Kept,
                        url: None,
                        note: None,
                    })
                }
                // innoprof wrote it; kept, it would fail every run.
                Err(reason) => {
                    drop(file);
                    let _ = kept.remove(build_id);
                    failures.push(DebuginfodError::KeptRejected { path, reason });
                }
            }
        }
        if let Some(found) = self.in_elfutils_cache(build_id) {
            return Ok(found);
        }
        // One deadline for the whole exchange, every server and redirect.
        let deadline = Instant::now() + self.max_time;
        for url in &self.urls {
            if deadline <= Instant::now() {
                failures.push(DebuginfodError::OutOfTime {
                    url: url.clone(),
                    max_time: self.max_time,
                });
                continue;
            }
            match self.fetch(url, build_id, deadline, &kept) {
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

    /// One GET of `at` (`url`'s, or a redirect of it), by `left` of the
    /// exchange's deadline: connecting and the response's headers each
    /// within the timeout too (a server that drips its headers a byte at a
    /// time is cut there, not at the deadline), every read of the body
    /// within the timeout, all of it (body included) by the deadline.
    /// Redirects are answered, not followed (the caller follows them by
    /// [`follow_redirect`]).
    fn get(
        &self,
        url: &str,
        at: &str,
        left: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, DebuginfodError> {
        let wait = self.timeout.min(left);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(left))
            .timeout_connect(Some(wait))
            .timeout_recv_response(Some(wait))
            .timeout_per_read(Some(self.timeout))
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .user_agent(format!("innoprof/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        agent.get(at).call().map_err(|source| match source {
            // Which limit ran out, in the variables' own terms.
            ureq::Error::Timeout(what) => DebuginfodError::TimedOut {
                url: url.to_string(),
                what,
                after: match what {
                    ureq::Timeout::Global => left,
                    _ => wait,
                },
            },
            source => DebuginfodError::Http {
                url: url.to_string(),
                source,
            },
        })
    }

    /// One server's answer, streamed to a temporary file in the kept
    /// directory (or, where that cannot be, to an unnamed one in the
    /// temporary directory, used for this run only), checked, then kept.
    fn fetch(
        &self,
        url: &str,
        build_id: &str,
        deadline: Instant,
        kept: &KeptById,
    ) -> Result<Found, DebuginfodError> {
        let full = format!("{}/buildid/{build_id}/debuginfo", url.trim_end_matches('/'));
        let asked = url::Url::parse(&full).map_err(|_| DebuginfodError::Redirect {
            url: url.to_string(),
            to: full.clone(),
            reason: RedirectRefused::NotUrl,
        })?;
        let mut at = asked.clone();
        let mut redirects = 0;
        let response = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DebuginfodError::OutOfTime {
                    url: url.to_string(),
                    max_time: self.max_time,
                });
            }
            let response = self.get(url, at.as_str(), left)?;
            if !response.status().is_redirection() || response.status() == 304 {
                break response;
            }
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let refused = |reason| DebuginfodError::Redirect {
                url: url.to_string(),
                to: location.chars().take(200).collect(),
                reason,
            };
            if location.is_empty() {
                return Err(refused(RedirectRefused::NoLocation));
            }
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(refused(RedirectRefused::TooMany));
            }
            at = follow_redirect(&asked, &at, location).map_err(refused)?;
        };
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
        // Written where it is kept; where it cannot be, to an unnamed file
        // in the temporary directory, for this run only.
        let (tmp, not_kept) = match kept.create_temp(build_id) {
            Ok(tmp) => (Some(tmp), None),
            Err(e) => (
                None,
                Some(format!("not kept: {}: {e}", kept.dir().display())),
            ),
        };
        let discard = |tmp: &Option<persist::KeptTemp>| {
            if let Some(t) = tmp {
                kept.discard(t);
            }
        };
        let dir = match &tmp {
            Some(_) => kept.dir().to_path_buf(),
            None => std::env::temp_dir(),
        };
        let opened = match &tmp {
            Some(t) => t.file.try_clone(),
            None => tempfile::tempfile_in(&dir),
        };
        let mut file = opened.map_err(|source| {
            discard(&tmp);
            DebuginfodError::Temp { dir, source }
        })?;
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

/// Where a redirect from `at` to `location` leads, if it may be
/// followed: an http or https URL on the host and port of `asked` (the URL
/// the servers list gave), never from https to http (http to https on
/// the same host, both on their default ports, is taken). So a server can
/// send innoprof (root) nowhere it was not asked to go: not to another
/// host, not to loopback, link-local or private addresses, not to another
/// port of its own host (an admin port), unless the configured URL is one.
pub fn follow_redirect(
    asked: &url::Url,
    at: &url::Url,
    location: &str,
) -> Result<url::Url, RedirectRefused> {
    let to = at.join(location).map_err(|_| RedirectRefused::NotUrl)?;
    if !matches!(to.scheme(), "http" | "https") {
        return Err(RedirectRefused::Scheme);
    }
    if to.scheme() == "http" && (asked.scheme() == "https" || at.scheme() == "https") {
        return Err(RedirectRefused::Downgrade);
    }
    if to.host() != asked.host() {
        return Err(RedirectRefused::Host(
            asked.host_str().unwrap_or_default().to_string(),
        ));
    }
    let default_ports = asked.port().is_none() && to.port().is_none();
    if !default_ports && to.port_or_known_default() != asked.port_or_known_default() {
        return Err(RedirectRefused::Port(
            asked.port_or_known_default().unwrap_or_default(),
        ));
    }
    Ok(to)
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

/// Whether `file` is the debug file of `build_id` ([`verify_identity`]),
/// whose compressed sections inflate within innoprof's caps
/// ([`super::section::file_inflation`], remembered for the run: the
/// symbolizer asks again).
pub fn verify(file: &File, build_id: &str) -> Result<(), Rejected> {
    let map = Mapped::of(file).map_err(|e| Rejected::Unreadable(e.to_string()))?;
    let identity = verify_identity(map.bytes(), build_id);
    map.release();
    identity?;
    super::section::file_inflation(file).map_err(Rejected::Inflates)?;
    Ok(())
}

/// [`verify`] of a file's bytes, a pure function (nothing remembered).
pub fn verify_bytes(data: &[u8], build_id: &str) -> Result<(), Rejected> {
    verify_identity(data, build_id)?;
    super::section::check_inflation(data, &super::section::INFLATE_CAPS)
        .map_err(Rejected::Inflates)?;
    Ok(())
}

/// Whether `data` is an ELF file (only its headers, section table and
/// notes are read) with build id `build_id` and DWARF or a symbol table.
pub fn verify_identity(data: &[u8], build_id: &str) -> Result<(), Rejected> {
    let elf = object::File::parse(data).map_err(|_| Rejected::NotElf)?;
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

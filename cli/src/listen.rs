//! Where `serve` listens, and who may read what it serves. A loopback TCP
//! port is reachable by every local user; a unix socket (`--listen
//! unix:PATH`, created 0600, root's) by root alone (or whom root lets in
//! with chmod/chgrp), and each of its peers is known by uid. The profiles
//! and findings (which may quote statements) can also be kept behind a
//! bearer token read from a root-only file (`--auth-token-file`); never
//! the token itself on the command line, where `ps` shows it to everyone.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use anyhow::{bail, Context as _, Result};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::http_guard::Peer;

/// `--listen`: `HOST:PORT`, or `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// clap's parser for `--listen`.
pub fn parse_listen(s: &str) -> Result<ListenAddr, String> {
    match s.strip_prefix("unix:") {
        Some(p) if p.starts_with('/') => Ok(ListenAddr::Unix(PathBuf::from(p))),
        Some(_) => Err("unix:PATH needs an absolute path (e.g. unix:/run/innoprof.sock)".into()),
        None => parse_tcp(s).map(ListenAddr::Tcp),
    }
}

/// `HOST:PORT` as exporters take it: an address, `:PORT` for every
/// interface (node_exporter's `:9100`; serve asks for --listen-any then), or a
/// host name resolved once (`localhost:9707`, its first IPv4 address, as
/// Prometheus' own `--web.listen-address` binds).
fn parse_tcp(s: &str) -> Result<SocketAddr, String> {
    let usage = "give HOST:PORT (e.g. 127.0.0.1:9707, :9707, localhost:9707) or unix:PATH";
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: {port:?} is not a port; {usage}"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("{s:?} has no port; {usage}"));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!("{s:?}: {port:?} is not a port; {usage}"));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| format!("cannot resolve {host:?}: {e}; {usage}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{host:?} resolves to no address; {usage}"))
}

pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A connection accepted, and who it is from.
pub struct Accepted {
    pub stream: Stream,
    pub peer: Peer,
}

impl Listener {
    /// Binds `addr`. A unix socket is created mode 0600 (the umask is
    /// narrowed around bind, so it is never wider, not even for a moment);
    /// a socket already at PATH is replaced only if it is a socket of
    /// innoprof's user (a serve that was killed left it), never another
    /// kind of file or a link.
    pub async fn bind(addr: &ListenAddr) -> Result<Self> {
        match addr {
            ListenAddr::Tcp(a) => {
                Ok(Self::Tcp(TcpListener::bind(a).await.with_context(
                    || format!("cannot listen on {a} (choose another --listen)"),
                )?))
            }
            ListenAddr::Unix(path) => {
                remove_stale_socket(path)?;
                // SAFETY: umask only swaps the process's file mode mask;
                // nothing else of serve creates files while it is narrowed.
                let old = unsafe { libc::umask(0o177) };
                let bound = UnixListener::bind(path);
                unsafe { libc::umask(old) };
                let listener = bound.with_context(|| {
                    format!(
                        "cannot listen on {} (choose another --listen)",
                        path.display()
                    )
                })?;
                Ok(Self::Unix(listener, path.clone()))
            }
        }
    }

    pub async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Self::Tcp(l) => {
                let (stream, from) = l.accept().await?;
                Ok(Accepted {
                    stream: Stream::Tcp(stream),
                    peer: Peer::Ip(from.ip()),
                })
            }
            Self::Unix(l, _) => {
                let (stream, _) = l.accept().await?;
                let uid = stream.peer_cred()?.uid();
                Ok(Accepted {
                    stream: Stream::Unix(stream),
                    peer: Peer::Uid(uid),
                })
            }
        }
    }

    /// What it listens on, as `--ready-fd` and stderr say it.
    pub fn local(&self, asked: &ListenAddr) -> String {
        match self {
            Self::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| asked.to_string(), |a| a.to_string()),
            Self::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }
}

impl Drop for Listener {
    /// The socket file goes with serve (if it is still ours).
    fn drop(&mut self) {
        if let Self::Unix(_, path) = self {
            let _ = remove_stale_socket(path);
        }
    }
}

/// Removes a socket of innoprof's user at `path`; anything else there is
/// an error (nothing is removed).
fn remove_stale_socket(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_socket() || meta.uid() != euid {
        bail!(
            "{} exists and is not a socket of innoprof's user: choose another --listen",
            path.display()
        );
    }
    std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))
}

/// A TCP or unix connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, data),
            Self::Unix(s) => Pin::new(s).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The bearer token `/debug/pprof/*` and `/findings` require.
pub struct AuthToken(Vec<u8>);

/// Longest token file read: a token is a line, not a file's worth.
const TOKEN_FILE_LIMIT: u64 = 4096;

impl AuthToken {
    /// Reads the token (the file's first line, trimmed) from `path`: a
    /// regular file of innoprof's user (not a link) that no other user can
    /// read or anyone else write, as an ssh key is checked.
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read;
        let shown = path.display();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("--auth-token-file {shown}"))?;
        let meta = file.metadata()?;
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_file() {
            bail!("--auth-token-file {shown} is not a regular file");
        }
        if meta.uid() != euid {
            bail!(
                "--auth-token-file {shown} is owned by uid {}, not innoprof's user",
                meta.uid()
            );
        }
        if meta.mode() & 0o027 != 0 {
            bail!(
                "--auth-token-file {shown} is mode {:o}: others must not read it, nor the group \
                 write it (chmod 600)",
                meta.mode() & 0o777
            );
        }
        let mut text = String::new();
        file.take(TOKEN_FILE_LIMIT)
            .read_to_string(&mut text)
            .with_context(|| format!("--auth-token-file {shown}"))?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            bail!(
                "--auth-token-file {shown}: the token must be one line of at least 16 printable \
                 characters (e.g. `openssl rand -hex 32`)"
            );
        }
        Ok(Self(token.as_bytes().to_vec()))
    }

    /// Whether an `Authorization` header value carries the token
    /// (`Bearer TOKEN`), compared in constant time.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        let given = given.trim_ascii();
        // Lengths may differ in time: the token's length is no secret
        // worth keeping, its bytes are.
        given.len() == self.0.len()
            && given
                .iter()
                .zip(&self.0)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// Paths that need the token when one is set: what can reveal code paths,
/// statements, or cost the server (on-CPU profiles). /metrics stays open:
/// Prometheus scrapes it.
pub fn needs_token(path: &str) -> bool {
    path.starts_with("/debug/") || path == "/findings" || path.starts_with("/findings/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:9707"),
            Ok(ListenAddr::Tcp("127.0.0.1:9707".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("unix:/run/innoprof.sock"),
            Ok(ListenAddr::Unix("/run/innoprof.sock".into()))
        );
        assert!(parse_listen("unix:rel.sock").is_err());
        assert!(parse_listen("localhost").is_err());
        // As exporters take it: every interface (serve then wants
        // --listen-any), and a name resolved.
        assert_eq!(
            parse_listen(":9707"),
            Ok(ListenAddr::Tcp("0.0.0.0:9707".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("localhost:9707"),
            Ok(ListenAddr::Tcp("127.0.0.1:9707".parse().unwrap()))
        );
        assert!(parse_listen(":http").is_err());
        assert!(parse_listen("localhost:99999").is_err());
        assert!(parse_listen("[::1]:9707").is_ok());
    }

    #[test]
    fn the_token_is_checked_exactly() {
        let t = AuthToken(b"0123456789abcdef".to_vec());
        assert!(t.admits(Some(b"Bearer 0123456789abcdef")));
        assert!(!t.admits(Some(b"Bearer 0123456789abcdeF")));
        assert!(!t.admits(Some(b"Bearer 0123456789abcde")));
        assert!(!t.admits(Some(b"Basic 0123456789abcdef")));
        assert!(!t.admits(None));
    }

    #[test]
    fn token_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile_dir();
        let path = dir.join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = AuthToken::read(&path).err().unwrap().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(AuthToken::read(&path)
            .unwrap()
            .admits(Some(b"Bearer 0123456789abcdef0123")));
        let link = dir.join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(AuthToken::read(&link).is_err(), "a link is not followed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("innoprof-listen-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn what_needs_the_token() {
        assert!(needs_token("/debug/pprof/profile"));
        assert!(needs_token("/findings"));
        assert!(!needs_token("/metrics"));
        assert!(!needs_token("/"));
    }
}

//! How innoprof reaches the target's SQL interface: its own listening
//! Unix socket (found from the process's open files, or given), checked to
//! be the target's by the peer's credentials, with a user and password from
//! the usual client option files or `MYSQL_PWD` — never from innoprof's
//! command line, where `ps` would show it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::target::trust::{Trust, Untrusted};

/// How to log in, as given on the command line (all optional).
#[derive(Debug, Clone, Default)]
pub struct StateSource {
    /// `--mysql-socket`: the socket path as the target sees it.
    pub socket: Option<PathBuf>,
    /// `--mysql-user` (else the option files' `user`, else `root`).
    pub user: Option<String>,
    /// `--mysql-defaults-file`: read only this option file.
    pub defaults_file: Option<PathBuf>,
    /// Whose servers get a login ([`crate::target::trust`]).
    pub trust: Trust,
}

#[derive(Debug, Error)]
pub enum ConnectError {
    #[error("pid {pid} did not answer over SQL within {} s", after.as_secs())]
    NoAnswer { pid: u32, after: Duration },
    #[error("--mysql-socket {0} is relative; give the absolute path as the server sees it")]
    RelativeSocket(String),
    #[error("no listening Unix socket found among pid {pid}'s open files; give --mysql-socket")]
    NoSocket { pid: u32 },
    #[error("socket {path} is served by pid {peer}, not the target (pid {pid})")]
    NotTheTarget { path: String, peer: i32, pid: u32 },
    /// Nothing was sent: no login, no password.
    #[error("not logging in: {0}")]
    Untrusted(#[from] Untrusted),
    #[error("socket {path}")]
    Socket {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("option file {path}")]
    OptionFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("logging in as {user} on {path} (set a password in [client] of ~/.my.cnf or MYSQL_PWD, or choose --mysql-user)")]
    Login {
        user: String,
        path: String,
        #[source]
        source: SqlError,
    },
    /// Not a refusal: no answer within [`QUERY_TIMEOUT`], or the
    /// connection broke.
    #[error("talking to the server on {path} as {user} (no answer within {} s, or the connection broke)", QUERY_TIMEOUT.as_secs())]
    Unanswered {
        user: String,
        path: String,
        #[source]
        source: SqlError,
    },
}

/// A mysql crate error in plain words. Its own `Display` wraps the
/// message in Rust-like text (`IoError { Resource temporarily unavailable
/// (os error 11) }`), and its cause is reachable only through the
/// deprecated `Error::cause`, so an error chain ended at that text. This
/// one's text is the whole message (the driver's error stays in `.0`).
#[derive(Debug)]
pub struct SqlError(pub mysql::Error);

impl SqlError {
    /// No answer in time, or the connection broke: every later query on
    /// the connection would fail (or wait) the same way.
    pub fn is_unanswered(&self) -> bool {
        self.io_kind().is_some()
    }

    /// The kind of the I/O error under it, if any: a read timeout inside
    /// a packet's framing comes wrapped by the codec (a stopped server's
    /// end snapshot failed as `CodecError`, so it read as answered).
    fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match &self.0 {
            mysql::Error::IoError(e) => Some(e.kind()),
            mysql::Error::CodecError(e) => std::error::Error::source(e)?
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            _ => None,
        }
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        // The read timeout (SO_RCVTIMEO) reads as EAGAIN.
        if matches!(self.io_kind(), Some(WouldBlock | TimedOut)) {
            return write!(
                f,
                "the server did not answer within {} s",
                QUERY_TIMEOUT.as_secs()
            );
        }
        match &self.0 {
            mysql::Error::IoError(e) => write!(f, "{e}"),
            mysql::Error::CodecError(e) => write!(f, "{e}"),
            mysql::Error::MySqlError(e) => write!(f, "{e}"),
            mysql::Error::DriverError(e) => write!(f, "{e}"),
            mysql::Error::UrlError(e) => write!(f, "{e}"),
            other => write!(f, "{other}"),
        }
    }
}

impl std::error::Error for SqlError {}

/// The option-file groups the `mysql` and `mariadb` clients read, in
/// either server family: MySQL's `[client]` and `[mysql]`, MariaDB's
/// `[client-server]` (shared with the server), `[client-mariadb]` and
/// `[mariadb-client]`. Later settings override earlier ones, whatever
/// their group, as the clients apply them.
const CLIENT_GROUPS: &[&str] = &[
    "client",
    "mysql",
    "client-server",
    "client-mariadb",
    "mariadb-client",
];

/// Client settings read from option files' [`CLIENT_GROUPS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    pub user: Option<String>,
    pub password: Option<String>,
    pub socket: Option<String>,
}

/// Option files the `mysql` client reads by default, in order (later
/// files override earlier ones), plus root's own `~/.my.cnf`.
fn default_option_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["/etc/my.cnf", "/etc/mysql/my.cnf"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    files.push(
        home.unwrap_or_else(|| PathBuf::from("/root"))
            .join(".my.cnf"),
    );
    files
}

/// An option file innoprof may take a password from: a regular file
/// (symlinks followed, as the client does) owned by root or by the user
/// running innoprof, writable by no one else.
fn trusted_option_file(path: &Path) -> Result<bool, std::io::Error> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    Ok(meta.is_file() && (meta.uid() == 0 || meta.uid() == me) && meta.mode() & 0o022 == 0)
}

impl ClientOptions {
    /// The given file alone (`--mysql-defaults-file`, which must exist), or
    /// the default files that exist and are trusted.
    pub fn read(defaults_file: Option<&Path>) -> Result<Self, ConnectError> {
        let mut opts = Self::default();
        let err = |p: &Path, source| ConnectError::OptionFile {
            path: p.display().to_string(),
            source,
        };
        match defaults_file {
            Some(p) => {
                if !trusted_option_file(p).map_err(|e| err(p, e))? {
                    return Err(err(
                        p,
                        std::io::Error::other(
                            "not a regular file of root's (or yours) writable by no one else",
                        ),
                    ));
                }
                opts.read_file(p, 0).map_err(|e| err(p, e))?;
            }
            None => {
                for p in default_option_files() {
                    // An unreadable or untrusted default file is skipped, as
                    // the client skips a missing one.
                    if trusted_option_file(&p).unwrap_or(false) {
                        let _ = opts.read_file(&p, 0);
                    }
                }
            }
        }
        if let Ok(pw) = std::env::var("MYSQL_PWD") {
            opts.password = Some(pw);
        }
        Ok(opts)
    }

    fn read_file(&mut self, path: &Path, depth: u32) -> std::io::Result<()> {
        // `!include` nests; a loop of includes stops here.
        if depth > 8 {
            return Ok(());
        }
        let meta = std::fs::metadata(path)?;
        if meta.len() > 1 << 20 {
            return Err(std::io::Error::other("larger than 1 MiB"));
        }
        let text = std::fs::read_to_string(path)?;
        let dir = path.parent().unwrap_or(Path::new("/"));
        for include in self.parse(&text) {
            match include {
                Include::File(f) => {
                    let p = dir.join(f);
                    if trusted_option_file(&p).unwrap_or(false) {
                        let _ = self.read_file(&p, depth + 1);
                    }
                }
                Include::Dir(d) => {
                    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(d))
                        .map(|rd| {
                            rd.filter_map(|e| e.ok().map(|e| e.path()))
                                .filter(|p| p.extension().is_some_and(|x| x == "cnf"))
                                .collect()
                        })
                        .unwrap_or_default();
                    files.sort();
                    for p in files {
                        if trusted_option_file(&p).unwrap_or(false) {
                            let _ = self.read_file(&p, depth + 1);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies one file's [`CLIENT_GROUPS`] settings; returns its
    /// `!include`/`!includedir` lines, in order.
    fn parse(&mut self, text: &str) -> Vec<Include> {
        let mut includes = Vec::new();
        let mut in_client = false;
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("!includedir") {
                includes.push(Include::Dir(rest.trim().to_string()));
                continue;
            }
            if let Some(rest) = line.strip_prefix("!include") {
                includes.push(Include::File(rest.trim().to_string()));
                continue;
            }
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                in_client = CLIENT_GROUPS.contains(&section.trim());
                continue;
            }
            if !in_client {
                continue;
            }
            let (key, value) = match line.split_once('=') {
                Some((k, v)) => (k.trim(), unquote(v.trim())),
                None => (line, String::new()),
            };
            // Options may be spelt with `-` or `_`.
            match key.replace('-', "_").as_str() {
                "user" => self.user = Some(value),
                "password" => self.password = Some(value),
                "socket" => self.socket = Some(value),
                _ => {}
            }
        }
        includes
    }
}

enum Include {
    File(String),
    Dir(String),
}

/// A value as the client reads it: quotes removed, `\` escapes inside
/// quotes resolved; unquoted, a trailing ` # comment` dropped.
fn unquote(v: &str) -> String {
    let mut chars = v.chars();
    match chars.next() {
        Some(q @ ('"' | '\'')) => {
            let mut out = String::new();
            let mut escaped = false;
            for c in chars {
                match (escaped, c) {
                    (true, 'n') => out.push('\n'),
                    (true, 't') => out.push('\t'),
                    (true, c) => out.push(c),
                    (false, '\\') => {
                        escaped = true;
                        continue;
                    }
                    (false, c) if c == q => break,
                    (false, c) => out.push(c),
                }
                escaped = false;
            }
            out
        }
        _ => match v.find(" #") {
            Some(i) => v[..i].trim_end().to_string(),
            None => v.to_string(),
        },
    }
}

/// Listening Unix sockets the target holds open, with the path each is
/// bound to (as the target sees it), from `/proc/PID/fd` and
/// `/proc/PID/net/unix`.
pub fn listening_sockets(pid: u32) -> Vec<String> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path()) {
                let link = link.to_string_lossy();
                if let Some(ino) = link
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    inodes.insert(ino);
                }
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    parse_net_unix(&table)
        .into_iter()
        .filter(|(ino, _)| inodes.contains(ino))
        .map(|(_, path)| path)
        .collect()
}

/// (inode, path) of listening sockets bound to a path in a
/// `/proc/net/unix` table:
/// `Num RefCount Protocol Flags Type St Inode Path`, flag `00010000` being
/// `__SO_ACCEPTCON` (listening); abstract names (`@…`) are not paths.
fn parse_net_unix(table: &str) -> Vec<(u64, String)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (flags, inode, path) = (f.get(3)?, f.get(6)?, f.get(7)?);
            let listening = u32::from_str_radix(flags, 16).ok()? & 0x0001_0000 != 0;
            (listening && path.starts_with('/'))
                .then(|| Some((inode.parse().ok()?, path.to_string())))?
        })
        .collect()
}

/// The process serving a connected Unix socket and its user (`SO_PEERCRED`).
fn peer_cred(stream: &std::os::unix::net::UnixStream) -> std::io::Result<(i32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket fd and a buffer of the size given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}

/// How long one connect or query may take: capture must never hold up a
/// recording (or a server in trouble) for long.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(3);

/// A read-only session on the target, and which socket and user it used.
pub struct SqlSession {
    pub conn: mysql::Conn,
    pub socket: String,
    pub user: String,
}

/// Connects to the target `pid` over its own Unix socket: the given one,
/// else the option files' `socket` if the target listens on it, else the
/// target's only (or first) listening socket. Nothing is sent, not even a
/// user name, unless the target is trusted to receive a password
/// ([`Trust::check_login`]) and the socket is served by that very process
/// as its user (the peer's credentials), so neither a path the target names
/// nor a process another user runs under a server's name gets root's
/// password. As root, a login without a password is tried first (MariaDB's
/// `unix_socket` and MySQL's `auth_socket` let root in by its uid), so the
/// password is sent only where it is needed.
pub fn connect(pid: u32, source: &StateSource) -> Result<SqlSession, ConnectError> {
    let trusted = source.trust.check_login(pid)?;
    let opts = ClientOptions::read(source.defaults_file.as_deref())?;
    let listening = listening_sockets(pid);
    let socket = match (&source.socket, &opts.socket) {
        (Some(s), _) if s.is_relative() => {
            return Err(ConnectError::RelativeSocket(s.display().to_string()))
        }
        (Some(s), _) => s.to_string_lossy().into_owned(),
        (None, Some(s)) if listening.iter().any(|l| l == s) => s.clone(),
        _ => listening
            .first()
            .cloned()
            .ok_or(ConnectError::NoSocket { pid })?,
    };
    // The path as innoprof reaches it: inside the target's root.
    let reach = format!("/proc/{pid}/root{socket}");
    let sock_err = |source| ConnectError::Socket {
        path: socket.clone(),
        source,
    };
    let probe = std::os::unix::net::UnixStream::connect(&reach).map_err(sock_err)?;
    let (peer, peer_uid) = peer_cred(&probe).map_err(sock_err)?;
    drop(probe);
    if u32::try_from(peer) != Ok(pid) {
        return Err(ConnectError::NotTheTarget {
            path: socket,
            peer,
            pid,
        });
    }
    crate::target::trust::check_peer(pid, trusted, peer, peer_uid)?;
    let user = source
        .user
        .clone()
        .or(opts.user)
        .unwrap_or_else(|| "root".into());
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0 && user == "root";
    let login = |password: Option<String>| {
        mysql::Conn::new(
            mysql::OptsBuilder::new()
                .socket(Some(reach.clone()))
                .user(Some(user.clone()))
                .pass(password)
                .read_timeout(Some(QUERY_TIMEOUT))
                .write_timeout(Some(QUERY_TIMEOUT))
                // No reconnect over TCP to look for the socket: it is given.
                .prefer_socket(false)
                .stmt_cache_size(0)
                .connect_attrs(Some(HashMap::from([("program_name", "innoprof")]))),
        )
    };
    let first = match (&opts.password, as_root) {
        (Some(_), true) => login(None),
        (password, _) => login(password.clone()),
    };
    let conn = match first {
        // Root by its uid was refused (the account wants its password):
        // the password, to the same verified server.
        Err(mysql::Error::MySqlError(_)) if as_root && opts.password.is_some() => {
            login(opts.password)
        }
        other => other,
    }
    .map_err(|source| {
        let (user, path) = (user.clone(), socket.clone());
        let said_no = matches!(source, mysql::Error::MySqlError(_));
        let source = SqlError(source);
        if said_no {
            // The server answered, and said no (access denied, unknown user…).
            ConnectError::Login { user, path, source }
        } else {
            ConnectError::Unanswered { user, path, source }
        }
    })?;
    Ok(SqlSession { conn, socket, user })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's errors read as what happened, not as its debug text.
    #[test]
    fn sql_errors_read_plainly() {
        let timeout = SqlError(mysql::Error::IoError(std::io::ErrorKind::WouldBlock.into()));
        assert_eq!(
            crate::error_chain(&timeout),
            "the server did not answer within 3 s"
        );
        assert!(timeout.is_unanswered());
        // The same timeout met inside a packet, wrapped by the codec.
        let framed = SqlError(mysql::Error::CodecError(
            std::io::Error::from(std::io::ErrorKind::WouldBlock).into(),
        ));
        assert!(framed.is_unanswered());
        assert_eq!(framed.to_string(), "the server did not answer within 3 s");
        let broken = SqlError(mysql::Error::IoError(std::io::Error::from_raw_os_error(
            libc::EPIPE,
        )));
        assert_eq!(broken.to_string(), "Broken pipe (os error 32)");
        let driver = SqlError(mysql::Error::DriverError(
            mysql::DriverError::PacketOutOfSync,
        ));
        assert!(!driver.is_unanswered());
        assert!(!driver.to_string().contains("DriverError"), "{driver}");
    }

    #[test]
    fn reads_client_sections_with_quotes_and_comments() {
        let mut o = ClientOptions::default();
        let inc = o.parse(
            "[mysqld]\nuser=mysql\nsocket=/srv/x.sock\n\
             [client]\nuser = dba\npassword=\"p#w \\\"q\\\"\"\n# comment\n\
             socket=/run/mysqld/mysqld.sock # the server's\n\
             [mysql]\nno-auto-rehash\n!includedir /etc/mysql/conf.d/\n",
        );
        assert_eq!(o.user.as_deref(), Some("dba"));
        assert_eq!(o.password.as_deref(), Some("p#w \"q\""));
        assert_eq!(o.socket.as_deref(), Some("/run/mysqld/mysqld.sock"));
        assert!(matches!(&inc[..], [Include::Dir(d)] if d == "/etc/mysql/conf.d/"));
    }

    #[test]
    fn finds_listening_path_sockets_only() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 4711 /tmp/d/mysql.sock\n\
            0000000000000000: 00000002 00000000 00000000 0001 03 4712 /tmp/d/mysql.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 4713 @abstract\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 4714\n";
        assert_eq!(
            parse_net_unix(table),
            vec![(4711, "/tmp/d/mysql.sock".to_string())]
        );
    }

    /// Each group a mysql or mariadb client reads is read; a server's or
    /// another program's is not.
    #[test]
    fn reads_every_client_group_and_no_other() {
        for group in CLIENT_GROUPS {
            let mut o = ClientOptions::default();
            o.parse(&format!("[{group}]\nuser=u_{group}\npassword=p\n"));
            assert_eq!(o.user, Some(format!("u_{group}")), "[{group}]");
            assert_eq!(o.password.as_deref(), Some("p"), "[{group}]");
        }
        for group in ["mysqld", "mariadb", "server", "mysqldump", "client-mysqld"] {
            let mut o = ClientOptions::default();
            o.parse(&format!("[{group}]\nuser=x\n"));
            assert_eq!(o, ClientOptions::default(), "[{group}]");
        }
    }

    /// `!include FILE` and `!includedir DIR` (its `*.cnf`, in name order)
    /// are read, each file under the same trust rule; a later one wins.
    #[test]
    fn includes_are_read_in_order() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("conf.d")).unwrap();
        let write = |name: &str, text: &str| {
            std::fs::write(d.join(name), text).unwrap();
            std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write(
            "main.cnf",
            "[client]\nuser=a\n!include extra.cnf\n!includedir conf.d\n",
        );
        write("extra.cnf", "[client-server]\nuser=b\nsocket=/s\n");
        write("conf.d/1.cnf", "[mariadb-client]\nuser=c\n");
        write("conf.d/2.cnf", "[client-mariadb]\npassword=q\n");
        write("conf.d/3.txt", "[client]\nuser=ignored\n");
        // Others may write it: skipped, as a default file would be.
        write("conf.d/4.cnf", "[client]\nuser=evil\n");
        std::fs::set_permissions(
            d.join("conf.d/4.cnf"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let o = ClientOptions::read(Some(&d.join("main.cnf"))).unwrap();
        assert_eq!(o.user.as_deref(), Some("c"));
        assert_eq!(o.socket.as_deref(), Some("/s"));
        if std::env::var_os("MYSQL_PWD").is_none() {
            assert_eq!(o.password.as_deref(), Some("q"));
        }
    }

    /// A file others may write is not read for a password.
    #[test]
    fn an_option_file_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "[client]\npassword=x\n").unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            ClientOptions::read(Some(f.path())),
            Err(ConnectError::OptionFile { .. })
        ));
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = ClientOptions::read(Some(f.path())).unwrap();
        if std::env::var_os("MYSQL_PWD").is_none() {
            assert_eq!(o.password.as_deref(), Some("x"));
        }
    }
}

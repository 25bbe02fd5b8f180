//! Which processes innoprof acts on. innoprof runs as root and, asked to,
//! logs in to the server with root's option-file password and reads its
//! binary; a process an ordinary user started (a copy of mariadbd named
//! `mysqld`, or the real binary under LD_PRELOAD) must get neither. So a
//! target is trusted before innoprof attaches to it or logs in:
//!
//! - every uid of the process (real, effective, saved, file system) is a
//!   trusted user: root, the `mysql` account distributions run servers as,
//!   or one named with `--trust-user`;
//! - its executable is owned by root or a trusted user and writable by no
//!   group or other (a binary anyone could rewrite proves nothing);
//! - to log in, also its data directory (its working directory: mysqld
//!   chdirs there) is owned by the process's user or root and not writable
//!   by others, and the socket is served by that very process and user.
//!
//! The checks read the kernel's own references (`/proc/PID/status`, the
//! `exe` and `cwd` links, `SO_PEERCRED`), never a path string a target can
//! stage in its own mount namespace.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Users whose processes innoprof acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// Besides root, which is always trusted.
    uids: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("--trust-user {0}: no such user in /etc/passwd (give a name or a numeric uid)")]
    UnknownUser(String),
}

/// Why a process is not acted on. Each says what would change it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("pid {pid} runs as {user}, not root or a trusted user ({trusted}); if that user's servers are yours, add --trust-user {user}")]
    ProcessUser {
        pid: u32,
        user: String,
        trusted: String,
    },
    #[error("pid {pid}'s executable {exe} is owned by {owner}, not root or a trusted user ({trusted}); if it is yours, add --trust-user {owner}")]
    ExecutableOwner {
        pid: u32,
        exe: String,
        owner: String,
        trusted: String,
    },
    #[error("pid {pid}'s executable {exe} is writable by group or others (mode {mode:o})")]
    ExecutableWritable { pid: u32, exe: String, mode: u32 },
    #[error("pid {pid}'s data directory {dir} is owned by {owner}, neither root nor the server's user {user}")]
    DatadirOwner {
        pid: u32,
        dir: String,
        owner: String,
        user: String,
    },
    #[error("pid {pid}'s data directory {dir} is writable by others (mode {mode:o})")]
    DatadirWritable { pid: u32, dir: String, mode: u32 },
    #[error("the socket is served by pid {peer} as {peer_user}, not by the target (pid {pid} as {user})")]
    SocketPeer {
        pid: u32,
        user: String,
        peer: i32,
        peer_user: String,
    },
    #[error("pid {pid}: cannot check who runs it ({why})")]
    Unreadable { pid: u32, why: String },
}

/// A process found trustworthy: its (single) uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    pub uid: u32,
}

impl Default for Trust {
    /// Root and the `mysql` account, where this host has one.
    fn default() -> Self {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        Self {
            uids: uid_of(&passwd, "mysql").into_iter().collect(),
        }
    }
}

impl Trust {
    /// The default users plus each of `users` (names or numeric uids).
    pub fn with_users(users: &[String]) -> Result<Self, TrustError> {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let mut trust = Self::default();
        for u in users {
            let uid = u
                .parse::<u32>()
                .ok()
                .or_else(|| uid_of(&passwd, u))
                .ok_or_else(|| TrustError::UnknownUser(u.clone()))?;
            if !trust.uids.contains(&uid) {
                trust.uids.push(uid);
            }
        }
        Ok(trust)
    }

    fn trusts(&self, uid: u32) -> bool {
        uid == 0 || self.uids.contains(&uid)
    }

    fn trusted_list(&self) -> String {
        let mut names = vec!["root".to_string()];
        names.extend(self.uids.iter().map(|&u| user_name(u)));
        names.join(", ")
    }

    /// May innoprof attach to `pid` (or read its binary)? `exe`: the
    /// executable as opened through `/proc/PID/exe` (the kernel's file,
    /// not a path looked up again).
    pub fn check_process(&self, pid: u32, exe: &std::fs::Metadata) -> Result<Trusted, Untrusted> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| {
            Untrusted::Unreadable {
                pid,
                why: e.to_string(),
            }
        })?;
        let uids = status_uids(&status).ok_or_else(|| Untrusted::Unreadable {
            pid,
            why: "no Uid line in /proc/PID/status".into(),
        })?;
        // Any uid that differs from the rest (a setuid program mid-switch)
        // or is untrusted: the untrusted one is named.
        if let Some(&bad) = uids.iter().find(|&&u| !self.trusts(u) || u != uids[0]) {
            let bad = if self.trusts(bad) { uids[0] } else { bad };
            return Err(Untrusted::ProcessUser {
                pid,
                user: user_name(bad),
                trusted: self.trusted_list(),
            });
        }
        let exe_path = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| shown(&p.to_string_lossy()))
            .unwrap_or_else(|_| "?".into());
        if !self.trusts(exe.uid()) {
            return Err(Untrusted::ExecutableOwner {
                pid,
                exe: exe_path,
                owner: user_name(exe.uid()),
                trusted: self.trusted_list(),
            });
        }
        if exe.mode() & 0o022 != 0 {
            return Err(Untrusted::ExecutableWritable {
                pid,
                exe: exe_path,
                mode: exe.mode() & 0o7777,
            });
        }
        Ok(Trusted { uid: uids[0] })
    }

    /// [`Self::check_process`] with the executable looked up through the
    /// kernel's `exe` link.
    pub fn check_pid(&self, pid: u32) -> Result<Trusted, Untrusted> {
        let exe =
            std::fs::metadata(format!("/proc/{pid}/exe")).map_err(|e| Untrusted::Unreadable {
                pid,
                why: format!("its executable: {e}"),
            })?;
        self.check_process(pid, &exe)
    }

    /// May innoprof log in to `pid` with a password? The process as in
    /// [`Self::check_pid`], and its data directory its own.
    pub fn check_login(&self, pid: u32) -> Result<Trusted, Untrusted> {
        let trusted = self.check_pid(pid)?;
        let cwd = Path::new("/proc").join(pid.to_string()).join("cwd");
        let dir = std::fs::read_link(&cwd)
            .map(|p| shown(&p.to_string_lossy()))
            .unwrap_or_else(|_| "?".into());
        let meta = std::fs::metadata(&cwd).map_err(|e| Untrusted::Unreadable {
            pid,
            why: format!("its data directory: {e}"),
        })?;
        if meta.uid() != 0 && meta.uid() != trusted.uid {
            return Err(Untrusted::DatadirOwner {
                pid,
                dir,
                owner: user_name(meta.uid()),
                user: user_name(trusted.uid),
            });
        }
        if meta.mode() & 0o002 != 0 {
            return Err(Untrusted::DatadirWritable {
                pid,
                dir,
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(trusted)
    }
}

/// The socket's server, by its credentials, is the trusted target itself.
pub fn check_peer(
    pid: u32,
    trusted: Trusted,
    peer_pid: i32,
    peer_uid: u32,
) -> Result<(), Untrusted> {
    if u32::try_from(peer_pid) == Ok(pid) && peer_uid == trusted.uid {
        return Ok(());
    }
    Err(Untrusted::SocketPeer {
        pid,
        user: user_name(trusted.uid),
        peer: peer_pid,
        peer_user: user_name(peer_uid),
    })
}

/// Real, effective, saved and file-system uids from `/proc/PID/status`.
fn status_uids(status: &str) -> Option<[u32; 4]> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|f| f.parse::<u32>().ok());
    Some([ids.next()??, ids.next()??, ids.next()??, ids.next()??])
}

/// A user's uid from an `/etc/passwd` text.
fn uid_of(passwd: &str, name: &str) -> Option<u32> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// A name from a target or /etc/passwd, its control characters replaced,
/// for a one-line message on root's terminal.
fn shown(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `name (uid N)`, or `uid N` for a user /etc/passwd does not list.
pub fn user_name(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.splitn(4, ':').collect();
        (f.get(2)?.parse::<u32>().ok()? == uid).then(|| f[0].to_string())
    });
    match name {
        Some(n) => format!("{} (uid {uid})", shown(&n)),
        None => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_uids_and_users() {
        let status = "Name:\tmysqld\nUid:\t999\t999\t999\t999\nGid:\t999\t999\t999\t999\n";
        assert_eq!(status_uids(status), Some([999; 4]));
        assert_eq!(status_uids("Name:\tx\n"), None);
        let passwd = "root:x:0:0:root:/root:/bin/bash\nmysql:x:105:110::/nonexistent:/bin/false\n";
        assert_eq!(uid_of(passwd, "mysql"), Some(105));
        assert_eq!(uid_of(passwd, "mysq"), None);
        assert_eq!(uid_of(passwd, "nobody"), None);
    }

    #[test]
    fn this_root_test_process_is_trusted_and_others_are_not() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let me = std::process::id();
        let trust = Trust { uids: vec![] };
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        // The test binary is root's (cargo ran as root) unless it is
        // group- or world-writable, which cargo does not make it.
        assert_eq!(trust.check_process(me, &exe), Ok(Trusted { uid: 0 }));
        // An executable owned by another user: refused, named.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"").unwrap();
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        let err = trust
            .check_process(me, &std::fs::metadata(&f).unwrap())
            .unwrap_err();
        assert!(matches!(err, Untrusted::ExecutableOwner { .. }), "{err}");
        assert!(err.to_string().contains("--trust-user"), "{err}");
        // ... unless that user is trusted, while writable by others is never.
        let trust65534 = Trust { uids: vec![65534] };
        assert!(trust65534
            .check_process(me, &std::fs::metadata(&f).unwrap())
            .is_ok());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o757)).unwrap();
        let err = trust65534
            .check_process(me, &std::fs::metadata(&f).unwrap())
            .unwrap_err();
        assert!(
            matches!(err, Untrusted::ExecutableWritable { mode: 0o757, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_peer_must_be_the_target_as_its_user() {
        let t = Trusted { uid: 105 };
        assert!(check_peer(10, t, 10, 105).is_ok());
        assert!(check_peer(10, t, 11, 105).is_err());
        assert!(check_peer(10, t, 10, 1000).is_err());
    }

    #[test]
    fn unknown_trusted_users_are_refused() {
        assert!(matches!(
            Trust::with_users(&["no-such-user-innoprof".into()]),
            Err(TrustError::UnknownUser(_))
        ));
        let t = Trust::with_users(&["4242".into()]).unwrap();
        assert!(t.trusts(4242) && t.trusts(0) && !t.trusts(4243));
    }
}

//! How to reach the target's SQL interface for its own state (InnoDB
//! status, transactions, tables without a primary key, settings): optional,
//! on by default through the target's own socket and the usual client
//! option files; never a password on the command line.

use std::path::PathBuf;

use clap::Args;
use innoprof::model::server_state::ServerState;
use innoprof::server_state::{self, SamplingCapture, StateCapture, StateSource};
use innoprof::target::trust::Trust;

#[derive(Args, Clone, Debug)]
pub struct StateArgs {
    /// Unix socket of the server (default: the one it listens on, found from its open files).
    #[arg(long, value_name = "PATH")]
    pub mysql_socket: Option<PathBuf>,
    /// SQL user for reading the server's state (default: `user` in the client groups of the option
    /// files, else root). The password comes from the option files (/etc/my.cnf,
    /// /etc/mysql/my.cnf, ~/.my.cnf, their !include) or MYSQL_PWD.
    #[arg(long, value_name = "USER")]
    pub mysql_user: Option<String>,
    /// Read login options from this file only (like the client's --defaults-file).
    #[arg(long, value_name = "PATH")]
    pub mysql_defaults_file: Option<PathBuf>,
    /// Do not log in to the server to read its state (InnoDB status, transactions, settings).
    #[arg(long, conflicts_with_all = ["mysql_socket", "mysql_user", "mysql_defaults_file"])]
    pub no_server_state: bool,
}

/// A started capture, or why there is none.
pub enum Capture {
    Off,
    Failed(Box<ServerState>),
    On(StateCapture),
    /// Reading the cheap state at each `--interval` as well.
    Sampling(SamplingCapture),
}

impl StateArgs {
    fn source(&self, trust: &Trust) -> StateSource {
        StateSource {
            socket: self.mysql_socket.clone(),
            user: self.mysql_user.clone(),
            defaults_file: self.mysql_defaults_file.clone(),
            trust: trust.clone(),
        }
    }

    /// For `serve`: a watcher snapshotting the state every `period`, or
    /// None with `--no-server-state`.
    pub fn watcher(
        &self,
        pid: u32,
        period: std::time::Duration,
        trust: &Trust,
    ) -> Option<server_state::StateWatcher> {
        (!self.no_server_state)
            .then(|| server_state::StateWatcher::start(pid, self.source(trust), period))
    }

    /// Logs in and takes the start snapshot; a failure is said on stderr
    /// and kept (summary.json says why there is no state), never fatal.
    pub fn start(&self, pid: u32, trust: &Trust) -> Capture {
        if self.no_server_state {
            return Capture::Off;
        }
        match StateCapture::start_within(pid, &self.source(trust)) {
            Ok(c) => Capture::On(c),
            Err(e) => {
                eprintln!(
                    "innoprof: note: server state not read: {}",
                    innoprof::error_chain(&e)
                );
                Capture::Failed(Box::new(server_state::failed(&e)))
            }
        }
    }
}

impl Capture {
    /// With `Some(interval)`, reads the cheap state at each interval too
    /// (in its own thread) until [`Self::finish`].
    pub fn sampling(self, interval: Option<std::time::Duration>) -> Self {
        match (self, interval) {
            (Capture::On(c), Some(every)) => Capture::Sampling(c.sample_every(every)),
            (other, _) => other,
        }
    }

    /// The end snapshot with the start one; None when capture was off.
    /// An end snapshot missing (the server did not answer) is said on
    /// stderr in one line, as summary.json keeps it.
    pub fn finish(self) -> Option<ServerState> {
        let ended = match self {
            Capture::Off => return None,
            Capture::Failed(s) => return Some(*s),
            Capture::On(c) => c.finish_within(),
            Capture::Sampling(c) => c.finish_within(),
        };
        if let Some(e) = &ended.error {
            eprintln!(
                "innoprof: note: server state: {}",
                innoprof::text::printable(e)
            );
        }
        Some(ended)
    }
}

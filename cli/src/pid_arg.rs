//! `-p/--pid`, shared by the commands that attach to a server: given, or
//! found when exactly one mysqld/mariadbd runs on the host (as `perf top`
//! users expect `-p` to be optional when there is only one candidate).

use anyhow::Result;
use clap::Args;
use innoprof::discover;

#[derive(Args, Clone, Debug)]
pub struct PidArg {
    /// PID of the running mysqld/mariadbd (default: the only one on this host).
    #[arg(short = 'p', long)]
    pub pid: Option<u32>,
}

impl PidArg {
    /// The PID given, or the only server's (said on stderr, so a log shows
    /// which process was chosen).
    pub fn resolve(&self) -> Result<u32> {
        if let Some(pid) = self.pid {
            return Ok(pid);
        }
        let server = discover::the_server()?;
        eprintln!("innoprof: using pid {server}, the only server on this host");
        Ok(server.pid)
    }
}

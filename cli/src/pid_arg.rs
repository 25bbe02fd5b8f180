//! `-p/--pid` and `--trust-user`, shared by the commands that attach to a
//! server: the PID given, or found when exactly one trusted
//! mysqld/mariadbd runs on the host (as `perf top` users expect `-p` to be
//! optional when there is only one candidate); a process run by a user
//! innoprof does not act for is passed over, and said.

use anyhow::Result;
use clap::Args;
use innoprof::target::discover;
use innoprof::target::trust::Trust;

#[derive(Args, Clone, Debug, Default)]
pub struct PidArg {
    /// PID of the running mysqld/mariadbd (default: the only trusted one on this host).
    #[arg(short = 'p', long)]
    pub pid: Option<u32>,
    /// Also act on servers this user runs or owns (name or uid; repeatable). By default
    /// innoprof attaches to and logs in to only servers run by root or `mysql`, from an
    /// executable owned by one of them.
    #[arg(long, value_name = "USER")]
    pub trust_user: Vec<String>,
}

impl PidArg {
    /// The PID given, or the only trusted server's (said on stderr, so a
    /// log shows which process was chosen, and which were passed over).
    pub fn resolve(&self) -> Result<u32> {
        if let Some(pid) = self.pid {
            return Ok(pid);
        }
        let (server, passed_over) = discover::the_server(&self.trust()?)?;
        for (s, why) in passed_over {
            eprintln!("innoprof: skipping {s}: {why}");
        }
        eprintln!("innoprof: using pid {server}, the only server on this host");
        Ok(server.pid)
    }

    /// The users whose servers innoprof acts on.
    pub fn trust(&self) -> Result<Trust> {
        Ok(Trust::with_users(&self.trust_user)?)
    }
}

//! `--ready-fd N`, shared by `record` and `serve`: the machine-readable
//! "attached" signal (see `innoprof::record::ready`); systemd's `READY=1` goes with
//! it whenever `NOTIFY_SOCKET` is set.

use anyhow::Result;
use clap::Args;
use innoprof::record::ready::{Notifier, Ready};

#[derive(Args, Clone, Debug)]
pub struct ReadyArgs {
    /// Once every probe is attached (serve: and /metrics is served), write one JSON line
    /// to descriptor N and close it: innoprof's pid, each target's pid and attached probes
    /// (e.g. `--ready-fd 3 3>ready.json`). Under systemd `Type=notify`, READY=1 is sent too.
    #[arg(long, value_name = "N")]
    pub ready_fd: Option<i32>,
}

impl ReadyArgs {
    /// Takes over the descriptor; a closed one fails before anything is attached.
    pub fn notifier(&self) -> Result<Notifier> {
        Ok(Notifier::new(self.ready_fd)?)
    }
}

/// Sends the signal (once); a reader gone away costs a stderr line, not
/// the recording.
pub fn announce(notifier: &mut Notifier, ready: &Ready) {
    if let Err(e) = notifier.announce(ready) {
        eprintln!("innoprof: {}", innoprof::error_chain(&e));
    }
}

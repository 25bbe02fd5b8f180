//! A finished recording: the summary, the files and stacks beside it.

use crate::model::summary::Summary;

/// A finished recording: its summary and the files and stacks beside it,
/// what `bundle::write` writes (and `segments::merge` joins).
pub struct Recording {
    pub summary: Summary,
    /// (file name, contents): the folded stacks and flame graphs the
    /// recorder rendered, and the server's InnoDB status text.
    pub folded: Vec<(String, String)>,
    /// `record --interval`'s series (timeseries.json and .csv).
    pub timeseries: Option<crate::model::timeseries::TimeSeries>,
    /// The stacks behind the folded files, as named: pprof's source.
    pub stacks: crate::model::named_stack::RecordedStacks,
    /// The machine, read at the start (load at the end too); None where a
    /// recording was not made here (a test's, a bundle's).
    pub host: Option<crate::target::host::HostInfo>,
    /// The stacks as addresses, with what naming them later needs
    /// (`stacks.raw.json`); none for a recording of several server
    /// processes (`record --follow`), whose addresses are each process's.
    pub raw: Option<crate::model::raw_stacks::RawStacks>,
}

impl Recording {
    /// Adds what the server said of itself over SQL: kept in the summary,
    /// SHOW ENGINE INNODB STATUS beside it, and the findings evaluated
    /// again with it (they can then name a transaction or a table).
    pub fn add_server_state(&mut self, state: crate::model::server_state::ServerState) {
        for (when, snap) in [("start", &state.start), ("end", &state.end)] {
            if let Some(text) = snap.as_ref().and_then(|s| s.innodb_status.as_ref()) {
                self.folded
                    .push((crate::model::files::innodb_status_file(when), text.clone()));
            }
        }
        if let Some(who) = self.summary.who.as_mut() {
            let conns: std::collections::HashMap<u64, crate::model::server_state::Connection> =
                [&state.start, &state.end]
                    .into_iter()
                    .flatten()
                    .flat_map(|s| s.connections.iter())
                    .map(|c| (c.id, c.clone()))
                    .collect();
            who.name_users(&conns);
        }
        self.summary.server_state = Some(state);
        self.summary.findings = crate::findings::evaluate(&self.summary);
    }
}

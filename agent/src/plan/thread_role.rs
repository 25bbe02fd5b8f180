//! Who a thread is: a client connection or a named background role.
//!
//! Every thread of mysqld is called `mysqld`, so its name says nothing.
//! What does is the code it runs: a connection's stack passes through
//! `do_command`, a purge worker's starts in `srv_worker_thread`. The BPF
//! side walks a thread's stack at its first hit (and its next ones while
//! no marker is found, up to 16 walks) against the address ranges of these
//! marker functions in the target ([`marker_ranges`]), and keeps the role
//! it found for every later hit of that thread (its call
//! sites, latches and stacks are keyed by it). A stack may hold markers of
//! several roles (MariaDB 11.4's group commit runs `log_writer` inside a
//! connection): the first role in [`ROLES`] wins.

use crate::bpf::abi::{RoleRange, MAX_ROLE_RANGES};
use crate::resolve::elf::ElfImage;
use crate::resolve::pattern::{DemangledName, SymbolPattern};

/// Whether a role is a client's work or the server's own.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RoleKind {
    /// A client connection running statements: waits here are the
    /// contention the workload feels.
    Connection,
    /// A server thread (purge, page cleaner, log writer, ...): its waits
    /// are reported apart, never as the workload's contention.
    Background,
    /// No marker on the thread's stack in up to 16 walks (a stripped
    /// binary, a stack deeper than the walk, a thread innoprof does not
    /// know).
    Unknown,
}

/// A role and the functions that mark it (demangled names without
/// parameters, as `--probe` patterns are written).
#[derive(Debug)]
pub struct RoleSpec {
    pub name: &'static str,
    pub kind: RoleKind,
    pub markers: &'static [&'static str],
}

/// The roles, in the order they win when one stack holds markers of
/// several. Names are those of the servers' sources (MySQL 5.6-8.0,
/// MariaDB 10.2-11.4); a marker absent from a binary is simply not used.
pub const ROLES: &[RoleSpec] = &[
    RoleSpec {
        name: "connection",
        kind: RoleKind::Connection,
        markers: &[
            "do_command",
            "dispatch_command",
            "do_handle_one_connection",
            "handle_one_connection",
            // MySQL 5.7/8.0's thread per connection (static: found in full
            // symbol tables only).
            "handle_connection",
            // A connection's set-up and end, outside `do_command`: a thread
            // first caught logging in (8.0's authentication burns CPU the
            // sampler sees) is a connection all the same. Exported in 8.0's
            // stripped builds, where `handle_connection` is not.
            "thd_prepare_connection",
            "login_connection",
            "end_connection",
            // MariaDB's thread pool (thread_handling=pool-of-threads).
            "tp_callback",
        ],
    },
    RoleSpec {
        name: "purge coordinator",
        kind: RoleKind::Background,
        markers: &["srv_purge_coordinator_thread"],
    },
    RoleSpec {
        name: "purge worker",
        kind: RoleKind::Background,
        markers: &["srv_worker_thread"],
    },
    RoleSpec {
        name: "page cleaner",
        kind: RoleKind::Background,
        markers: &[
            "buf_flush_page_cleaner_coordinator",
            "buf_flush_page_cleaner_worker",
            "buf_flush_page_cleaner_thread",
            "buf_flush_page_cleaner",
            "buf_flush_page_coordinator_thread",
        ],
    },
    RoleSpec {
        name: "log writer",
        kind: RoleKind::Background,
        markers: &[
            "log_writer",
            "log_flusher",
            "log_write_notifier",
            "log_flush_notifier",
            "log_closer",
            "log_checkpointer",
        ],
    },
    RoleSpec {
        name: "master thread",
        kind: RoleKind::Background,
        markers: &["srv_master_thread"],
    },
    RoleSpec {
        name: "I/O handler",
        kind: RoleKind::Background,
        markers: &["io_handler_thread", "fil_aio_wait", "os_aio_handler"],
    },
    RoleSpec {
        name: "buffer pool dump/load",
        kind: RoleKind::Background,
        markers: &["buf_dump_thread"],
    },
    RoleSpec {
        name: "buffer pool resize",
        kind: RoleKind::Background,
        markers: &["buf_resize_thread"],
    },
    RoleSpec {
        name: "statistics",
        kind: RoleKind::Background,
        markers: &["dict_stats_thread"],
    },
    RoleSpec {
        name: "monitor",
        kind: RoleKind::Background,
        markers: &[
            "srv_monitor_thread",
            "srv_error_monitor_thread",
            "lock_wait_timeout_thread",
        ],
    },
    RoleSpec {
        name: "full-text optimize",
        kind: RoleKind::Background,
        markers: &["fts_optimize_thread"],
    },
    RoleSpec {
        name: "replication",
        kind: RoleKind::Background,
        markers: &[
            "handle_slave_io",
            "handle_slave_sql",
            "handle_slave_worker",
            "handle_rpl_parallel_thread",
            "handle_slave_background",
            "ack_receive_handler",
        ],
    },
    RoleSpec {
        name: "binlog",
        kind: RoleKind::Background,
        markers: &["binlog_background_thread"],
    },
    RoleSpec {
        name: "event scheduler",
        kind: RoleKind::Background,
        markers: &["event_scheduler_thread", "Event_scheduler::run"],
    },
    RoleSpec {
        name: "recovery rollback",
        kind: RoleKind::Background,
        markers: &[
            "trx_rollback_or_clean_all_recovered",
            "trx_rollback_all_recovered",
            "trx_recovery_rollback_thread",
        ],
    },
    RoleSpec {
        name: "signal handler",
        kind: RoleKind::Background,
        markers: &["signal_hand"],
    },
    RoleSpec {
        name: "server housekeeping",
        kind: RoleKind::Background,
        markers: &["handle_manager", "timer_handler", "thd_destructor_proxy"],
    },
    // MariaDB 10.6+: purge, the master task, statistics and asynchronous
    // I/O completions are tasks of one pool; a pool thread runs any of
    // them, so its first stack cannot say which it runs later.
    RoleSpec {
        name: "InnoDB task pool",
        kind: RoleKind::Background,
        markers: &["tpool::thread_pool_generic::worker_main"],
    },
    RoleSpec {
        name: "startup/shutdown",
        kind: RoleKind::Background,
        markers: &["mysqld_main"],
    },
];

/// The name shown for role id 0 (and any id not in [`ROLES`]).
pub const UNKNOWN: &str = "unknown";

/// A role id as the BPF side keys it: 1-based index into [`ROLES`], 0
/// for unknown.
pub fn role(id: u32) -> (&'static str, RoleKind) {
    match id.checked_sub(1).and_then(|i| ROLES.get(i as usize)) {
        Some(r) => (r.name, r.kind),
        None => (UNKNOWN, RoleKind::Unknown),
    }
}

/// The role id (1-based, as `marker_ranges` numbers them) of client
/// connections: only their hits belong to statements.
pub fn connection_role_id() -> u32 {
    ROLES
        .iter()
        .position(|r| r.kind == RoleKind::Connection)
        .map_or(0, |i| i as u32 + 1)
}

/// The marker functions of `image` as address ranges in the target
/// (`bias` added: the load bias of a position-independent binary), each
/// with its role id, at most [`MAX_ROLE_RANGES`] (the first roles kept).
/// A range ends one past the function's last byte: a return address
/// there still belongs to its call.
pub fn marker_ranges(image: &ElfImage, bias: u64) -> Vec<RoleRange> {
    let mut found: Vec<RoleRange> = Vec::new();
    for (i, spec) in ROLES.iter().enumerate() {
        let patterns: Vec<SymbolPattern> =
            spec.markers.iter().map(|m| SymbolPattern::new(m)).collect();
        for sym in image.symbols() {
            if sym.size == 0 || !patterns.iter().any(|p| p.may_match(sym.base())) {
                continue;
            }
            let name = DemangledName::of(sym.base());
            if !patterns.iter().any(|p| p.matches(sym.base(), &name)) {
                continue;
            }
            let start = sym.address.wrapping_add(bias);
            let range = RoleRange {
                start,
                end: start + sym.size,
                role: i as u32 + 1,
                pad: 0,
            };
            if !found.iter().any(|r| r.start == range.start) {
                found.push(range);
            }
        }
    }
    found.truncate(MAX_ROLE_RANGES);
    found
}

/// The role of a stack named outermost first (as folded stacks are):
/// what the BPF side finds from the same markers, for stacks it did not
/// classify (the CPU profiler's) and for tests.
pub fn role_of_frames<'a>(frames: impl IntoIterator<Item = &'a str>) -> u32 {
    let mut best = 0u32;
    for frame in frames {
        let short = frame.split('(').next().unwrap_or(frame).trim();
        for (i, spec) in ROLES.iter().enumerate() {
            let id = i as u32 + 1;
            if (best == 0 || id < best) && spec.markers.contains(&short) {
                best = id;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_ids_are_one_based_and_zero_is_unknown() {
        assert_eq!(role(0), (UNKNOWN, RoleKind::Unknown));
        assert_eq!(role(1), ("connection", RoleKind::Connection));
        assert_eq!(role(ROLES.len() as u32 + 1).1, RoleKind::Unknown);
        // Every marker names one role only.
        let mut all: Vec<&str> = ROLES
            .iter()
            .flat_map(|r| r.markers.iter().copied())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a marker listed twice");
    }

    #[test]
    fn a_stack_takes_the_first_role_of_its_markers() {
        // MariaDB 10.2.11's purge worker, as the demo's folded stack reads.
        let worker = [
            "start_thread",
            "srv_worker_thread",
            "srv_resume_thread",
            "sync_array_wait_event",
        ];
        assert_eq!(role(role_of_frames(worker)).0, "purge worker");
        // MariaDB 11.4's group commit: log_writer inside a connection.
        let commit = [
            "start_thread",
            "handle_one_connection",
            "do_handle_one_connection(CONNECT*, bool)",
            "do_command(THD*, bool)",
            "log_write_up_to(unsigned long, bool, completion_callback const*)",
            "log_writer()",
        ];
        assert_eq!(role(role_of_frames(commit)).0, "connection");
        // A pool thread running a purge task is the pool's.
        let task = [
            "start_thread",
            "tpool::thread_pool_generic::worker_main(tpool::worker_data*)",
            "purge_worker_callback(void*)",
        ];
        assert_eq!(role(role_of_frames(task)).0, "InnoDB task pool");
        assert_eq!(role_of_frames(["start_thread", "[unknown]"]), 0);
    }
}

//! The few facts innoprof reads from `SHOW ENGINE INNODB STATUS` text: the
//! history list length, and which transactions hold a read view (the
//! snapshot that keeps purge from removing old row versions). No
//! information_schema table says the latter on every server line; the
//! status text has said it the same way since MySQL 5.1:
//!
//! ```text
//! ---TRANSACTION 421236591612832, ACTIVE 12 sec
//! MySQL thread id 5, OS thread handle 140, query id 123 localhost root
//! Trx read view will not see trx with id >= 1234, sees < 1230
//! ```

use serde::{Deserialize, Serialize};

/// One transaction of the status's TRANSACTIONS section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusTransaction {
    pub trx_id: String,
    /// `ACTIVE N sec`; None for transactions not started.
    pub active_s: Option<u64>,
    /// The connection (processlist id).
    pub thread_id: Option<u64>,
    /// It holds a read view (a consistent-read snapshot).
    pub read_view: bool,
}

/// `History list length N`.
pub fn history_list_length(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.trim().strip_prefix("History list length "))
        .and_then(|n| n.trim().parse().ok())
}

pub fn transactions(status: &str) -> Vec<StatusTransaction> {
    let mut out: Vec<StatusTransaction> = Vec::new();
    for line in status.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("---TRANSACTION ") {
            let (id, state) = rest.split_once(',').unwrap_or((rest, ""));
            let active_s = state
                .trim()
                .strip_prefix("ACTIVE")
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse().ok());
            out.push(StatusTransaction {
                trx_id: id.trim().to_string(),
                active_s,
                thread_id: None,
                read_view: false,
            });
        } else if let Some(trx) = out.last_mut() {
            if let Some(rest) = line.strip_prefix("MySQL thread id ") {
                trx.thread_id = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse().ok());
            } else if line.starts_with("Trx read view will not see") {
                trx.read_view = true;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "\
------------
TRANSACTIONS
------------
Trx id counter 9751
Purge done for trx's n:o < 9736 undo n:o < 0 state: running
History list length 1718
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 421236591612832, not started
0 lock struct(s), heap size 1128, 0 row lock(s)
---TRANSACTION 9749, ACTIVE 0 sec starting index read
mysql tables in use 1, locked 1
MySQL thread id 12, OS thread handle 140, query id 800 localhost root updating
UPDATE sbtest1 SET c=? WHERE id=1
---TRANSACTION 421236591611920, ACTIVE 37 sec
MySQL thread id 9, OS thread handle 139, query id 790 localhost root
Trx read view will not see trx with id >= 7000, sees < 7000
--------
FILE I/O
";

    #[test]
    fn reads_history_and_read_views() {
        assert_eq!(history_list_length(STATUS), Some(1718));
        let t = transactions(STATUS);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].active_s, None);
        assert_eq!((t[1].thread_id, t[1].read_view), (Some(12), false));
        assert_eq!(
            t[2],
            StatusTransaction {
                trx_id: "421236591611920".into(),
                active_s: Some(37),
                thread_id: Some(9),
                read_view: true,
            }
        );
    }
}

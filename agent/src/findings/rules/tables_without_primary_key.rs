//! S2: inserts into tables without a primary key. InnoDB gives such a
//! table a hidden 6-byte row id from one global counter, taken under the
//! dictionary mutex (`dict_sys->mutex`) on every insert (MySQL 5.6/5.7,
//! MariaDB up to 10.5): concurrent inserts queue on that mutex, and any
//! DDL or statistics work holding it stalls them all.

use crate::findings::measure::{counter_rate, probe, thousands, waiting_threads, watched_rate};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::Summary;

/// The exact counter (read from memory) and the probe on the allocator.
const ROW_IDS: &str = "innodb.dict_sys.row_ids";
const ROW_ID_PROBE: &str = "innodb.dict_sys.row_id";
const DICT_LOCK: &str = "innodb.dict_sys.lock";

/// Row ids allocated a second: none in sysbench (its tables have primary
/// keys); the S2 insert load allocates thousands a second.
const WARN_ROW_IDS_PER_S: f64 = 100.0;
/// Threads waiting on the dictionary mutex (thread-seconds per second).
const CRITICAL_DICT_WAITING: f64 = 0.25;
/// Tables named in the finding; the rest are in summary.json.
const MAX_TABLES_NAMED: usize = 5;

/// InnoDB's `schema/table` as SQL writes it, `schema.table`.
fn dotted(name: &str) -> String {
    name.replacen('/', ".", 1)
}

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let (rate, source) = match counter_rate(s, ROW_IDS) {
        Some(r) => (r, format!("{ROW_IDS} (InnoDB's own counter, exact)")),
        None => {
            let p = probe(s, ROW_ID_PROBE)?;
            (watched_rate(s, p)?, format!("{ROW_ID_PROBE} (probe)"))
        }
    };
    if rate <= 0.0 {
        return None;
    }
    let waiting = probe(s, DICT_LOCK).and_then(|p| waiting_threads(s, p));
    let severity = if waiting.unwrap_or(0.0) >= CRITICAL_DICT_WAITING {
        Severity::Critical
    } else if rate >= WARN_ROW_IDS_PER_S {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut evidence = vec![Evidence {
        text: format!("{} hidden row ids allocated per second: rows inserted into tables without a primary key ({source})", thousands(rate)),
        anchor: if source.starts_with(ROW_IDS) { "counters".into() } else { "summary".into() },
    }];
    if let Some(w) = waiting.filter(|w| *w > 0.0) {
        evidence.push(Evidence {
            text: format!(
                "{DICT_LOCK}: {:.2} threads waiting on the dictionary mutex on average",
                w
            ),
            anchor: "summary".into(),
        });
    }
    // The INSERTs behind it: at the row-id probe, else at the mutex.
    evidence.extend(
        crate::findings::measure::statements_at(s, ROW_ID_PROBE, 2)
            .or_else(|| crate::findings::measure::statements_at(s, DICT_LOCK, 2)),
    );
    // The tables, by name, when the server said which were written.
    let written = s
        .server_state
        .as_ref()
        .map(|st| st.no_pk_tables_written())
        .unwrap_or_default();
    if !written.is_empty() {
        evidence.push(Evidence {
            text: format!(
                "tables without a primary key written while recording (InnoDB's rows-changed counter and row estimate, approximate): {}",
                written
                    .iter()
                    .take(MAX_TABLES_NAMED)
                    .map(|(t, n)| format!("{} (~{} rows)", dotted(t), thousands(*n as f64)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            anchor: "server-state".into(),
        });
    }
    let title = match written.len() {
        0 => "Inserts into tables without a primary key: each takes the global dictionary mutex for a hidden row id".to_string(),
        n => format!(
            "Inserts into {} without a primary key: each takes the global dictionary mutex for a hidden row id",
            if n == 1 { dotted(&written[0].0) } else { format!("{n} tables ({}, …)", dotted(&written[0].0)) }
        ),
    };
    let mut next: Vec<String> = written
        .iter()
        .take(MAX_TABLES_NAMED)
        .map(|(t, _)| format!("Give {} a primary key (an AUTO_INCREMENT id if nothing else is unique): ALTER TABLE {} ADD COLUMN id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY;", dotted(t), dotted(t)))
        .collect();
    if next.is_empty() {
        next = vec![
            "List them: SELECT t.table_schema, t.table_name FROM information_schema.tables t LEFT JOIN information_schema.statistics s ON s.table_schema = t.table_schema AND s.table_name = t.table_name AND s.index_name = 'PRIMARY' WHERE t.engine = 'InnoDB' AND s.index_name IS NULL AND t.table_schema NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema');".into(),
            "Add a primary key to the tables being inserted into (an AUTO_INCREMENT id if nothing else is unique).".into(),
        ];
    }
    Some(Finding {
        rule: "tables_without_primary_key".into(),
        severity,
        title,
        evidence,
        cause: "InnoDB clusters every table by its primary key; a table without one (and without a NOT NULL UNIQUE key) gets a hidden 6-byte DB_ROW_ID from one server-wide counter, allocated under dict_sys->mutex on every insert, so concurrent inserts into such tables serialise on that mutex.".into(),
        next,
        weight: waiting.unwrap_or(0.0).max(rate * 1e-7),
        explained_by: None,
    })
}

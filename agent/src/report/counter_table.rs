//! The in-memory counters in the summary table: exact counts (end − start
//! of the server's own counter), their rate, and why any could not be read.

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};

use crate::model::summary::{CounterResult, CounterStatus};
use crate::text::units;

pub fn render(counters: &[CounterResult]) -> String {
    let read: Vec<&CounterResult> = counters
        .iter()
        .filter(|c| c.status == CounterStatus::Read)
        .collect();
    let mut out = String::new();
    if !read.is_empty() {
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header([
            "counter (read from memory, exact)",
            "count",
            "per s",
            "at start",
            "at end",
        ]);
        for c in read {
            let n = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
            table.add_row([
                c.name.clone(),
                n(c.count),
                c.per_sec.map_or_else(|| "-".into(), units::count),
                n(c.start),
                n(c.end),
            ]);
        }
        for col in 1..5 {
            if let Some(c) = table.column_mut(col) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&table.to_string());
        out.push('\n');
    }
    for c in counters.iter().filter(|c| c.status != CounterStatus::Read) {
        let what = match c.status {
            CounterStatus::Unavailable => "counter unavailable",
            _ => "counter not read",
        };
        out.push_str(&format!(
            "{what}: {} - {}\n",
            c.name,
            c.reason.as_deref().unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, status: CounterStatus, count: Option<u64>) -> CounterResult {
        CounterResult {
            name: name.into(),
            description: String::new(),
            status,
            reason: (status != CounterStatus::Read).then(|| "no DWARF".into()),
            location: None,
            start: count.map(|_| 100),
            end: count.map(|c| 100 + c),
            count,
            per_sec: count.map(|c| c as f64 / 2.0),
            window_s: 2.0,
        }
    }

    #[test]
    fn exact_counts_then_the_reasons() {
        let text = render(&[
            counter("innodb.dict_sys.row_ids", CounterStatus::Read, Some(60_000)),
            counter("innodb.redo.lsn", CounterStatus::Unavailable, None),
        ]);
        let row = text
            .lines()
            .find(|l| l.contains("innodb.dict_sys.row_ids"))
            .unwrap();
        assert!(
            row.contains("| 60000 |") && row.contains("30.0k") && row.contains("60100"),
            "{text}"
        );
        assert!(
            text.contains("counter unavailable: innodb.redo.lsn - no DWARF"),
            "{text}"
        );
        assert_eq!(render(&[]), "");
    }
}

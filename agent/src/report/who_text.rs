//! summary.txt's statements and connections: who, running what, made
//! the client connections' hits (the summary's `who`).

use crate::text::cut;
use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};

use crate::model::who::Who;
use crate::text::units;

/// Statements and connections shown (the summary keeps more).
const TOP: usize = 10;
/// A fingerprint is cut to this many characters in the table.
const FINGERPRINT_CHARS: usize = 90;

pub fn render(who: Option<&Who>) -> String {
    let Some(who) = who else {
        return String::new();
    };
    if !who.attributed {
        return format!("statements: {}\n\n", who.how);
    }
    if who.statements.is_empty() {
        return "statements: no client connection hit a probe\n\n".into();
    }
    let mut out = String::new();
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    // CPU samples only where the CPU profile tied its samples to statements.
    let cpu = who.cpu.as_ref().filter(|c| c.attributed);
    let mut header = vec![
        "statement",
        "id",
        "users",
        "executions",
        "calls",
        "total wait",
    ];
    if cpu.is_some() {
        header.push("CPU samples");
    }
    header.push("most on");
    table.set_header(header);
    for s in who.statements.iter().take(TOP) {
        let most = s
            .probes
            .first()
            .map(|p| p.probe.clone())
            .unwrap_or_default();
        let mut row = vec![
            cut(&s.fingerprint, FINGERPRINT_CHARS),
            s.id.clone(),
            s.users.join(", "),
            s.executions.to_string(),
            s.calls.to_string(),
            units::ns(s.wait_ns_total),
        ];
        if cpu.is_some() {
            row.push(s.cpu_samples.to_string());
        }
        row.push(most);
        table.add_row(row);
    }
    right_align(&mut table, 3..(6 + usize::from(cpu.is_some())));
    out.push_str(&format!(
        "statements (client connections' probe hits by statement fingerprint; executions \
         that hit a probe):\n{table}\n"
    ));
    if let Some(c) = cpu {
        out.push_str(&format!(
            "(CPU samples: on-CPU samples of a connection running the statement; {} in all, {} of connections running none)\n",
            c.samples, c.no_statement
        ));
    } else if let Some(note) = who.cpu.as_ref().and_then(|c| c.note.as_ref()) {
        out.push_str(&format!("({note})\n"));
    }
    if who.statements.len() > TOP || who.statements_more > 0 {
        out.push_str(&format!(
            "({} more statements in summary.json)\n",
            who.statements.len().saturating_sub(TOP) as u64 + who.statements_more
        ));
    }
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([
        "connection",
        "user",
        "host",
        "db",
        "calls",
        "total wait",
        "CPU samples",
        "top statement",
    ]);
    let dash = || "-".to_string();
    for c in who.connections.iter().take(TOP) {
        let top = c
            .top_statement
            .as_ref()
            .and_then(|id| who.statements.iter().find(|s| &s.id == id))
            .map_or_else(dash, |s| cut(&s.fingerprint, 50));
        table.add_row([
            c.id.to_string(),
            c.user_shown().unwrap_or_else(dash),
            c.host.clone().unwrap_or_else(dash),
            c.db.clone().unwrap_or_else(dash),
            c.calls.to_string(),
            units::ns(c.wait_ns_total),
            c.cpu_samples.to_string(),
            top,
        ]);
    }
    right_align(&mut table, 4..7);
    out.push_str(&format!("connections (processlist ids):\n{table}\n"));
    if !who.blocking.is_empty() {
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header([
            "probe",
            "waiting statement",
            "held by",
            "holder connection",
            "found",
            "taken at",
            "waits",
            "total wait",
        ]);
        for b in who.blocking.iter().take(TOP) {
            table.add_row([
                b.probe.clone(),
                b.waiter_fingerprint
                    .as_deref()
                    .map_or_else(|| "(no statement)".to_string(), |f| cut(f, 50)),
                b.holder_label(50),
                b.holder_connection.map_or_else(dash, |c| c.to_string()),
                if b.released { "released" } else { "held" }.to_string(),
                b.holder_site.clone().unwrap_or_else(dash),
                b.calls.to_string(),
                units::ns(b.wait_ns_total),
            ]);
        }
        right_align(&mut table, 6..8);
        out.push_str(&format!(
            "who blocks (held: the latch's exclusive holder, or the writer queued ahead, read at the wait's start, \
             and where it took the latch where the latch records it; released: the thread whose release ended the wait):\n{table}\n"
        ));
        for t in &who.blocking_totals {
            let listed = crate::model::saturating_sum(
                who.blocking
                    .iter()
                    .filter(|b| b.probe == t.probe)
                    .map(|b| b.calls),
            );
            if listed < t.calls {
                out.push_str(&format!(
                    "{}: {} waits tied to a holder in all, {} listed\n",
                    t.probe, t.calls, listed
                ));
            }
        }
    }
    if !who.latch_statements.is_empty() {
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header(["latch", "probe", "statement", "calls", "total wait"]);
        for r in who.latch_statements.iter().take(TOP) {
            table.add_row([
                cut(&r.latch, 50),
                r.probe.clone(),
                cut(&r.fingerprint, 60),
                r.calls.to_string(),
                units::ns(r.wait_ns_total),
            ]);
        }
        right_align(&mut table, 3..5);
        out.push_str(&format!(
            "statements per latch (a statement's hits on one latch, named as in the latch tables):\n{table}\n"
        ));
        if who.unattributed.latches_full > 0 {
            out.push_str(&format!(
                "({} latch hits not tied to their statement: map full)\n",
                who.unattributed.latches_full
            ));
        }
    }
    let u = &who.unattributed;
    if u.map_full + u.no_thd + u.no_text > 0 {
        out.push_str(&format!(
            "connection calls under no statement: {} (map full), {} (THD unreadable), {} (text unknown)\n",
            u.map_full, u.no_thd, u.no_text
        ));
    }
    out.push('\n');
    out
}

fn right_align(table: &mut Table, cols: std::ops::Range<usize>) {
    for col in cols {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

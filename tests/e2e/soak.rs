//! Soak: many attach/record/detach cycles with every probe against a real
//! server under a sysbench load that covers the whole soak. The server must
//! not notice: no SQL error, still alive, tables intact, and nothing of
//! innoprof left in the kernel afterwards.

use std::time::Instant;

use innoprof_e2e::*;

/// Cycles per server. Each `--probes all` cycle costs ~3-6 s, most of it
/// the kernel removing the uprobes (~0.1 s per uprobe, serialised in the
/// kernel on 6.18); 50 per server takes ~10 minutes for both servers.
/// `INNOPROF_SOAK_CYCLES` runs a longer (or shorter) soak by hand.
fn cycles() -> usize {
    std::env::var("INNOPROF_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

const TABLES: [&str; 2] = ["sbtest.sbtest1", "sbtest.sbtest2"];
const ROWS_PER_TABLE: &str = "10000";

fn soak(name: &str) {
    let _k = kernel_lock();
    let started = Instant::now();
    let server = Server::start(name, &[]);
    let pid = server.pid.to_string();
    // Two sysbench threads deadlock now and then on MariaDB 10.2 even with
    // no profiler attached (InnoDB picks a victim, sysbench retries): only
    // deadlocks are ignored, every other error (a lost connection, a lock
    // wait timeout, a crash) is fatal and fails the soak.
    let load = server.sysbench_open_ended("oltp_read_write", 2, &["--mysql-ignore-errors=1213"]);
    std::thread::sleep(std::time::Duration::from_secs(1));

    let wanted = cycles();
    let mut complete = 0;
    let mut links_attached = 0;
    let mut left_behind = Vec::new();
    for cycle in 0..wanted {
        let rec = Recording::start(&["--pid", &pid, "--duration", "300ms", "--probes", "all"]);
        let (code, stdout, rec) = rec.finish();
        assert_eq!(code, Some(0), "cycle {cycle}: {}", rec.stderr());
        assert!(stdout.contains("calls/s"), "cycle {cycle}: {stdout}");
        let s = rec.summary();
        assert!(s.complete, "cycle {cycle}: {s:?}");
        assert_eq!(s.end_reason, EndReason::Duration, "cycle {cycle}");
        let attached: Vec<_> = s
            .probes
            .iter()
            .filter(|p| p.status == ProbeStatus::Attached)
            .collect();
        assert!(attached.len() >= 10, "cycle {cycle}: {s:?}");
        links_attached += attached.iter().map(|p| p.symbols.len()).sum::<usize>();
        assert!(s.cpu.as_ref().unwrap().oncpu.ticks_seen > 0);
        complete += 1;
        let (progs, links) = leftovers_after_exit();
        left_behind.extend(progs.into_iter().chain(links));
        assert!(
            std::fs::metadata(format!("/proc/{}", server.pid)).is_ok(),
            "cycle {cycle}: mysqld died"
        );
    }
    let report = load.stop();
    let soak_s = started.elapsed().as_secs_f64();

    let uprobe_events: Vec<String> = tracefs_uprobe_events()
        .into_iter()
        .filter(|l| l.contains("mysqld") || l.contains("innoprof"))
        .collect();
    let check = server.sql(&format!("CHECK TABLE {}", TABLES.join(", ")));
    let counts: Vec<String> = TABLES
        .iter()
        .map(|t| {
            server
                .sql(&format!("select count(*) from {t}"))
                .trim()
                .to_string()
        })
        .collect();
    println!(
        "soak {name}: {complete}/{wanted} cycles of --probes all ({links_attached} symbols attached in all), \
         {:.0} s; sysbench {} s, {:.0} transactions, {} errors ({:.0} deadlocks retried), {:.0} reconnects; \
         left behind: {} BPF programs/links, {} tracefs uprobe events",
        soak_s,
        report.seconds,
        report.transactions,
        report.error_lines.len() + usize::from(report.exited_early.is_some()),
        report.ignored_errors,
        report.reconnects,
        left_behind.len(),
        uprobe_events.len()
    );

    assert!(
        report.exited_early.is_none() && report.error_lines.is_empty(),
        "sysbench failed during the soak: {:?}\n{}",
        report.exited_early,
        report.log
    );
    assert_eq!(report.reconnects, 0.0, "{}", report.log);
    assert!(
        report.transactions > 100.0,
        "load ran all along: {}",
        report.log
    );
    assert!(left_behind.is_empty(), "left behind: {left_behind:?}");
    assert!(uprobe_events.is_empty(), "{uprobe_events:?}");
    assert_eq!(server.sql("select 1").trim(), "1", "server still answers");
    let statuses: Vec<&str> = check.lines().filter(|l| l.contains("\tstatus\t")).collect();
    assert_eq!(statuses.len(), TABLES.len(), "{check}");
    assert!(statuses.iter().all(|l| l.ends_with("\tOK")), "{check}");
    // oltp_read_write deletes a row and inserts it back in one transaction.
    assert!(counts.iter().all(|c| c == ROWS_PER_TABLE), "{counts:?}");
}

#[test]
fn soak_mariadb_10_2_11_all_probes_under_sysbench() {
    soak("mariadb-10.2.11");
}

#[test]
fn soak_mysql_5_6_24_all_probes_under_sysbench() {
    soak("mysql-5.6.24");
}

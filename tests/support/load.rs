//! sysbench against a [`Server`]: timed runs, open-ended runs and their
//! reports.

use crate::repo_root;
use crate::server::Server;
use std::process::{Child, Command, Stdio};

impl Server {
    pub fn sysbench(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo_root().join("scripts/sysbench.sh"));
        cmd.arg(self.dir.path()).args(args);
        cmd
    }

    /// Runs sysbench to the end; panics with its output if it fails.
    pub fn sysbench_ok(&self, args: &[&str]) -> String {
        let out = self.sysbench(args).output().unwrap();
        assert!(
            out.status.success(),
            "sysbench {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates and fills the sysbench tables, once per server.
    pub fn prepare(&self, test: &str) {
        if !self.prepared.replace(true) {
            let prep = self.sysbench(&["prepare", test]).output().unwrap();
            assert!(
                prep.status.success(),
                "sysbench prepare: {}{}",
                String::from_utf8_lossy(&prep.stdout),
                String::from_utf8_lossy(&prep.stderr)
            );
        }
    }

    /// sysbench in the background for `secs` (tables prepared on first
    /// use); join to get its report.
    pub fn sysbench_load(
        &self,
        test: &str,
        threads: u32,
        secs: u32,
    ) -> std::thread::JoinHandle<String> {
        self.prepare(test);
        let mut cmd = self.sysbench(&[
            "run",
            test,
            &format!("--threads={threads}"),
            &format!("--time={secs}"),
        ]);
        std::thread::spawn(move || {
            let out = cmd.output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr)
        })
    }
}

impl Server {
    /// sysbench with no time limit, reporting every second, until
    /// [`OpenLoad::stop`]: for a load that must cover a scenario of unknown
    /// length.
    pub fn sysbench_open_ended(&self, test: &str, threads: u32, extra: &[&str]) -> OpenLoad {
        self.prepare(test);
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = self
            .sysbench(&[
                "run",
                test,
                &format!("--threads={threads}"),
                "--time=0",
                "--report-interval=1",
            ])
            .args(extra)
            .stdout(log.reopen().unwrap())
            .stderr(Stdio::from(log.reopen().unwrap()))
            .spawn()
            .unwrap();
        OpenLoad { child, log }
    }
}

/// A sysbench run without a time limit (see [`Server::sysbench_open_ended`]).
pub struct OpenLoad {
    child: Child,
    log: tempfile::NamedTempFile,
}

/// What sysbench's per-second reports added up to.
#[derive(Debug)]
pub struct LoadReport {
    /// sysbench exited on its own (a fatal SQL error ends the run).
    pub exited_early: Option<std::process::ExitStatus>,
    pub seconds: u64,
    pub transactions: f64,
    /// `err/s` summed: errors sysbench ignored and retried (by default
    /// deadlocks, lock wait timeouts and 1020; `--mysql-ignore-errors`
    /// sets the list); any other error is fatal and ends the run.
    pub ignored_errors: f64,
    pub reconnects: f64,
    /// `FATAL` lines: a query failed with an error sysbench does not ignore.
    pub error_lines: Vec<String>,
    pub log: String,
}

impl OpenLoad {
    pub fn stop(mut self) -> LoadReport {
        let exited_early = self.child.try_wait().unwrap();
        if exited_early.is_none() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
        let log = std::fs::read_to_string(self.log.path()).unwrap();
        let field = |line: &str, name: &str| -> Option<f64> {
            let rest = line.split(name).nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        };
        let mut report = LoadReport {
            exited_early,
            seconds: 0,
            transactions: 0.0,
            ignored_errors: 0.0,
            reconnects: 0.0,
            error_lines: log
                .lines()
                .filter(|l| l.contains("FATAL"))
                .map(String::from)
                .collect(),
            log: String::new(),
        };
        for line in log
            .lines()
            .filter(|l| l.starts_with('[') && l.contains("tps:"))
        {
            report.seconds += 1;
            report.transactions += field(line, "tps:").unwrap_or(0.0);
            report.ignored_errors += field(line, "err/s:").expect("err/s in sysbench report");
            report.reconnects += field(line, "reconn/s:").expect("reconn/s in sysbench report");
        }
        report.log = log;
        report
    }
}

/// Number after `label` in sysbench's report, e.g. "transactions:".
pub fn sysbench_number(report: &str, label: &str) -> f64 {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split_whitespace().nth(label.split_whitespace().count()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in sysbench output:\n{report}"))
}

//! Exact assertions against a C++ fixture with known call counts and sleeps,
//! through the real innoprof binary and real kernel uprobes.

use innoprof::resolve::{EntryInsn, SymbolTable};
use innoprof_e2e::*;

const A: u64 = 1000;
const B: u64 = 500;
const SLEEPS: u64 = 3;
const SLEEP_MS: u64 = 20;
const ENTERS: u64 = 7;

fn record_fixture(pie: bool) {
    let _k = kernel_lock();
    let bin = fixture_binary(pie);
    let mut fx = Fixture::spawn(&bin, [A, B, SLEEPS, SLEEP_MS, ENTERS]);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "4s",
        "--probe",
        "fixture_counted",
        "--probe",
        "fixture_sleep",
        "--probe",
        "PolicyMutex<*>::enter",
        // Every hit's stack: exact per-stack counts to assert.
        "--stack-interval",
        "0",
    ]);
    rec.wait_attached();
    fx.run_calls();
    let (code, stdout, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());

    let s = rec.summary();
    assert_eq!(u64::from(s.target.pid), fx_pid(&pid));
    assert_eq!(s.target.position_independent, pie);
    assert_eq!(s.end_reason, EndReason::Duration);

    let counted = probe(&s, "fixture_counted");
    assert_eq!(counted.calls, A + B, "exact call count");
    assert_eq!(counted.symbols[0].entry, EntryInsn::Push);
    let hist_total: u64 = counted.histogram.iter().map(|b| b.count).sum();
    assert_eq!(hist_total, A + B);

    // Every 20 ms sleep lands in the [2^24, 2^25) ns = [16.8 ms, 33.6 ms) bucket.
    let sleep = probe(&s, "fixture_sleep");
    assert_eq!(sleep.calls, SLEEPS);
    let buckets = &sleep.histogram;
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    assert_eq!(buckets[0].low_ns, 1 << 24);
    assert_eq!(buckets[0].count, SLEEPS);
    let total = sleep.wait_ns_total;
    assert!(
        (SLEEPS * SLEEP_MS * 1_000_000..SLEEPS * 30_000_000).contains(&total),
        "total wait {total}"
    );

    // The demangled template pattern found the C++ method.
    let enter = probe(&s, "PolicyMutex<*>::enter");
    assert_eq!(enter.calls, ENTERS);
    assert!(enter.symbols[0]
        .name
        .starts_with("PolicyMutex<TTASEventMutex<GenericPolicy> >::enter("));

    // Stacks name both callers with their exact shares.
    let folded = rec.file("fixture_counted.count.folded");
    let line_for = |caller: &str| -> u64 {
        folded
            .lines()
            .find(|l| l.contains(&format!(";main;{caller};fixture_counted ")))
            .unwrap_or_else(|| panic!("no {caller} stack in:\n{folded}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(line_for("caller_a"), A);
    assert_eq!(line_for("caller_b"), B);
    let by_wait = rec.file("fixture_sleep.folded");
    assert!(
        by_wait.lines().all(|l| l.contains(";main;fixture_sleep ")),
        "{by_wait}"
    );
    assert!(
        stdout.contains("fixture_counted") && stdout.contains("calls/s"),
        "table on stdout: {stdout}"
    );

    let (progs, links) = leftovers_after_exit();
    assert!(
        progs.is_empty() && links.is_empty(),
        "left behind: {progs:?} {links:?}"
    );
}

fn fx_pid(pid: &str) -> u64 {
    pid.parse().unwrap()
}

#[test]
fn exact_counts_histogram_and_stacks_non_pie() {
    record_fixture(false);
}

#[test]
fn exact_counts_histogram_and_stacks_pie() {
    record_fixture(true);
}

/// The shipped stack sampling: a probe's stack at most once per ms on each
/// CPU, the hits in between carried by the next stack taken. The folded
/// total is still every call, and each caller's share is off by at most
/// the hits of an interval or two where the loop switches callers (and
/// where the thread moves between CPUs): well under 5 % of 50,000 calls.
#[test]
fn sampled_stacks_keep_exact_totals_and_close_shares() {
    let _k = kernel_lock();
    const N: u64 = 50_000;
    let (_, rec) = record_catalog_probe(
        &[],
        "name = 'fixture.counted'\nsymbols = ['fixture_counted']\nmeasure = 'count'\ncost = 'rare'\n",
        false,
        [N, N, 0, 0, 0],
    );
    let s = rec.summary();
    let p = probe(&s, "fixture.counted");
    assert_eq!(p.calls, 2 * N);
    assert_eq!(p.stacks.interval_ns, 1_000_000, "{p:?}");
    let folded = rec.file("fixture.counted.count.folded");
    let share = |caller: &str| -> u64 {
        folded
            .lines()
            .filter(|l| l.contains(&format!(";main;{caller};fixture_counted")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 2 * N, "folded total is every call:\n{folded}");
    for caller in ["caller_a", "caller_b"] {
        let n = share(caller);
        eprintln!("{caller}: {n} of {N} in its stacks");
        assert!(n.abs_diff(N) <= N / 20, "{caller}: {n} of {N}\n{folded}");
    }
}

/// Ctrl-C and SIGTERM end the recording early: probes detached, partial
/// results written and marked as such.
#[test]
fn interrupt_writes_partial_and_detaches() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let _k = kernel_lock();
        let bin = fixture_binary(false);
        let mut fx = Fixture::spawn(&bin, [10, 0, 0, 0, 0]);
        let pid = fx.pid.to_string();
        let mut rec = Recording::start(&[
            "--pid",
            &pid,
            "--force",
            "--duration",
            "10m",
            "--probe",
            "fixture_counted",
        ]);
        rec.wait_attached();
        fx.run_calls();
        rec.signal(sig);
        let (code, _, rec) = rec.finish();
        assert_eq!(code, Some(0), "signal {sig}: {}", rec.stderr());
        let s = rec.summary();
        assert_eq!(s.end_reason, EndReason::Interrupted);
        assert!(!s.complete);
        assert_eq!(probe(&s, "fixture_counted").calls, 10);
        let (progs, links) = leftovers_after_exit();
        assert!(
            progs.is_empty() && links.is_empty(),
            "left behind: {progs:?} {links:?}"
        );
        fx.exit();
    }
}

/// SIGKILL gives innoprof no chance to clean up: the kernel must.
#[test]
fn sigkill_leaves_no_probe_attached() {
    let _k = kernel_lock();
    let bin = fixture_binary(false);
    let fx = Fixture::spawn(&bin, [0, 0, 0, 0, 0]);
    let rec = record_counted_until_stopped(fx.pid);
    // One entry + one return link (uprobe_multi: one per program).
    assert_eq!(
        innoprof_links_held_by(rec.child.id()).len(),
        2,
        "links while recording"
    );
    assert!(!loaded_innoprof_programs().is_empty());
    rec.signal(libc::SIGKILL);
    let (code, _, _rec) = rec.finish();
    assert_eq!(code, None, "killed by a signal");
    let (progs, links) = leftovers_after_exit();
    assert!(
        progs.is_empty() && links.is_empty(),
        "left behind: {progs:?} {links:?}"
    );
    fx.exit();
}

/// The target exits mid-run: what was collected is written, and the exit
/// status says so.
#[test]
fn target_exit_is_reported_with_partial_results() {
    let _k = kernel_lock();
    let bin = fixture_binary(true);
    let mut fx = Fixture::spawn(&bin, [42, 0, 0, 0, 0]);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "10m",
        "--probe",
        "fixture_counted",
    ]);
    rec.wait_attached();
    fx.run_calls();
    fx.exit();
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(3), "{}", rec.stderr());
    assert!(rec.stderr().contains("exited during the recording"));
    assert!(stdout.contains("TARGET EXITED"));
    let s = rec.summary();
    assert_eq!(s.end_reason, EndReason::TargetExited);
    assert_eq!(probe(&s, "fixture_counted").calls, 42);
    // Stacks still symbolise from the files after the process is gone.
    assert!(rec
        .file("fixture_counted.count.folded")
        .contains(";main;caller_a;fixture_counted 42"));
}

/// A function that exists only inlined is counted at each inline site found
/// in DWARF, exactly, with the caller in its stacks.
#[test]
fn inline_sites_count_exactly() {
    let _k = kernel_lock();
    let (_, rec) = record_catalog_probe(
        &[],
        "name = 'fixture.inlined'\nsymbols = ['fixture_inlined_step']\n\
         measure = 'count'\ncost = 'rare'\ninline = true\n",
        true,
        [A, B, 0, 0, 0],
    );
    let s = rec.summary();
    let p = probe(&s, "fixture.inlined");
    let symbols = &p.symbols;
    assert_eq!(symbols.len(), 2, "one inline site per caller: {symbols:?}");
    assert!(symbols.iter().all(|s| s.table == SymbolTable::DwarfInline));
    assert_eq!(p.calls, A + B);
    let per_site: Vec<u64> = symbols.iter().map(|s| s.calls).collect();
    assert!(
        per_site.contains(&A) && per_site.contains(&B),
        "{per_site:?}"
    );
    let folded = rec.file("fixture.inlined.count.folded");
    assert!(
        folded.contains(&format!(
            ";main;caller_a;fixture_inlined_step [inlined] {A}"
        )),
        "{folded}"
    );
}

/// Call-site attribution: the caller's `(__FILE__, __LINE__)` arguments are
/// read in BPF and the summary, table and stacks name `fixture.cc:LINE`.
#[test]
fn callsite_arguments_name_the_caller_line() {
    let _k = kernel_lock();
    let source = std::fs::read_to_string(repo_root().join("tests/fixture/fixture.cc")).unwrap();
    let line = source
        .lines()
        .position(|l| l.contains("g_mutex.enter(1, 2, __FILE__, __LINE__)"))
        .unwrap()
        + 1;
    let site = format!("fixture.cc:{line}");
    // enter(this, n_spins, n_delay, file, line): file is argument 4, line 5.
    let (stdout, rec) = record_catalog_probe(
        &[],
        "name = 'fixture.mutex.enter'\nsymbols = ['PolicyMutex<*>::enter']\n\
         measure = 'latency'\ncost = 'rare'\ncallsite = { file_arg = 4, line_arg = 5 }\n",
        false,
        [0, 0, 0, 0, ENTERS],
    );
    let s = rec.summary();
    let sites = &probe(&s, "fixture.mutex.enter").callsites;
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert_eq!(sites[0].site, site);
    assert_eq!(sites[0].line, line as u64);
    assert!(sites[0]
        .file
        .as_deref()
        .unwrap()
        .ends_with("tests/fixture/fixture.cc"));
    assert_eq!(sites[0].calls, ENTERS);
    assert!(sites[0].wait_ns_total > 0);
    assert!(
        stdout.contains("top call sites") && stdout.contains(&site),
        "{stdout}"
    );
    let folded = rec.file("fixture.mutex.enter.count.folded");
    assert!(
        folded.contains(&format!(
            ";main;PolicyMutex<TTASEventMutex<GenericPolicy> >::enter;[{site}] {ENTERS}"
        )),
        "{folded}"
    );
}

#[path = "unprobeable.rs"]
mod unprobeable;

/// Breakpoints go into the target only: another process running the same
/// binary keeps its code unpatched (uprobe_multi links carry the target's
/// PID on kernels >= 6.10, so the kernel installs the int3 only there).
#[test]
fn another_process_of_the_same_binary_stays_unpatched() {
    let _k = kernel_lock();
    let bin = fixture_binary(false);
    let target = Fixture::spawn(&bin, [0, 0, 0, 0, 0]);
    let other = Fixture::spawn(&bin, [0, 0, 0, 0, 0]);
    let image = innoprof::resolve::ElfImage::open(&bin).unwrap();
    let resolution =
        innoprof::resolve::Resolver::new(&image).resolve(&["fixture_counted".to_string()]);
    // Non-PIE: the link-time address is the run-time one.
    let addr = resolution.symbols[0].address;
    let first_byte = |pid: u32| {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
        let mut b = [0u8; 1];
        mem.read_exact_at(&mut b, addr).unwrap();
        b[0]
    };
    let original = first_byte(other.pid);
    assert_ne!(original, 0xcc);
    assert_eq!(first_byte(target.pid), original);
    let rec = record_counted_until_stopped(target.pid);
    assert_eq!(
        first_byte(target.pid),
        0xcc,
        "the target carries the breakpoint"
    );
    assert_eq!(
        first_byte(other.pid),
        original,
        "the other process is untouched"
    );
    rec.signal(libc::SIGINT);
    let (code, _, _rec) = rec.finish();
    assert_eq!(code, Some(0));
    assert_eq!(first_byte(target.pid), original, "removed at the end");
    target.exit();
    other.exit();
}

/// `record --probe fixture_counted` on `pid` for 10 minutes (the test
/// stops it), once every probe is attached.
fn record_counted_until_stopped(pid: u32) -> Recording {
    let pid = pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "10m",
        "--probe",
        "fixture_counted",
    ]);
    // The --ready-fd line says what a script needs: who to signal, what
    // is attached to which process, for how long.
    let ready = rec.wait_attached();
    assert_eq!(
        (ready.event.as_str(), ready.command.as_str()),
        ("attached", "record")
    );
    assert_eq!(ready.innoprof_pid, rec.child.id());
    assert!(ready.recording_s.is_some_and(|s| s > 590.0), "{ready:?}");
    let [target] = ready.targets.as_slice() else {
        panic!("one target: {ready:?}")
    };
    assert_eq!(target.pid.to_string(), pid);
    assert_eq!(target.probes, ["fixture_counted"]);
    assert!(
        target.probe_points >= 2 && target.uprobe_links >= 2,
        "{target:?}"
    );
    rec
}

/// A thread's role is walked again while no marker was found: a thread
/// whose first stack has none (a connection caught logging in, or in code
/// the walk cannot cross) and whose later stacks pass through
/// `do_command` is a connection, every one of its calls with it (the
/// per-thread counts take the role the thread has at the end). A thread
/// that never shows a marker stays `unknown`, its calls all counted.
#[test]
fn a_thread_without_a_marker_at_first_is_walked_again() {
    const LATE: u64 = 10;
    const QUIET: u64 = 40;
    let _k = kernel_lock();
    let dir = tempfile::tempdir().unwrap();
    let catalog = fixture_catalog(dir.path(), &[FIXTURE_MUTEX_PROBE]);
    let args = ["roles", &LATE.to_string(), &QUIET.to_string()];
    let mut fx = Fixture::spawn_with(&fixture_binary(true), &args);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "3s",
        "--catalog",
        catalog.to_str().unwrap(),
        "--probes",
        "all",
        "--no-cpu",
    ]);
    rec.wait_attached();
    let done: u64 = fx.run_calls().parse().unwrap();
    assert_eq!(done, 1 + LATE + QUIET);
    let (code, _, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());
    let s = rec.summary();
    let enter = probe(&s, "fixture.mutex.enter");
    assert_eq!(enter.calls, done);
    let mut roles: Vec<(&str, u64, u64)> = enter
        .roles
        .iter()
        .map(|r| (r.role.as_str(), r.threads, r.calls))
        .collect();
    roles.sort_unstable();
    assert_eq!(
        roles,
        [("connection", 1, 1 + LATE), ("unknown", 1, QUIET)],
        "{:?}",
        enter.roles
    );
}

/// The fixture's `fixture_wait(us)`.
const FIXTURE_WAIT_PROBE: &str =
    "name = 'fixture.wait'\nsymbols = ['fixture_wait']\nmeasure = 'latency'\ncost = 'rare'\n";

/// Each weighted line of a folded file, split by whether its root is the
/// connection role's marker: (connection's, the rest's).
fn folded_split(folded: &str) -> (u64, u64) {
    let (mut conn, mut rest) = (0, 0);
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if stack.starts_with("[connection];") {
            conn += n;
        } else {
            rest += n;
        }
    }
    (conn, rest)
}

/// A connection making 20,000 waits of ~60 us beside a thread making 100
/// of 10 ms, on one CPU and one probe: each stack is one hit's own, so the
/// folded files split the wait (and the calls) between the two as the
/// exact role table does, within 5 points (by hand: 58.5 % of the wait in
/// the stacks, 58.7 % exact). Under stacks taken once per ms per CPU
/// carrying every hit since, the short waiter's stacks carried the long
/// waits of the other thread on the same CPU.
#[test]
fn a_frequent_short_waiter_does_not_take_a_rare_long_waiters_wait() {
    const SHORT: u64 = 20_000;
    const LONG: u64 = 100;
    let _k = kernel_lock();
    let dir = tempfile::tempdir().unwrap();
    let catalog = fixture_catalog(dir.path(), &[FIXTURE_WAIT_PROBE]);
    let args = ["mixed", &SHORT.to_string(), &LONG.to_string()];
    let mut fx = Fixture::spawn_with(&fixture_binary(true), &args);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        // The fixture's ~1.2 s of calls, with room for a loaded host.
        "10s",
        "--catalog",
        catalog.to_str().unwrap(),
        "--probes",
        "all",
        "--no-cpu",
    ]);
    rec.wait_attached();
    let done: u64 = fx.run_calls().parse().unwrap();
    assert_eq!(done, SHORT + LONG);
    let (code, _, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());
    let s = rec.summary();
    let wait = probe(&s, "fixture.wait");
    assert_eq!(wait.calls, SHORT + LONG);
    let role = |name: &str| {
        wait.roles
            .iter()
            .find(|r| r.role == name)
            .unwrap_or_else(|| panic!("no {name} role: {:?}", wait.roles))
    };
    let (conn, other) = (role("connection"), role("unknown"));
    assert_eq!((conn.calls, other.calls), (SHORT, LONG), "{:?}", wait.roles);
    let exact_wait = conn.wait_ns_total as f64 / wait.wait_ns_total as f64;
    let exact_calls = conn.calls as f64 / wait.calls as f64;

    let (w_conn, w_rest) = folded_split(&rec.file("fixture.wait.folded"));
    let (c_conn, c_rest) = folded_split(&rec.file("fixture.wait.count.folded"));
    // The folded files add up to the probe's exact totals.
    assert_eq!(w_conn + w_rest, wait.wait_ns_total);
    assert_eq!(c_conn + c_rest, wait.calls);
    let folded_wait = w_conn as f64 / (w_conn + w_rest) as f64;
    let folded_calls = c_conn as f64 / (c_conn + c_rest) as f64;
    println!(
        "connection's share of fixture.wait: wait {:.1} % exact, {:.1} % in the stacks; calls {:.2} % exact, {:.2} % in the stacks ({} stacks)",
        exact_wait * 100.0,
        folded_wait * 100.0,
        exact_calls * 100.0,
        folded_calls * 100.0,
        wait.stacks.distinct
    );
    assert!(
        (folded_wait - exact_wait).abs() <= 0.05,
        "wait: {folded_wait:.3} in the stacks, {exact_wait:.3} exact"
    );
    assert!(
        (folded_calls - exact_calls).abs() <= 0.05,
        "calls: {folded_calls:.4} in the stacks, {exact_calls:.4} exact"
    );
}

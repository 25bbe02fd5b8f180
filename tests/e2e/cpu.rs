//! The CPU profiler against real parts: a C++ fixture whose CPU and
//! blocked time is known, real MySQL 5.6.24 and MariaDB 10.2.11 under
//! sysbench compared with `perf record -e cpu-clock -g` on the same load,
//! `top` and `diff` through the real binary.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use innoprof_e2e::*;

const SPIN_THREADS: u64 = 2;
const SPIN_MS: u64 = 3000;
const BLOCKS: u64 = 40;
const BLOCK_MS: u64 = 25;

fn spin(mode: &str, threads: u64, spin_ms: u64, blocks: u64, block_ms: u64) -> Fixture {
    let args = [
        mode.to_string(),
        threads.to_string(),
        spin_ms.to_string(),
        blocks.to_string(),
        block_ms.to_string(),
    ];
    Fixture::spawn_with(&spin_binary(), &args)
}

/// (stack, weight) of each folded line, without the thread's role at the
/// root (see [`roles`]).
fn folded(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {l}"));
            (
                without_role(stack).1.to_string(),
                n.parse().unwrap_or_else(|_| panic!("bad count in {l}")),
            )
        })
        .collect()
}

/// A folded stack's root role (`[connection];...`) and the rest.
fn without_role(stack: &str) -> (Option<&str>, &str) {
    if let Some((first, rest)) = stack.split_once(';') {
        if let Some(name) = first.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
            if innoprof::plan::thread_role::ROLES
                .iter()
                .any(|r| r.name == name)
            {
                return (Some(name), rest);
            }
        }
    }
    (None, stack)
}

/// Weight per root role of each folded line (`None`: no role found).
fn roles(text: &str) -> HashMap<Option<String>, u64> {
    let mut by = HashMap::new();
    for l in text.lines() {
        let (stack, n) = l.rsplit_once(' ').unwrap();
        *by.entry(without_role(stack).0.map(str::to_string))
            .or_default() += n.parse::<u64>().unwrap();
    }
    by
}

/// Parses an SVG as XML and returns the text of its frames' <title>s.
fn svg_titles(svg: &str) -> Vec<String> {
    // inferno writes the SVG 1.1 DOCTYPE, as flamegraph.pl does.
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(svg, opts)
        .unwrap_or_else(|e| panic!("SVG is not XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_string))
        .collect()
}

fn no_leftovers() {
    let (progs, links) = leftovers_after_exit();
    assert!(
        progs.is_empty() && links.is_empty(),
        "left behind: {progs:?} {links:?}"
    );
}

/// The fixture spins in `fx::Spinner::spin_hot` in two threads started
/// after innoprof attached, and sleeps 40 × 25 ms in `fx_block_wait`.
#[test]
fn spinning_function_dominates_and_blocked_time_is_exact() {
    let _k = kernel_lock();
    let mut fx = spin("hot", SPIN_THREADS, SPIN_MS, BLOCKS, BLOCK_MS);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--probes",
        "none",
        "--offcpu",
        "--duration",
        "6s",
    ]);
    rec.wait_attached();
    assert!(
        rec.stderr().contains("CPU sampling at 99 Hz"),
        "{}",
        rec.stderr()
    );
    fx.run_calls();
    let (code, stdout, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let s = rec.summary();
    let cpu = s.cpu.as_ref().expect("a CPU profile");
    let on = &cpu.oncpu;
    eprintln!("on-CPU summary: {on:?}");

    // Every sample is in the folded file; nothing lost or cut.
    let samples = on.samples;
    let stacks = folded(&rec.file("oncpu.folded"));
    assert_eq!(stacks.iter().map(|(_, n)| n).sum::<u64>(), samples);
    let lost = &on.lost;
    assert_eq!(
        (lost.kernel_stack, lost.truncated, lost.map_full),
        (0, 0, 0),
        "{lost:?}"
    );
    // The only walks allowed to stop early are through the dynamic
    // linker's lazy-binding trampoline (a thread's first call of a libc
    // function: its CFA is rbx-based, a rule the BPF walker does not
    // implement; CI once caught one of 583 samples there) and in an
    // object's `_init` (crti's `.init` code, which has no CFI; which
    // object's was not found out: CI caught one of 594 samples there on
    // 2026-11-26, a walk that stopped at its first frame), and in a thread
    // sampled inside `do_exit` (past `exit_mm` it has no user memory left
    // to read: CI caught one of 592 samples there on 2026-11-26,
    // `start_thread` then `__x64_sys_exit` and `do_exit`).
    let stopped: u64 = stacks
        .iter()
        .filter(|(s, _)| s.starts_with("[unwind stopped];"))
        .inspect(|(s, _)| {
            assert!(
                s.contains(";_dl_runtime_resolve")
                    || s.ends_with(";_init")
                    || s.contains(";do_exit_[k]"),
                "a walk stopped outside the lazy-binding trampoline, _init and do_exit: {s}"
            )
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(lost.unwind_stopped, stopped, "{on:?}");
    assert!(stopped * 100 <= samples, "{stopped} of {samples} stopped");
    // The cpu-clock timer fires on every CPU whatever runs there; on a
    // busy VM the hypervisor can delay it past a period (a tick missed).
    let (seen, expected) = (on.ticks_seen, on.ticks_expected);
    eprintln!("cpu-clock ticks: {seen} seen of {expected} expected");
    assert!(
        seen * 2 >= expected && seen <= expected * 21 / 20,
        "ticks {seen} of {expected}"
    );
    // Both spinning threads were created after the profiler attached; at
    // 99 Hz they give up to 594 samples (less when other tests share the CPUs).
    assert!(samples >= 150, "{samples} samples");

    // spin_hot is on the stack of >= 80 % of the samples and the leaf of
    // nearly every user-mode one. (Timer interrupts and, on a busy
    // machine, preemptions of the spinning threads leave kernel leaves.)
    let top = &on.top.rows;
    let hot = top
        .iter()
        .find(|r| r.symbol == "fx::Spinner::spin_hot(long)")
        .unwrap_or_else(|| panic!("spin_hot not in the top table: {on:?}"));
    let (self_pct, total_pct) = (hot.self_pct, hot.total_pct);
    let kernel_leaf: u64 = top
        .iter()
        .filter(|r| r.module == "[kernel.kallsyms]")
        .map(|r| r.samples)
        .sum();
    let user_share = hot.samples as f64 * 100.0 / (samples - kernel_leaf) as f64;
    eprintln!(
        "spin_hot: {total_pct:.1}% total, {self_pct:.1}% self of {samples} samples, \
         {user_share:.1}% of the user-mode ones"
    );
    assert!(total_pct >= 80.0, "spin_hot on {total_pct}% of the stacks");
    assert!(self_pct >= 60.0, "spin_hot self {self_pct}%");
    assert!(
        user_share >= 95.0,
        "spin_hot leaf of {user_share}% of user-mode samples"
    );
    assert_eq!(top[0].symbol, "fx::Spinner::spin_hot(long)");
    assert_eq!(hot.module, "spin");
    // The full stack, through libc and the stripped libstdc++ (module+offset,
    // never a guessed name), with the DWARF inline frame at the leaf.
    let leaf = stacks
        .iter()
        .filter(|(st, _)| st.ends_with("fx::Spinner::spin_hot(long);fx_mix [inlined]"))
        .map(|(st, n)| (st.as_str(), *n))
        .max_by_key(|(_, n)| *n)
        .unwrap_or_else(|| panic!("no inline frame under spin_hot: {stacks:?}"));
    assert!(from_thread_start(leaf.0), "{}", leaf.0);
    assert!(leaf.0.contains(";libstdc++.so.6"), "{}", leaf.0);
    assert!(
        stdout.contains("fx::Spinner::spin_hot(long)") && stdout.contains("self %"),
        "{stdout}"
    );
    assert!(rec
        .file("summary.txt")
        .contains("fx::Spinner::spin_hot(long)"));

    // Off-CPU: 40 sleeps of 25 ms in fx_block_wait, charged to its stack.
    let off = cpu.offcpu.as_ref().expect("an off-CPU profile");
    eprintln!("off-CPU summary: {off:?}");
    assert_eq!(off.weight_unit, "us");
    assert_eq!(off.min_block_ns, 1_000_000);
    let off_stacks = folded(&rec.file("offcpu.folded"));
    let sleep_us: u64 = off_stacks
        .iter()
        .filter(|(st, _)| st.contains(";fx_block_wait;"))
        .map(|(_, n)| n)
        .sum();
    let want = BLOCKS * BLOCK_MS * 1000;
    eprintln!("fx_block_wait blocked {sleep_us} us (slept {want} us)");
    // Nothing may be invented; up to one block's worth may be short: one
    // clean-clone run charged 977 ms of 1000 ms (cause not pinned down,
    // every other run was >= 1000 ms).
    assert!(
        (want - BLOCK_MS * 1000..want * 13 / 10).contains(&sleep_us),
        "{sleep_us} us blocked, slept {want}"
    );
    for (st, _) in off_stacks
        .iter()
        .filter(|(st, _)| st.contains(";fx_block_wait;"))
    {
        // User frames from the thread start, kernel frames down to the
        // scheduler, and none of the tracepoint's own.
        assert!(from_thread_start(st), "{st}");
        assert!(
            st.contains("do_nanosleep_[k]") && st.ends_with(";__schedule_[k]"),
            "{st}"
        );
        assert!(!st.contains("bpf"), "{st}");
    }
    assert!(off.blocks >= BLOCKS);
    assert_eq!(off.lost.unwind_stopped, 0, "{off:?}");
    // The off-CPU table charges the fixture's own innermost frame.
    let row = off
        .top
        .rows
        .iter()
        .find(|r| r.symbol == "fx_block_wait")
        .expect("fx_block_wait row");
    assert_eq!(row.samples, sleep_us);

    // Flame graphs: well-formed SVG with the fixture's frames.
    let titles = svg_titles(&rec.file("oncpu.svg"));
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("fx::Spinner::spin_hot(long)")),
        "{titles:?}"
    );
    let titles = svg_titles(&rec.file("offcpu.svg"));
    assert!(
        titles.iter().any(|t| t.starts_with("fx_block_wait")),
        "{titles:?}"
    );
    no_leftovers();
}

/// `top` shows the spinning function live, refresh after refresh.
#[test]
fn top_shows_the_spinning_function() {
    let _k = kernel_lock();
    let mut fx = spin("hot", 1, 4000, 0, 0);
    let pid = fx.pid.to_string();
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("stderr.txt");
    let mut child = Command::new(innoprof())
        .args([
            "top",
            "--pid",
            &pid,
            "--force",
            "--interval",
            "1s",
            "--iterations",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    // The frames asserted on are sampled from the attach on: the spinning
    // starts then, not after a guess at how long attaching takes.
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stderr().contains("innoprof: attached") {
        assert!(child.try_wait().unwrap().is_none(), "exited: {}", stderr());
        assert!(Instant::now() < deadline, "never attached: {}", stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    fx.run_calls();
    let out = child.wait_with_output().unwrap();
    fx.exit();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr());
    let frames: Vec<&str> = stdout.split("innoprof top: pid").skip(1).collect();
    assert_eq!(frames.len(), 3, "{stdout}");
    // The second interval lies entirely within the 4 s of spinning: the
    // function leads the table.
    let cells: Vec<&str> = frames[1]
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|c| c.len() > 5 && c[1].parse::<u64>().is_ok())
        .unwrap_or_else(|| panic!("no table row: {}", frames[1]));
    assert_eq!(cells[5], "fx::Spinner::spin_hot(long)", "{}", frames[1]);
    let total_pct: f64 = cells[3].parse().unwrap();
    assert!(total_pct >= 80.0, "{}", frames[1]);
    no_leftovers();
}

/// The kept directory's files with what would show a rewrite: inode
/// (a kept file is replaced by a rename), length and modification time.
fn kept_inventory(dir: &Path) -> Vec<(String, u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, m.ino(), m.len(), m.modified().unwrap())
        })
        .collect();
    files.sort();
    files
}

/// What one file's bytes decide is kept across boots: the first recording
/// after a reboot (an empty per-boot directory, the kept directory as an
/// earlier recording left it) measures the hit cost again, and rebuilds
/// none of the unwind rows or the DWARF indexes: the
/// kept files are the very same files, not rewritten, and the stacks are
/// named as before.
#[test]
fn a_first_recording_after_a_reboot_reuses_the_kept_directory() {
    let _k = kernel_lock();
    let base = tempfile::tempdir().unwrap();
    let kept = base.path().join("kept");
    let record = |run_dir: &Path| -> String {
        // Blocked waits: off-CPU stacks, which always hold kernel frames.
        let mut fx = spin("hot", 1, 1500, 10, 20);
        let pid = fx.pid.to_string();
        let mut rec = Recording::start_env(
            &[
                "--pid",
                &pid,
                "--force",
                "--probes",
                "none",
                "--offcpu",
                "--duration",
                "3s",
            ],
            &[
                ("INNOPROF_RUN_DIR", run_dir.to_str().unwrap()),
                ("INNOPROF_CACHE_DIR", kept.to_str().unwrap()),
            ],
        );
        rec.wait_attached();
        fx.run_calls();
        let (code, _, rec) = rec.finish();
        fx.exit();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        rec.file("oncpu.folded") + &rec.file("offcpu.folded")
    };
    let names =
        |dir: &Path| -> Vec<String> { kept_inventory(dir).into_iter().map(|(n, ..)| n).collect() };
    let first_boot = base.path().join("run-1");
    let first = record(&first_boot);
    assert!(first.contains("spin_hot"), "{first}");
    let before = kept_inventory(&kept);
    let kinds = |prefix: &str| {
        before
            .iter()
            .filter(|(n, ..)| n.starts_with(prefix))
            .count()
    };
    assert!(
        kinds("unwind-") >= 2,
        "the fixture's and libc's rows: {before:?}"
    );
    // Kernel frames are named by the kernel's own lookup: /proc/kallsyms
    // is not read, so no table of it is kept.
    assert_eq!(kinds("kallsyms.syms"), 0, "{before:?}");
    assert!(
        first
            .split([';', ' '])
            .any(|f| f.ends_with("_[k]") && !f.starts_with("0x")),
        "a named kernel frame: {first}"
    );
    // The per-boot directory holds the hit cost only.
    let per_boot = names(&first_boot);
    assert!(
        !per_boot.is_empty() && per_boot.iter().all(|n| n.starts_with("hitcost-")),
        "{per_boot:?}"
    );

    let next_boot = base.path().join("run-2");
    let next = record(&next_boot);
    assert!(next.contains("spin_hot"), "{next}");
    let per_boot = names(&next_boot);
    assert!(
        !per_boot.is_empty() && per_boot.iter().all(|n| n.starts_with("hitcost-")),
        "calibrated again: {per_boot:?}"
    );
    // A recording adds the DWARF units its stacks walked to the functions
    // index (another run may walk other units of libc): not compared.
    let built = |inv: Vec<(String, u64, u64, std::time::SystemTime)>| {
        inv.into_iter()
            .filter(|(n, ..)| !n.starts_with("functions-"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        built(kept_inventory(&kept)),
        built(before),
        "rebuilt after the reboot"
    );
    no_leftovers();
}

/// A baseline spinning in one function, an incident spinning in another:
/// the diff puts the new hot function first, with its share.
#[test]
fn diff_finds_the_function_that_got_hot() {
    let _k = kernel_lock();
    let dir = tempfile::tempdir().unwrap();
    let record = |mode: &str| {
        let mut fx = spin(mode, 1, 2500, 0, 0);
        let pid = fx.pid.to_string();
        let mut rec = Recording::start(&[
            "--pid",
            &pid,
            "--force",
            "--probes",
            "none",
            "--duration",
            "3s",
        ]);
        rec.wait_attached();
        fx.run_calls();
        let (code, _, rec) = rec.finish();
        fx.exit();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        let to = dir.path().join(mode);
        Command::new("cp")
            .arg("-r")
            .arg(&rec.out)
            .arg(&to)
            .status()
            .unwrap();
        to
    };
    let base = record("cold");
    let incident = record("hot");
    let out = dir.path().join("diff");
    let res = run_innoprof(&[
        "diff",
        base.to_str().unwrap(),
        incident.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&res.stdout);
    assert!(
        res.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&res.stderr)
    );

    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("diff.json")).unwrap()).unwrap();
    let on = d["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "oncpu")
        .unwrap();
    let syms = on["symbols"].as_array().unwrap();
    let delta = |name: &str| {
        syms.iter()
            .find(|s| s["symbol"] == name)
            .unwrap_or_else(|| panic!("{name} not in {syms:?}"))["self_delta_pct"]
            .as_f64()
            .unwrap()
    };
    let (hot, cold) = (delta("fx::Spinner::spin_hot(long)"), delta("fx_spin_cold"));
    eprintln!("diff: spin_hot {hot:+.1} pts, fx_spin_cold {cold:+.1} pts");
    assert!(hot >= 40.0 && cold <= -40.0, "hot {hot}, cold {cold}");
    // The largest rise and the largest fall.
    let most = |sign: f64| {
        syms.iter()
            .max_by(|a, b| {
                (sign * a["self_delta_pct"].as_f64().unwrap())
                    .total_cmp(&(sign * b["self_delta_pct"].as_f64().unwrap()))
            })
            .unwrap()["symbol"]
            .clone()
    };
    assert_eq!(most(1.0), "fx::Spinner::spin_hot(long)", "{syms:?}");
    assert_eq!(most(-1.0), "fx_spin_cold", "{syms:?}");
    // Differential folded: stack, baseline (scaled), incident.
    let text = std::fs::read_to_string(out.join("diff.oncpu.folded")).unwrap();
    let mut hot_line = None;
    for line in text.lines() {
        let f: Vec<&str> = line.rsplitn(3, ' ').collect();
        assert_eq!(f.len(), 3, "{line}");
        let (after, before) = (f[0].parse::<u64>().unwrap(), f[1].parse::<u64>().unwrap());
        if f[2].ends_with("fx::Spinner::spin_hot(long);fx_mix [inlined]") {
            hot_line = Some((before, after));
        }
    }
    let (before, after) = hot_line.expect("spin_hot stack in the diff");
    assert!(before == 0 && after > 50, "{before} -> {after}");
    let titles = svg_titles(&std::fs::read_to_string(out.join("diff.oncpu.svg")).unwrap());
    assert!(titles
        .iter()
        .any(|t| t.starts_with("fx::Spinner::spin_hot(long)")));
    assert!(
        stdout.contains("fx::Spinner::spin_hot(long)") && stdout.contains("+"),
        "{stdout}"
    );
    assert!(out.join("diff.txt").exists());
}

/// SIGKILL: the kernel closes every perf event and the tracepoint link.
#[test]
fn sigkill_leaves_no_cpu_profiler_attached() {
    let _k = kernel_lock();
    let fx = spin("hot", 0, 0, 0, 0);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--probes",
        "none",
        "--offcpu",
        "--duration",
        "10m",
    ]);
    rec.wait_attached();
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        cpu_profiler_links().len(),
        cpus + 1,
        "one perf event per CPU and the tracepoint"
    );
    rec.signal(libc::SIGKILL);
    let (code, _, _rec) = rec.finish();
    assert_eq!(code, None);
    no_leftovers();
    fx.exit();
}

/// Function name without parameters or spaces: how perf prints it.
fn bare(name: &str) -> String {
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    name[..end].replace(' ', "")
}

/// `perf record -e cpu-clock -F 99 -g -p PID -- sleep SECS` in the background.
fn perf_record(pid: u32, secs: u32, data: &Path) -> std::process::Child {
    Command::new("perf")
        .args([
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "99",
            "-g",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(data)
        .args(["--", "sleep", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf (apt-get install linux-perf)")
}

/// perf report's symbols: (module, function, % of samples, kernel?), most
/// samples first.
fn perf_symbols(data: &Path) -> Vec<(String, String, f64, bool)> {
    let out = Command::new("perf")
        .args(["report", "-i"])
        .arg(data)
        .args([
            "--stdio",
            "--no-children",
            "--sort",
            "dso,sym",
            "-g",
            "none",
            "--percent-limit",
            "0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // `    12.34%  mysqld  [.] ut_delay`, `     3.21%  [kernel.kallsyms]  [k] schedule`
    text.lines()
        .filter_map(|l| {
            let (pct, rest) = l.trim().split_once("%  ")?;
            let (dso, sym, kernel) = match rest.split_once(" [.] ") {
                Some((d, s)) => (d, s, false),
                None => {
                    let (d, s) = rest.split_once(" [k] ")?;
                    (d, s, true)
                }
            };
            Some((
                dso.trim().to_string(),
                bare(sym.trim()),
                pct.trim().parse().ok()?,
                kernel,
            ))
        })
        .collect()
}

/// Records a server under sysbench with innoprof and perf at once, and
/// checks that innoprof's hottest user functions are perf's.
fn compare_with_perf(server: &Server, extra: &[&str], secs: u32) -> (Summary, Recording) {
    let t0 = std::time::Instant::now();
    let prep = server
        .sysbench(&["prepare", "oltp_read_write"])
        .output()
        .unwrap();
    assert!(
        prep.status.success(),
        "{}",
        String::from_utf8_lossy(&prep.stderr)
    );
    let pid = server.pid.to_string();
    let mut args = vec!["--pid", &pid];
    args.extend_from_slice(extra);
    let duration = format!("{}s", secs + 1);
    args.extend_from_slice(&["--duration", &duration]);
    // Attached first (resolving probes takes a while), then the load, then
    // perf: both profilers see the same load.
    let mut rec = Recording::start(&args);
    rec.wait_attached();
    eprintln!("attached at {:?}", t0.elapsed());
    let mut run = server.sysbench(&[
        "run",
        "oltp_read_write",
        "--threads=4",
        &format!("--time={}", secs + 2),
    ]);
    let load = std::thread::spawn(move || {
        let out = run.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    });
    std::thread::sleep(Duration::from_secs(1));
    let perf_data = rec.out.with_file_name("perf.data");
    let mut perf = perf_record(server.pid, secs - 1, &perf_data);
    let (code, stdout, rec) = rec.finish();
    eprintln!("recorded at {:?}", t0.elapsed());
    assert!(perf.wait().unwrap().success(), "perf record failed");
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let report = load.join().unwrap();
    assert!(
        sysbench_number(&report, "transactions:") > 100.0,
        "{report}"
    );
    assert_eq!(server.sql("select 1").trim(), "1", "server still answers");
    no_leftovers();

    let s = rec.summary();
    let on = &s.cpu.as_ref().expect("a CPU profile").oncpu;
    let samples = on.samples;
    assert!(samples >= 200, "{samples} samples: {on:?}");
    assert_eq!(on.lost.map_full, 0);
    // A few samples may stop early, never many: a frame in code without
    // CFI, or a return address the kernel swapped for the uretprobe
    // trampoline while a latency probe's function is on the stack (the
    // [uprobes] page has no CFI; the real address is only in the kernel).
    let stopped = on.lost.unwind_stopped;
    assert!(
        stopped * 100 <= samples * 5,
        "{stopped} of {samples} walks stopped early"
    );
    assert_eq!(
        folded(&rec.file("oncpu.folded"))
            .iter()
            .map(|(_, n)| n)
            .sum::<u64>(),
        samples
    );

    // The server's own functions: libc names one address by several
    // aliases (__memcpy_…/__memmove_…, __libc_send/__send), and the two
    // tools need not pick the same one.
    let ours: Vec<String> = on
        .top
        .rows
        .iter()
        .filter(|r| r.module == "mysqld" && r.samples > 0)
        .map(|r| bare(&r.symbol))
        .take(10)
        .collect();
    let perf = perf_symbols(&perf_data);
    eprintln!("perf report at {:?}", t0.elapsed());
    let perf_mysqld: Vec<(&str, f64)> = perf
        .iter()
        .filter(|(dso, ..)| dso == "mysqld")
        .map(|(_, s, pct, _)| (s.as_str(), *pct))
        .collect();
    // perf's top 20, and whatever ties with the 20th: past the first few
    // functions a 10 s profile at 99 Hz has 2-3 samples per function.
    let cut = perf_mysqld.get(19).map_or(0.0, |(_, pct)| *pct);
    let perf_top: Vec<&str> = perf_mysqld
        .iter()
        .take_while(|(_, pct)| *pct >= cut)
        .map(|(s, _)| *s)
        .collect();
    let common = ours
        .iter()
        .filter(|s| perf_top.contains(&s.as_str()))
        .count();
    eprintln!(
        "innoprof top 10 mysqld functions: {ours:?}\nperf top 20 (+ties): {perf_top:?}\noverlap: {common} of {}",
        ours.len()
    );
    assert_eq!(ours.len(), 10, "fewer than 10 mysqld functions sampled");
    assert!(
        common >= 5,
        "only {common} of innoprof's top 10 in perf's top 20"
    );
    // Every function with >= 2 % of the samples in either profile (kernel
    // included) has a like share in the other: within 3 points or 40 %
    // (a 5 % function of ~800 samples varies by ~1 point per profile).
    let mine: HashMap<String, f64> = on
        .top
        .rows
        .iter()
        .map(|r| (bare(&r.symbol), r.self_pct))
        .collect();
    let theirs: HashMap<&str, f64> = perf
        .iter()
        .map(|(_, s, pct, _)| (s.as_str(), *pct))
        .collect();
    let mut heavy: Vec<&str> = mine
        .iter()
        .filter(|(_, p)| **p >= 2.0)
        .map(|(s, _)| s.as_str())
        .chain(theirs.iter().filter(|(_, p)| **p >= 2.0).map(|(s, _)| *s))
        .collect();
    heavy.sort();
    heavy.dedup();
    for f in &heavy {
        let (a, b) = (
            mine.get(*f).copied().unwrap_or(0.0),
            theirs.get(f).copied().unwrap_or(0.0),
        );
        eprintln!("  {f}: innoprof {a:.1}%, perf {b:.1}%");
    }
    assert!(!heavy.is_empty());
    assert!(
        perf_top.iter().take(3).any(|s| *s == ours[0]),
        "innoprof's hottest {} not in perf's top 3",
        ours[0]
    );

    // The flame graph is well-formed and made of mysqld's frames.
    let titles = svg_titles(&rec.file("oncpu.svg"));
    for f in ["do_command", "dispatch_command", "mysql_execute_command"] {
        assert!(
            titles.iter().any(|t| t.starts_with(f)),
            "{f} not in the flame graph"
        );
    }
    assert!(
        stdout.contains("on-CPU:") && stdout.contains("self %"),
        "{stdout}"
    );
    (s, rec)
}

#[test]
fn mysql_5_6_24_cpu_profile_matches_perf() {
    let _k = kernel_lock();
    let server = Server::start("mysql-5.6.24", &[]);
    let (s, _rec) = compare_with_perf(&server, &["--probes", "none"], 10);
    assert_eq!(s.target.server_version.as_deref(), Some("5.6.24"));
    assert!(s.probes.is_empty(), "--probes none: no uprobes");
    // No probes of its own: no probe cost to see in the samples.
    assert_eq!(s.overhead.probes_seen_in_samples, None);
    let cpu = s.cpu.as_ref().expect("a CPU profile");
    assert!(cpu.offcpu.is_none());
    let unwind = &cpu.unwind;
    let mysqld = unwind
        .files
        .iter()
        .find(|f| f.path.ends_with("/mysqld"))
        .unwrap();
    assert!(mysqld.rows > 10_000, "{unwind:?}");
}

/// What the probes cost the server, seen from its side: the CPU samples
/// that land in the kernel's uprobe handling, beside the model's figure
/// (hits × calibrated trap + the programs' run time in the target). Every
/// probe on, ungoverned, under sysbench: ~30–40 % of a core here, so a
/// 6 s recording at 99 Hz sees ~150–250 such samples.
#[test]
fn probe_hits_are_seen_in_the_cpu_samples_near_the_model() {
    let _k = kernel_lock();
    let server = Server::start("mysql-5.6.24", &[]);
    server.prepare("oltp_read_only");
    let pid = server.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--duration",
        "6s",
        "--probes",
        "all",
        "--max-overhead",
        "off",
    ]);
    rec.wait_attached();
    let load = server.sysbench_load("oltp_read_only", 2, 8);
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    load.join().unwrap();
    let s = rec.summary();
    let o = &s.overhead;
    let seen = o.probes_seen_in_samples.expect("probes and CPU samples");
    eprintln!(
        "model {:.2}% of a core; seen {seen:?}",
        o.probes_pct_of_core
    );
    let on = &s.cpu.as_ref().unwrap().oncpu;
    assert_eq!(seen.samples, on.probe_handling_samples);
    assert!(seen.samples >= 40, "{seen:?} of {} samples", on.samples);
    assert!(seen.pct_of_core_lo <= seen.pct_of_core && seen.pct_of_core <= seen.pct_of_core_hi);
    // Two ways to one number, neither exact: the samples miss the few
    // user-mode instructions of a hit, the model's trap is a calibration
    // outside the server (0.8x–1.25x the samples in runs here).
    let model = o.probes_pct_of_core;
    assert!(
        seen.pct_of_core_hi >= model * 0.5 && seen.pct_of_core_lo <= model * 1.5,
        "seen {seen:?}, model {model:.2}%"
    );
    assert!(
        stdout.contains("seen in the CPU samples:")
            || rec.file("summary.txt").contains("seen in the CPU samples:"),
        "{stdout}"
    );
}

#[test]
fn mariadb_10_2_11_cpu_offcpu_and_probes_under_sysbench() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    let (s, rec) = compare_with_perf(&server, &["--offcpu"], 10);
    assert_eq!(s.target.server_version.as_deref(), Some("10.2.11"));
    // The uprobe probes ran alongside.
    assert!(probe(&s, "innodb.redo.write_up_to").calls > 50);

    // Off-CPU: where InnoDB threads wait, by stack.
    let off = s
        .cpu
        .as_ref()
        .and_then(|c| c.offcpu.as_ref())
        .expect("off-CPU");
    eprintln!("off-CPU: {off:?}");
    // The profiler's own programs, kernel-measured: the sampler ran once
    // per tick it counted (statistics on before it attached, read after
    // it detached), the switch tracer at least once per block it saw.
    let on = &s.cpu.as_ref().unwrap().oncpu;
    let sampler = on.program.expect("run statistics (root)");
    let tracer = off.program.expect("run statistics (root)");
    eprintln!("sampler {sampler:?}; switch tracer {tracer:?}");
    assert_eq!(sampler.runs, on.ticks_seen);
    assert!(
        tracer.runs >= off.blocks + off.preempted_switches,
        "{tracer:?}"
    );
    for p in [sampler, tracer] {
        assert!(p.avg_ns > 50.0 && p.avg_ns < 200_000.0, "{p:?}");
    }
    let cost = s.overhead.cpu_profiler_pct_of_core.expect("measured");
    assert!((cost - sampler.pct_of_core - tracer.pct_of_core).abs() < 1e-9);
    let text = rec.file("summary.txt");
    assert!(
        text.contains("CPU profiler: ") && text.contains(" sampler runs at "),
        "{text}"
    );
    let stacks = folded(&rec.file("offcpu.folded"));
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let share = |pred: &dyn Fn(&str) -> bool| -> f64 {
        stacks
            .iter()
            .filter(|(s, _)| pred(s))
            .map(|(_, n)| *n)
            .sum::<u64>() as f64
            * 100.0
            / total as f64
    };
    // Stacks reach from the thread start through libc's futex wait.
    // A thread's root is clone3/start_thread, or for mysqld's main thread
    // (waiting in poll for connections) libc's start of main.
    let from_start = share(&|s: &str| {
        from_thread_start(s) || s.starts_with("__libc_start_call_main;") || s.starts_with("_start;")
    });
    let os_event = share(&|s: &str| s.contains(";os_event"));
    let commit = share(&|s: &str| s.contains(";trans_commit(") && s.contains(";log_write_up_to("));
    let mut by_top = HashMap::new();
    for r in off.top.rows.iter().take(10) {
        by_top.insert(r.symbol.clone(), r.self_pct);
    }
    eprintln!(
        "off-CPU {total} us: {from_start:.1}% from thread start, {os_event:.1}% in os_event waits, \
         {commit:.1}% commits waiting for the redo log; top: {by_top:?}"
    );
    assert!(
        from_start >= 95.0,
        "{from_start}% of off-CPU time from the thread start"
    );
    assert!(os_event >= 10.0, "{os_event}% in os_event waits");
    assert!(commit > 0.0, "no commit waiting in log_write_up_to");
    // Each blocked stack under its thread's role: the load's connections
    // (their commits wait for the redo log) and the server's background
    // threads (their os_event waits), told apart at the root.
    let by_role = roles(&rec.file("offcpu.folded"));
    eprintln!("off-CPU by role: {by_role:?}");
    assert!(
        by_role
            .get(&Some("connection".into()))
            .is_some_and(|n| *n > 0),
        "{by_role:?}"
    );
    let background: u64 = by_role
        .iter()
        .filter(|(r, _)| {
            r.as_deref().is_some_and(|r| {
                innoprof::plan::thread_role::ROLES.iter().any(|x| {
                    x.name == r && x.kind == innoprof::plan::thread_role::RoleKind::Background
                })
            })
        })
        .map(|(_, n)| n)
        .sum();
    assert!(background > 0, "{by_role:?}");
    // The table charges mysqld's own frames, not the libc wait they call.
    let first = &off.top.rows[0];
    assert_eq!(first.module, "mysqld", "{first:?}");
    assert!(off.blocks > 100);
    let titles = svg_titles(&rec.file("offcpu.svg"));
    assert!(
        titles.iter().any(|t| t.starts_with("os_event")),
        "os_event frames in the off-CPU flame graph"
    );
}

/// Frames of `module` in every folded file of a bundle: (named, unnamed
/// `module+0x…`, inline).
fn module_frames(bundle: &std::path::Path, module: &str) -> (u64, u64, u64) {
    let (mut named, mut unnamed, mut inlined) = (0, 0, 0);
    let unknown = format!("{module}+0x");
    for entry in std::fs::read_dir(bundle).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "folded") {
            continue;
        }
        for (stack, _) in folded(&std::fs::read_to_string(&path).unwrap()) {
            for frame in stack.split(';') {
                if frame.starts_with(&unknown) {
                    unnamed += 1;
                } else if frame.ends_with(" [inlined]") {
                    inlined += 1;
                } else {
                    named += 1;
                }
            }
        }
    }
    (named, unnamed, inlined)
}

/// `--debuginfo` reaches the stack symbolizer, not only probe resolution:
/// a server stripped of everything (`strip --strip-all`, no debuglink)
/// runs, and its CPU and wait stacks are named from the split debug file,
/// inline frames included; the same server recorded without it shows
/// `mysqld+0x…` frames. (Exact equality of the names with the unstripped
/// binary's, address by address: tests/e2e/resolve.rs.)
#[test]
fn a_stripped_servers_stacks_are_named_from_its_debug_file() {
    let _k = kernel_lock();
    let dir = tempfile::tempdir().unwrap();
    let fetched = Command::new(repo_root().join("scripts/servers.sh"))
        .args(["fetch", "mariadb-10.2.11"])
        .output()
        .unwrap();
    let original = String::from_utf8_lossy(&fetched.stdout).trim().to_string();
    let debug = dir.path().join("mysqld.debug");
    let stripped = dir.path().join("mysqld");
    for (cmd, args) in [
        (
            "objcopy",
            vec!["--only-keep-debug", &original, debug.to_str().unwrap()],
        ),
        (
            "strip",
            vec!["--strip-all", "-o", stripped.to_str().unwrap(), &original],
        ),
    ] {
        assert!(
            Command::new(cmd).args(&args).status().unwrap().success(),
            "{cmd}"
        );
    }
    let t = std::time::Instant::now();
    let server = Server::start_binary("mariadb-10.2.11", &stripped);
    println!("split and started in {:.1}s", t.elapsed().as_secs_f64());
    assert_eq!(server.binary(), stripped);
    let load = server.sysbench_open_ended("oltp_read_write", 2, &[]);
    let pid = server.pid.to_string();
    let record = |extra: &[&str]| {
        let mut args = vec!["--pid", &pid, "--duration", "3s"];
        args.extend_from_slice(extra);
        let t = std::time::Instant::now();
        let rec = Recording::start(&args);
        let (code, _, rec) = rec.finish();
        println!("recorded {extra:?} in {:.1}s", t.elapsed().as_secs_f64());
        assert_eq!(code, Some(0), "{}", rec.stderr());
        rec
    };
    let named = record(&["--debuginfo", debug.to_str().unwrap()]);
    let bare = record(&[]);
    load.stop();

    let (n, u, i) = module_frames(&named.out, "mysqld");
    let (bn, bu, _) = module_frames(&bare.out, "mysqld");
    println!(
        "with --debuginfo: {n} named, {u} unnamed, {i} inline; without: {bn} named, {bu} unnamed"
    );
    // PLT stubs have no symbol even in the unstripped binary.
    assert!(n > 500 && u * 100 <= n, "{n} named, {u} unnamed");
    assert!(i > 50, "{i} inline frames");
    // Without it, mysqld's own frames are unnamed (only its few exported
    // functions keep a .dynsym name).
    assert!(bu > 100, "without the debug file: {bn} named, {bu} unnamed");
    let oncpu = named.file("oncpu.folded");
    let commits = named.file("innodb.redo.write_up_to.folded");
    for (what, text) in [("oncpu", &oncpu), ("write_up_to", &commits)] {
        assert!(
            text.contains(";dispatch_command("),
            "{what}: no dispatch_command frame"
        );
    }
}

/// A folded stack rooted at a thread's start in libc: `__clone3` as libc's
/// symbol table names it (libc6-dbg's file, compressed DWARF: named from its
/// symbols since 2026-11-28), `clone3` as its DWARF does.
fn from_thread_start(stack: &str) -> bool {
    ["__clone3;start_thread;", "clone3;start_thread;"]
        .iter()
        .any(|root| stack.starts_with(root))
}

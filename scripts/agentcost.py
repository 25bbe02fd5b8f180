#!/usr/bin/env python3
"""What `innoprof record` itself costs: CPU and peak RSS of the agent process,
whole life (start-up, recording, symbolization, bundle), side by side.

One server, one continuous sysbench run (2 threads); while it runs, the
given innoprof binaries (--bin NAME=PATH, repeatable; default: this tree's
release build) record it in turns, `--runs` rounds, each round in a random
order (--seed), each recording `innoprof record --pid SERVER --duration D`
plus --args. Per run, from wait4(): user+system CPU seconds and peak RSS
(ru_maxrss); wall time from launch to exit. Per binary: the median with a
95 % bootstrap interval of CPU seconds, of CPU as % of one core over the
recording's --duration (issue 12's measure: "<= 1 % of a core averaged over
a 30 s default recording", start-up and symbolization included) and of peak
RSS; with two binaries, the median of their per-round ratio.

Each binary keeps what innoprof keeps in directories of its own: the
per-boot one (hit cost, kernel's symbols; INNOPROF_RUN_DIR, a fresh
/run/innoprof-agentcost-*) and the kept one (unwind rows, the server's
DWARF unit index and functions, the
resolved probe set; INNOPROF_CACHE_DIR, a fresh
/var/tmp/innoprof-agentcost-kept-*), both removed at the end: what is kept
holds for one innoprof binary, and two builds sharing a directory replace
each other's files. Before the rounds, each binary runs `innoprof
calibrate` and one --warm-up recording (default 5 s; 0: none), as a DBA's
first recording does; the rounds then measure recordings that find what
an earlier one kept, as a DBA's later recordings do. With
--cold-calibration every run passes `--recalibrate` (each pays for
measuring its hit cost). With --cold every run finds an empty per-boot
directory, as the first recording after a reboot finds /run/innoprof: it
pays for the calibration and the kernel's symbols, and finds the kept
directory as the warm-up left it (builds that keep everything per boot,
before 2026-11-27's kept directory, find nothing). With --first both
directories are empty at every run, as for the first recording ever of
this server by this innoprof binary (no calibrate and no warm-up run).

Usage: scripts/agentcost.py [--server mariadb-10.2.11] [--workload oltp_read_write]
                            [--duration 30] [--runs 5] [--bin NAME=PATH ...]
                            [--args "--probes default"] [--cold | --first] [--seed N]
                            [--out agentcost-out]
"""

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402 - the server, sysbench and statistics helpers

ROOT = bench.ROOT


def log(msg):
    print(f"agentcost: {msg}", file=sys.stderr, flush=True)


def run_once(binary, server_pid, duration, extra, workdir, n, dirs):
    out = os.path.join(workdir, f"rec-{n}")
    cmd = [binary, "record", "--pid", str(server_pid), "--duration", f"{duration}s", "--out", out] + extra
    t0 = time.monotonic()
    # stderr to a file, not a pipe: wait4 must not wait on a full pipe.
    with tempfile.TemporaryFile(mode="w+") as err:
        env = dict(os.environ, INNOPROF_RUN_DIR=dirs[0], INNOPROF_CACHE_DIR=dirs[1])
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    try:
        os.remove(out + ".tar.gz")
    except FileNotFoundError:
        pass
    cpu = ru.ru_utime + ru.ru_stime
    return {
        "cpu_s": cpu,
        "user_s": ru.ru_utime,
        "sys_s": ru.ru_stime,
        "pct_of_core": cpu / duration * 100,
        "max_rss_mib": ru.ru_maxrss / 1024,
        "wall_s": wall,
        "recording_agent_pct": summary.get("overhead", {}).get("agent_cpu_pct_of_core"),
        "probes_pct_of_core": summary.get("overhead", {}).get("probes_pct_of_core"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="mariadb-10.2.11")
    ap.add_argument("--workload", default="oltp_read_write")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--duration", type=int, default=30, help="seconds per recording (default 30)")
    ap.add_argument("--runs", type=int, default=5, help="rounds; each binary records once per round")
    ap.add_argument("--bin", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--args", default="", help="extra `innoprof record` arguments, one shell-quoted string")
    ap.add_argument("--cold-calibration", action="store_true",
                    help="every run measures its hit cost (the per-boot cache is bypassed)")
    ap.add_argument("--cold", action="store_true",
                    help="every run starts with an empty per-boot directory (the first recording of a boot)")
    ap.add_argument("--first", action="store_true",
                    help="every run starts with empty per-boot and kept directories "
                         "(the first recording ever of this server by this binary)")
    ap.add_argument("--warm-up", type=int, default=5, metavar="SECONDS",
                    help="one recording this long per binary before the rounds (0: none)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="agentcost-out")
    args = ap.parse_args()
    # Ctrl-C and SIGTERM unwind through the `finally`: the server,
    # sysbench and the directories made here go too (a `pkill` of the
    # script left its server and sysbench running, 2026-11-28).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    bins = []
    for b in args.bin or [f"shipped={os.path.join(ROOT, 'target', 'release', 'innoprof')}"]:
        name, sep, path = b.partition("=")
        if not sep or not os.access(path, os.X_OK):
            ap.error(f"--bin {b}: expected NAME=PATH of an executable")
        bins.append((name, path))
    if args.runs < 1 or args.duration < 1:
        ap.error("--runs and --duration must be >= 1")
    if args.cold and args.first:
        ap.error("--cold and --first: choose one")
    extra = shlex.split(args.args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    log(f"seed {seed}")

    dirname = tempfile.mkdtemp(prefix="innoprof-agentcost-srv-")
    workdir = tempfile.mkdtemp(prefix="innoprof-agentcost-")
    runs = {name: [] for name, _ in bins}
    # Each binary's own per-boot and kept directories: root's, 0700 (mkdtemp), removed at the end.
    dirs = {name: (tempfile.mkdtemp(prefix="innoprof-agentcost-", dir="/run"),
                   tempfile.mkdtemp(prefix="innoprof-agentcost-kept-", dir="/var/tmp")) for name, _ in bins}
    server_pid = int(subprocess.run([bench.SERVERS, "start", args.server, dirname], check=True,
                                    capture_output=True, text=True).stdout.strip())
    sb = None
    try:
        subprocess.run([bench.SYSBENCH, dirname, "prepare", args.workload], check=True, capture_output=True)
        sb = bench.Sysbench(dirname, args.workload, args.threads, server_pid)
        sb.wait_for(10, 70)
        n = 0
        # A first run finds nothing kept: no calibrate and no warm-up first.
        for name, path in ([] if args.first else bins):
            env = dict(os.environ, INNOPROF_RUN_DIR=dirs[name][0], INNOPROF_CACHE_DIR=dirs[name][1])
            if not args.cold_calibration:
                subprocess.run([path, "calibrate"], check=True, capture_output=True, env=env)
            if args.warm_up > 0:
                run_once(path, server_pid, args.warm_up, extra, workdir, n, dirs[name])
                n += 1
        for r in range(args.runs):
            order = bins[:]
            rng.shuffle(order)
            for name, path in order:
                cold = ["--recalibrate"] if args.cold_calibration else []
                # Emptied, not replaced: the directories stay root's, 0700.
                for d in dirs[name][:2 if args.first else 1 if args.cold else 0]:
                    for f in os.listdir(d):
                        os.remove(os.path.join(d, f))
                res = run_once(path, server_pid, args.duration, extra + cold, workdir, n, dirs[name])
                res["round"] = r
                n += 1
                runs[name].append(res)
                log(f"round {r + 1}/{args.runs} {name}: {res['cpu_s']:.2f} s CPU "
                    f"({res['user_s']:.2f} user, {res['sys_s']:.2f} sys) = {res['pct_of_core']:.2f} % of a core "
                    f"over {args.duration} s, peak RSS {res['max_rss_mib']:.0f} MiB, wall {res['wall_s']:.1f} s")
    finally:
        if sb is not None:
            sb.stop()
        subprocess.run([bench.SERVERS, "stop", dirname], capture_output=True)
        shutil.rmtree(dirname, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
        for d in dirs.values():
            for one in d:
                shutil.rmtree(one, ignore_errors=True)

    srng = random.Random(seed)
    rows = []
    lines = [f"{args.server} {args.workload}, {args.threads} sysbench threads; `innoprof record --duration "
             f"{args.duration}s {args.args}`, {args.runs} runs per binary, interleaved"
             + (", each with an empty per-boot directory (first recording of a boot)" if args.cold else "")
             + (", each with empty per-boot and kept directories (first recording ever)" if args.first else "")
             + "; medians [95 % bootstrap]",
             "",
             "| binary | CPU s | % of a core over the recording | user s | sys s | peak RSS MiB | wall s |",
             "|---|---|---|---|---|---|---|"]

    def cell(xs, spec):
        med, lo, hi = bench.bootstrap_median(xs, srng)
        return (f"{med:{spec}}" + (f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None else "")), med

    for name, _ in bins:
        rs = runs[name]
        c = {k: cell([x[k] for x in rs], ".2f" if k != "max_rss_mib" else ".0f")
             for k in ["cpu_s", "pct_of_core", "user_s", "sys_s", "max_rss_mib", "wall_s"]}
        rows.append({"binary": name, **{k: v[1] for k, v in c.items()}})
        lines.append(f"| {name} | " + " | ".join(c[k][0] for k in
                     ["cpu_s", "pct_of_core", "user_s", "sys_s", "max_rss_mib", "wall_s"]) + " |")
    if len(bins) == 2:
        (a, _), (b, _) = bins
        ratios = [y["cpu_s"] / x["cpu_s"] for x, y in zip(runs[a], runs[b]) if x["cpu_s"] > 0]
        med, lo, hi = bench.bootstrap_median(ratios, srng)
        lines += ["", f"CPU {b} / {a}, per round: {med:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo else "")]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "agentcost.json"), "w") as f:
        json.dump({"meta": {"seed": seed, **{k: v for k, v in vars(args).items()}}, "summary": rows,
                   "runs": runs}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Overhead benchmark: sysbench throughput, p95 latency and the server's CPU
time per transaction, with and without innoprof, measured side by side.

Configurations run interleaved (A B C … A B C …) on one server, and each
figure is the median over the repetitions, reported as a ratio to `none`.
Server CPU per transaction (utime+stime of mysqld from /proc over the run,
divided by transactions) charges probe cost to the server directly and is far
less noisy than throughput on these VMs.

  none      no profiler
  default   innoprof record --probes default --no-cpu (contended/rare paths)
  all       innoprof record --probes all --no-cpu, under the overhead governor
            (default budget: 1% of one core)
  cpu99     innoprof record --probes none (on-CPU sampling at 99 Hz only)
  pfs       performance_schema with every wait instrument and consumer timed
            (MariaDB is started with performance_schema=ON, as MySQL 5.6 is by
            default, so that this configuration exists there too)
  bpftrace  bpftrace timing the same symbols as `all` (entry + return, a log2
            histogram per symbol, no stacks), ungoverned; skipped if bpftrace
            is not installed

Writes bench.md (table of medians and ratios), bench.json (every run) and
bench.svg (server CPU per transaction relative to `none`) into --out.

Usage: scripts/bench.py [--servers mysql-5.6.24,mariadb-10.2.11]
                        [--workloads oltp_read_only,oltp_read_write]
                        [--reps 3] [--seconds 20] [--threads 2] [--configs ...] [--out DIR]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = os.path.join(ROOT, "scripts", "servers.sh")
SYSBENCH = os.path.join(ROOT, "scripts", "sysbench.sh")
INNOPROF = os.path.join(ROOT, "target", "release", "innoprof")
CLK_TCK = os.sysconf("SC_CLK_TCK")

INNOPROF_ARGS = {
    "default": ["--probes", "default", "--no-cpu"],
    "all": ["--probes", "all", "--no-cpu"],
    "cpu99": ["--probes", "none", "--freq", "99"],
}


def cpu_seconds(pid):
    """utime+stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def sql(dirname, statement):
    out = subprocess.run([SERVERS, "client", dirname, "-N", "-e", statement],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


class PerfSchema:
    """Turns every wait instrument and consumer on (timed), and restores
    the server's own settings afterwards."""

    def __init__(self, dirname):
        self.dir = dirname
        self.available = sql(dirname, "SELECT @@performance_schema") == "1"
        if self.available:
            self.instruments = sql(self.dir, "SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments "
                                             "WHERE NAME LIKE 'wait/%'")
            self.consumers = sql(self.dir, "SELECT NAME, ENABLED FROM performance_schema.setup_consumers")

    def enable(self):
        sql(self.dir, "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES' "
                      "WHERE NAME LIKE 'wait/%'; "
                      "UPDATE performance_schema.setup_consumers SET ENABLED='YES' "
                      "WHERE NAME LIKE 'events_waits%' OR NAME LIKE '%instrumentation'")

    def restore(self):
        stmts = []
        for line in self.instruments.splitlines():
            name, enabled, timed = line.split("\t")
            stmts.append(f"UPDATE performance_schema.setup_instruments SET ENABLED='{enabled}', "
                         f"TIMED='{timed}' WHERE NAME='{name}'")
        for line in self.consumers.splitlines():
            name, enabled = line.split("\t")
            stmts.append(f"UPDATE performance_schema.setup_consumers SET ENABLED='{enabled}' WHERE NAME='{name}'")
        for i in range(0, len(stmts), 200):
            sql(self.dir, "; ".join(stmts[i:i + 200]))


def parse_sysbench(text):
    tps = p95 = txns = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("transactions:"):
            txns = int(line.split()[1])
            tps = float(line.split("(")[1].split()[0])
        elif line.startswith("95th percentile:"):
            p95 = float(line.split()[2])
    if tps is None or p95 is None:
        raise RuntimeError("unexpected sysbench output:\n" + text)
    return txns, tps, p95


def bpftrace_script(server_pid):
    """bpftrace timing every symbol `innoprof --probes all` attaches
    (entry/return pairs keyed by thread, a histogram per symbol)."""
    out = subprocess.run([INNOPROF, "probes", "--pid", str(server_pid), "--probes", "all", "--json"],
                         check=True, capture_output=True, text=True)
    binary = os.readlink(f"/proc/{server_pid}/exe")
    lines = []
    n = 0
    for p in json.loads(out.stdout)["probes"]:
        for sym in p["resolution"]["symbols"]:
            # Inline sites have no symbol of their own; clones' dotted names
            # are not valid bpftrace probe names.
            if sym["table"] == "dwarf_inline" or "." in sym["raw"]:
                continue
            probe = f"uprobe:{binary}:{sym['raw']}"
            ret = f"uretprobe:{binary}:{sym['raw']}"
            lines.append(f"{probe} {{ @start{n}[tid] = nsecs; }}")
            lines.append(f"{ret} /@start{n}[tid]/ {{ @lat{n} = hist(nsecs - @start{n}[tid]); "
                         f"delete(@start{n}[tid]); }}")
            n += 1
    return "\n".join(lines) + "\n", n


def start_bpftrace(server_pid, workdir):
    script, n = bpftrace_script(server_pid)
    path = os.path.join(workdir, "all.bt")
    with open(path, "w") as f:
        f.write(script)
    errlog = open(os.path.join(workdir, "bpftrace.err"), "w+")
    proc = subprocess.Popen(["bpftrace", "-p", str(server_pid), path], stdout=errlog, stderr=errlog)
    deadline = time.time() + 300
    while "Attaching" not in open(errlog.name).read():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("bpftrace did not start: " + open(errlog.name).read())
        time.sleep(0.2)
    # "Attaching N probes..." comes before the attach completes.
    time.sleep(3)
    return proc, n


def run_one(dirname, server_pid, workload, config, args, pfs):
    agent = None
    agent_out = tempfile.mkdtemp(prefix="innoprof-bench-")
    probes_pct = None
    if config == "pfs":
        pfs.enable()
    if config == "bpftrace":
        agent, _ = start_bpftrace(server_pid, agent_out)
    if config in INNOPROF_ARGS:
        errlog = open(os.path.join(agent_out, "stderr"), "w+")
        agent = subprocess.Popen([INNOPROF, "record", "--pid", str(server_pid), "--duration", "1h",
                                  "--out", os.path.join(agent_out, "rec")] + INNOPROF_ARGS[config],
                                 stdout=subprocess.DEVNULL, stderr=errlog)
        deadline = time.time() + 120
        while "recording for" not in open(errlog.name).read():
            if agent.poll() is not None or time.time() > deadline:
                raise RuntimeError("innoprof did not start: " + open(errlog.name).read())
            time.sleep(0.1)
    try:
        agent_cpu0 = cpu_seconds(agent.pid) if agent else 0.0
        server_cpu0 = cpu_seconds(server_pid)
        t0 = time.time()
        bench = subprocess.run([SYSBENCH, dirname, "run", workload, f"--threads={args.threads}",
                                f"--time={args.seconds}"], capture_output=True, text=True, check=True)
        wall = time.time() - t0
        server_cpu = cpu_seconds(server_pid) - server_cpu0
        agent_cpu = (cpu_seconds(agent.pid) - agent_cpu0) if agent else 0.0
        agent_rss = peak_rss_mb(agent.pid) if agent else 0.0
    finally:
        if agent:
            agent.send_signal(signal.SIGINT)
            agent.wait(timeout=300)
        if config in INNOPROF_ARGS:
            try:
                with open(os.path.join(agent_out, "rec", "summary.json")) as f:
                    probes_pct = json.load(f)["overhead"]["probes_pct_of_core"]
            except (OSError, KeyError, ValueError):
                pass
        if config == "pfs":
            pfs.restore()
        shutil.rmtree(agent_out, ignore_errors=True)
    txns, tps, p95 = parse_sysbench(bench.stdout)
    return {
        "config": config, "workload": workload, "tps": tps, "p95_ms": p95, "transactions": txns,
        "server_cpu_us_per_txn": server_cpu * 1e6 / max(txns, 1),
        "agent_cpu_pct_of_core": agent_cpu * 100 / wall, "agent_peak_rss_mb": agent_rss,
        # innoprof's own account of what probe hits cost (calibrated per-hit cost x hits).
        "probes_pct_of_core": probes_pct,
    }


def summarise(runs, configs, workloads, server):
    rows = []
    for w in workloads:
        mine = [r for r in runs if r["workload"] == w]
        base = [r for r in mine if r["config"] == "none"]
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        for c in configs:
            rs = [r for r in mine if r["config"] == c]
            if not rs:
                continue
            row = {"server": server, "workload": w, "config": c, "reps": len(rs)}
            for k in ("tps", "p95_ms", "server_cpu_us_per_txn", "agent_cpu_pct_of_core", "agent_peak_rss_mb"):
                row[k] = med(rs, k)
            est = [r["probes_pct_of_core"] for r in rs if r.get("probes_pct_of_core") is not None]
            row["probes_pct_of_core"] = statistics.median(est) if est else None
            if base:
                for k in ("tps", "p95_ms", "server_cpu_us_per_txn"):
                    row[k + "_ratio"] = row[k] / med(base, k)
            rows.append(row)
    return rows


def markdown(rows, meta):
    out = [f"{meta['threads']} sysbench threads, {meta['seconds']} s per run, {meta['reps']} interleaved "
           f"repetitions, medians; ratios against `none` on the same server", "",
           "| server | workload | config | tps | tps ratio | p95 ms | p95 ratio | server CPU µs/txn | "
           "CPU/txn ratio | probe cost (innoprof's estimate, % of a core) | agent CPU % of a core | agent RSS MB |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        est = "-" if r.get("probes_pct_of_core") is None else f"{abs(r['probes_pct_of_core']):.2f}"
        out.append(f"| {r['server']} | {r['workload']} | {r['config']} | {r['tps']:.0f} | "
                   f"{r.get('tps_ratio', 1):.3f} | {r['p95_ms']:.2f} | {r.get('p95_ms_ratio', 1):.3f} | "
                   f"{r['server_cpu_us_per_txn']:.0f} | {r.get('server_cpu_us_per_txn_ratio', 1):.3f} | {est} | "
                   f"{r['agent_cpu_pct_of_core']:.2f} | {r['agent_peak_rss_mb']:.0f} |")
    return "\n".join(out) + "\n"


def svg_plot(rows):
    """Grouped bars: server CPU per transaction relative to `none`, one
    group per (server, workload), one bar per configuration."""
    groups = []
    for r in rows:
        key = (r["server"], r["workload"])
        if key not in groups:
            groups.append(key)
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    colours = ["#999999", "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2"]
    bar, gap, top, left, height = 18, 30, 40, 60, 260
    width = left + len(groups) * (len(configs) * bar + gap) + 160
    vmax = max([r.get("server_cpu_us_per_txn_ratio", 1) for r in rows] + [1.2])
    y = lambda v: top + height - v / vmax * height
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 70}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="20" font-size="13">server CPU per transaction, relative to no profiler '
           f'(median of interleaved runs)</text>']
    for v in [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]:
        if v <= vmax:
            out.append(f'<line x1="{left}" x2="{width - 150}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                       f'stroke="{"#333" if v == 1.0 else "#ddd"}"/>'
                       f'<text x="{left - 30}" y="{y(v) + 4:.1f}">{v:.1f}x</text>')
    for gi, (server, workload) in enumerate(groups):
        x0 = left + gi * (len(configs) * bar + gap)
        for ci, c in enumerate(configs):
            r = next((r for r in rows if (r["server"], r["workload"], r["config"]) == (server, workload, c)), None)
            if r is None:
                continue
            v = r.get("server_cpu_us_per_txn_ratio", 1)
            out.append(f'<rect x="{x0 + ci * bar}" y="{y(v):.1f}" width="{bar - 2}" height="{y(0) - y(v):.1f}" '
                       f'fill="{colours[ci % len(colours)]}"><title>{c}: {v:.3f}</title></rect>')
        out.append(f'<text x="{x0}" y="{top + height + 15}">{server}</text>'
                   f'<text x="{x0}" y="{top + height + 30}">{workload}</text>')
    for ci, c in enumerate(configs):
        ly = top + 10 + ci * 16
        out.append(f'<rect x="{width - 140}" y="{ly}" width="12" height="12" fill="{colours[ci % len(colours)]}"/>'
                   f'<text x="{width - 122}" y="{ly + 10}">{c}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bench_server(server, configs, workloads, args):
    dirname = tempfile.mkdtemp(prefix="innoprof-bench-srv-")
    # performance_schema ON where it is not by default (MariaDB), with its
    # default instruments, so the pfs configuration can be measured there.
    extra = ["--performance-schema=ON"] if server.startswith("mariadb") else []
    server_pid = int(subprocess.run([SERVERS, "start", server, dirname] + extra, check=True,
                                    capture_output=True, text=True).stdout.strip())
    runs = []
    configs = list(configs)
    try:
        pfs = PerfSchema(dirname)
        if "pfs" in configs and not pfs.available:
            print(f"bench: performance_schema is OFF on {server}; skipping pfs", file=sys.stderr)
            configs.remove("pfs")
        if "bpftrace" in configs and shutil.which("bpftrace") is None:
            print("bench: bpftrace is not installed; skipping it", file=sys.stderr)
            configs.remove("bpftrace")
        for w in workloads:
            subprocess.run([SYSBENCH, dirname, "prepare", w], check=True, capture_output=True)
            # Warm the buffer pool once so the first configuration is not penalised.
            subprocess.run([SYSBENCH, dirname, "run", w, "--time=5"], check=True, capture_output=True)
            for rep in range(args.reps):
                order = configs if rep % 2 == 0 else list(reversed(configs))
                for c in order:
                    r = run_one(dirname, server_pid, w, c, args, pfs)
                    r["rep"] = rep
                    r["server"] = server
                    runs.append(r)
                    print(f"bench: {server} {w} rep {rep} {c}: {r['tps']:.0f} tps, p95 {r['p95_ms']:.2f} ms, "
                          f"{r['server_cpu_us_per_txn']:.0f} µs CPU/txn", file=sys.stderr)
            subprocess.run([SYSBENCH, dirname, "cleanup", w], check=True, capture_output=True)
    finally:
        subprocess.run([SERVERS, "stop", dirname], capture_output=True)
        shutil.rmtree(dirname, ignore_errors=True)
    return runs, summarise(runs, configs, workloads, server)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="mysql-5.6.24,mariadb-10.2.11")
    ap.add_argument("--workloads", default="oltp_read_only,oltp_read_write")
    ap.add_argument("--configs", default="none,default,all,cpu99,pfs,bpftrace")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    configs = args.configs.split(",")
    workloads = args.workloads.split(",")

    subprocess.run(["cargo", "build", "--release", "-q", "-p", "innoprof-cli"], cwd=ROOT, check=True)
    runs, rows = [], []
    for server in args.servers.split(","):
        r, s = bench_server(server, configs, workloads, args)
        runs += r
        rows += s

    meta = {"servers": args.servers, "threads": args.threads, "seconds": args.seconds, "reps": args.reps,
            "configs": configs, "workloads": workloads}
    os.makedirs(args.out, exist_ok=True)
    table = markdown(rows, meta)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "summary": rows, "runs": runs}, f, indent=2)
    with open(os.path.join(args.out, "bench.svg"), "w") as f:
        f.write(svg_plot(rows))
    print(table)


if __name__ == "__main__":
    main()

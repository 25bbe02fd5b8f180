#!/usr/bin/env python3
"""Overhead benchmark: sysbench throughput, p95 latency and the server's CPU
time per transaction, with and without innoprof, measured side by side.

Configurations run interleaved (A B C … A B C …) on one server, and each
figure is the median over the repetitions, reported as a ratio to `none`.
Server CPU per transaction (utime+stime of mysqld from /proc over the run,
divided by transactions) charges probe cost to the server directly and is far
less noisy than throughput on these VMs.

  none     no profiler
  default  innoprof record --probes default --no-cpu (contended/rare paths)
  all      innoprof record --probes all --no-cpu (adds every hot path; no governor yet)
  cpu99    innoprof record --probes none (on-CPU sampling at 99 Hz only)
  pfs      performance_schema with every wait instrument and consumer timed
           (only where performance_schema is ON: MySQL 5.6 by default)

Usage: scripts/bench.py [--server mysql-5.6.24] [--workloads oltp_read_only,oltp_read_write]
                        [--reps 5] [--seconds 20] [--threads 2] [--configs ...] [--out DIR]
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


def run_one(dirname, server_pid, workload, config, args, pfs):
    agent = None
    agent_out = tempfile.mkdtemp(prefix="innoprof-bench-")
    if config == "pfs":
        pfs.enable()
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
            agent.wait(timeout=120)
        if config == "pfs":
            pfs.restore()
        shutil.rmtree(agent_out, ignore_errors=True)
    txns, tps, p95 = parse_sysbench(bench.stdout)
    return {
        "config": config, "workload": workload, "tps": tps, "p95_ms": p95, "transactions": txns,
        "server_cpu_us_per_txn": server_cpu * 1e6 / max(txns, 1),
        "agent_cpu_pct_of_core": agent_cpu * 100 / wall, "agent_peak_rss_mb": agent_rss,
    }


def summarise(runs, configs, workloads):
    rows = []
    for w in workloads:
        base = [r for r in runs if r["workload"] == w and r["config"] == "none"]
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        for c in configs:
            rs = [r for r in runs if r["workload"] == w and r["config"] == c]
            if not rs:
                continue
            row = {"workload": w, "config": c, "reps": len(rs)}
            for k in ("tps", "p95_ms", "server_cpu_us_per_txn", "agent_cpu_pct_of_core", "agent_peak_rss_mb"):
                row[k] = med(rs, k)
            if base:
                for k in ("tps", "p95_ms", "server_cpu_us_per_txn"):
                    row[k + "_ratio"] = row[k] / med(base, k)
            rows.append(row)
    return rows


def markdown(rows, meta):
    out = [f"server {meta['server']}, {meta['threads']} threads, {meta['seconds']} s per run, "
           f"{meta['reps']} interleaved repetitions, medians; ratios against `none`", "",
           "| workload | config | tps | tps ratio | p95 ms | p95 ratio | server CPU µs/txn | CPU/txn ratio | agent CPU % of a core | agent RSS MB |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['workload']} | {r['config']} | {r['tps']:.0f} | {r.get('tps_ratio', 1):.3f} | "
                   f"{r['p95_ms']:.2f} | {r.get('p95_ms_ratio', 1):.3f} | {r['server_cpu_us_per_txn']:.0f} | "
                   f"{r.get('server_cpu_us_per_txn_ratio', 1):.3f} | {r['agent_cpu_pct_of_core']:.2f} | "
                   f"{r['agent_peak_rss_mb']:.0f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="mysql-5.6.24")
    ap.add_argument("--workloads", default="oltp_read_only,oltp_read_write")
    ap.add_argument("--configs", default="none,default,all,cpu99,pfs")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    configs = args.configs.split(",")
    workloads = args.workloads.split(",")

    subprocess.run(["cargo", "build", "--release", "-q", "-p", "innoprof-cli"], cwd=ROOT, check=True)
    dirname = tempfile.mkdtemp(prefix="innoprof-bench-srv-")
    server_pid = int(subprocess.run([SERVERS, "start", args.server, dirname], check=True,
                                    capture_output=True, text=True).stdout.strip())
    runs = []
    try:
        pfs = PerfSchema(dirname)
        if "pfs" in configs and not pfs.available:
            print(f"bench: performance_schema is OFF on {args.server}; skipping the pfs configuration",
                  file=sys.stderr)
            configs.remove("pfs")
        for w in workloads:
            subprocess.run([SYSBENCH, dirname, "prepare", w], check=True, capture_output=True)
            # Warm the buffer pool once so the first configuration is not penalised.
            subprocess.run([SYSBENCH, dirname, "run", w, "--time=5"], check=True, capture_output=True)
            for rep in range(args.reps):
                order = configs if rep % 2 == 0 else list(reversed(configs))
                for c in order:
                    r = run_one(dirname, server_pid, w, c, args, pfs)
                    r["rep"] = rep
                    runs.append(r)
                    print(f"bench: {w} rep {rep} {c}: {r['tps']:.0f} tps, p95 {r['p95_ms']:.2f} ms, "
                          f"{r['server_cpu_us_per_txn']:.0f} µs CPU/txn", file=sys.stderr)
            subprocess.run([SYSBENCH, dirname, "cleanup", w], check=True, capture_output=True)
    finally:
        subprocess.run([SERVERS, "stop", dirname], capture_output=True)
        shutil.rmtree(dirname, ignore_errors=True)

    meta = {"server": args.server, "threads": args.threads, "seconds": args.seconds, "reps": args.reps}
    rows = summarise(runs, configs, workloads)
    os.makedirs(args.out, exist_ok=True)
    table = markdown(rows, meta)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "summary": rows, "runs": runs}, f, indent=2)
    print(table)


if __name__ == "__main__":
    main()

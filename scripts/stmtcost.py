#!/usr/bin/env python3
"""What tying hits to statements costs the server, side by side.

On ONE running server under a fixed-rate sysbench load, records alternate
between the default recording and the same with `--no-statements`, in
pairs (order random per pair). Per recording, from summary.json: the BPF
programs' run time (the kernel's own run-time statistics,
overhead.bpf_pct_of_core) and the probe hits, so the cost per hit and per
second of the statement reads is the difference within each pair.

  scripts/stmtcost.py --server mariadb-10.2.11 --pairs 5 --rate 300

Prints, per configuration, the median BPF ns per hit and % of a core with
a 95 % bootstrap interval, and the median pair difference.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = os.path.join(ROOT, "scripts", "servers.sh")
SYSBENCH = os.path.join(ROOT, "scripts", "sysbench.sh")


def bootstrap(values, n=2000):
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"),) * 2
    meds = sorted(statistics.median(random.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


def record(innoprof, pid, seconds, extra, out):
    subprocess.run([innoprof, "record", "-p", str(pid), "-d", f"{seconds}s", "--no-cpu",
                    "--no-server-state", "-o", out] + extra,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = json.load(open(os.path.join(out, "summary.json")))
    hits = sum(p.get("calls", 0) for p in s["probes"])
    bpf = s["overhead"]["bpf_pct_of_core"]
    dur = s["duration_s"]
    # % of a core = bpf ns per second / 1e7.
    ns_per_hit = bpf * 1e7 * dur / max(hits, 1)
    who = s.get("who") or {}
    return {"bpf_pct": bpf, "ns_per_hit": ns_per_hit, "hits_per_s": hits / dur,
            "attributed": who.get("attributed", False)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="mariadb-10.2.11")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rate", type=int, default=300)
    ap.add_argument("--innoprof", default=os.path.join(ROOT, "target", "release", "innoprof"))
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build --release first")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "innoprof-cli"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="innoprof-stmtcost-")
    pid = int(subprocess.check_output([SERVERS, "start", args.server, work], text=True).strip())
    load = None
    try:
        subprocess.run([SYSBENCH, work, "prepare"], check=True, stdout=subprocess.DEVNULL)
        load = subprocess.Popen([SYSBENCH, work, "run", "--time=100000", "--threads=2",
                                 f"--rate={args.rate}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        configs = {"statements": [], "no-statements": ["--no-statements"]}
        res = {k: [] for k in configs}
        for i in range(args.pairs):
            order = list(configs)
            random.shuffle(order)
            for name in order:
                r = record(args.innoprof, pid, args.seconds, configs[name],
                           os.path.join(work, f"rec-{i}-{name}"))
                res[name].append(r)
                print(f"pair {i + 1} {name:14} {r['ns_per_hit']:7.0f} ns/hit  "
                      f"{r['bpf_pct']:.3f} % of a core  {r['hits_per_s']:8.0f} hits/s  "
                      f"statements: {r['attributed']}", flush=True)
        print()
        for name in configs:
            for key, unit in (("ns_per_hit", "ns per hit"), ("bpf_pct", "% of a core")):
                v = [r[key] for r in res[name]]
                lo, hi = bootstrap(v)
                print(f"{name:14} {unit:12} median {statistics.median(v):8.3f} [{lo:.3f}, {hi:.3f}]")
        for key, unit in (("ns_per_hit", "ns per hit"), ("bpf_pct", "% of a core")):
            d = [a[key] - b[key] for a, b in zip(res["statements"], res["no-statements"])]
            lo, hi = bootstrap(d)
            print(f"statements add {unit:12} median {statistics.median(d):8.3f} [{lo:.3f}, {hi:.3f}] (pairs)")
    finally:
        if load:
            load.terminate()
            load.wait()
        subprocess.run([SERVERS, "stop", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

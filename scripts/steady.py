#!/usr/bin/env python3
"""Steady state of `innoprof serve` left running (issue 16, item 6): one
server under sysbench (the load started before serve, as on a production
host), restarted every --restart-every seconds, watched by `innoprof serve`
and scraped by a real Prometheus every --scrape seconds,
for --minutes.

Measured from outside innoprof:
- innoprof's RSS (/proc/PID/status VmRSS) every scrape interval: the value
  at the first scrape, the maximum after it, growth after the first scrape
  in % (target: <= 5 %), the maximum (target: <= 64 MiB); and the same
  growth from the first scrape once serve is warm (its first findings
  window done, 10 s after it came up): a first scrape before that
  measures the start-up (up to ~0.7 MiB, by when it lands), not the
  steady state. Both verdicts are printed;
- innoprof's CPU (utime+stime of /proc/PID/stat) from the first scrape to
  the end, as % of one core (target: <= 1 %);
- from Prometheus' own TSDB (query_range at the scrape step): every scrape
  of the run answered (`up == 1`), and the longest gap between samples of
  `innoprof_probe_calls_total{probe="sql.commit"}` against the longest
  restart of the server (target: no gap longer than a restart);
  `resets()` of that counter over the run (target: 0: it carries on
  across restarts); `innoprof_target_restarts_total` at the end
  (= the restarts made).

Prints one JSON object (also written to --out/steady.json) with every
number and a verdict per target; exits 0 whatever the verdicts (it is a
measurement), 1 if the run itself failed.

Usage: scripts/steady.py [--server mariadb-10.2.11] [--minutes 15] [--restart-every 180]
                         [--scrape 5] [--threads 2] [--innoprof PATH] [--out steady-out]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402 - the server and sysbench helpers

FINDINGS_WINDOW_S = 10  # serve's default --findings-window

ROOT = bench.ROOT
SERVERS = bench.SERVERS
SYSBENCH = bench.SYSBENCH
SERIES = 'innoprof_probe_calls_total{probe="sql.commit"}'


def log(msg):
    print(f"steady: {msg}", file=sys.stderr, flush=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def prom_query(port, path, **params):
    body = json.loads(get(f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"))
    if body.get("status") != "success":
        raise RuntimeError(f"prometheus: {body}")
    return body["data"]["result"]


def wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def start_server(server, dirname):
    out = subprocess.run([SERVERS, "start", server, dirname], check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="mariadb-10.2.11")
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--restart-every", type=float, default=180, help="seconds between restarts")
    ap.add_argument("--scrape", type=float, default=5, help="Prometheus scrape interval, seconds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workload", default="oltp_read_write")
    ap.add_argument("--innoprof", default=os.path.join(ROOT, "target", "release", "innoprof"))
    ap.add_argument("--out", default="steady-out")
    args = ap.parse_args()
    if args.minutes <= 0 or args.restart_every <= 0 or args.scrape <= 0:
        ap.error("--minutes, --restart-every and --scrape must be > 0")
    if not os.access(args.innoprof, os.X_OK):
        ap.error(f"{args.innoprof} is not an executable (cargo build --release -p innoprof-cli)")
    if shutil.which("prometheus") is None:
        ap.error("prometheus is not installed (scripts/setup.sh)")
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    dirname = tempfile.mkdtemp(prefix="innoprof-steady-srv-")
    work = tempfile.mkdtemp(prefix="innoprof-steady-")
    procs = []
    try:
        server_pid = start_server(args.server, dirname)
        subprocess.run([SYSBENCH, dirname, "prepare", args.workload], check=True, capture_output=True)
        # The load runs before serve starts, as on a production host: the
        # first scrape then sees serve with the load's call sites, latches
        # and findings already in it, and growth after it is serve's own.
        # This first run is ended at the first restart.
        first_load = subprocess.Popen([SYSBENCH, dirname, "run", args.workload, f"--threads={args.threads}",
                                       f"--time={int(args.restart_every) + 300}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(first_load)
        port, prom_port = free_port(), free_port()
        serve_err = open(os.path.join(work, "serve.stderr"), "w")
        serve = subprocess.Popen([args.innoprof, "serve", "--pid", str(server_pid), "--listen",
                                  f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=serve_err)
        procs.append(serve)
        wait_until("serve", lambda: "innoprof_target_up" in get(f"http://127.0.0.1:{port}/metrics"), 60)
        serve_up = time.time()
        every = f"{int(args.scrape * 1000)}ms"  # Prometheus durations are whole units
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: {every}\n  evaluation_interval: {every}\n"
                    f"scrape_configs:\n  - job_name: innoprof\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n")
        prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prom.log"), "w"))
        procs.append(prom)
        wait_until("the first scrape", lambda: prom_query(prom_port, "/api/v1/query", query="up")[0]["value"][1]
                   == "1", 60)
        t_start = time.time()
        cpu_start = bench.cpu_seconds(serve.pid)
        rss_first = rss_bytes(serve.pid)
        rss_max = rss_first
        rss_series = [(0.0, rss_first)]  # (seconds since the first scrape, bytes)
        log(f"serve pid {serve.pid}, first scrape done; RSS {rss_first / 2**20:.1f} MiB; "
            f"running {args.minutes} min, a restart every {args.restart_every:.0f} s")
        end = t_start + args.minutes * 60
        restarts = []  # seconds each server restart took (stop to up)
        while time.time() < end:
            phase = min(args.restart_every, end - time.time())
            if first_load is not None:
                sb, first_load = first_load, None
            else:
                sb = subprocess.Popen([SYSBENCH, dirname, "run", args.workload, f"--threads={args.threads}",
                                       f"--time={max(1, int(phase))}"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
                procs.append(sb)
            phase_end = time.time() + phase
            while time.time() < phase_end:
                rss = rss_bytes(serve.pid)
                rss_max = max(rss_max, rss)
                rss_series.append((time.time() - t_start, rss))
                time.sleep(min(args.scrape, max(0.0, phase_end - time.time())))
            if sb.poll() is None and time.time() >= phase_end:
                sb.terminate()  # the first load, started before serve
            sb.wait(timeout=60)
            if time.time() >= end - 1:
                break
            t0 = time.time()
            subprocess.run([SERVERS, "stop", dirname], check=True, capture_output=True)
            server_pid = start_server(args.server, dirname)
            restarts.append(time.time() - t0)
            log(f"restart {len(restarts)}: {restarts[-1]:.1f} s; new pid {server_pid}")
        t_end = time.time()
        cpu = bench.cpu_seconds(serve.pid) - cpu_start
        rss_max = max(rss_max, rss_bytes(serve.pid))
        # Warm: serve has run each of its periodic duties once (the first
        # findings window, FINDINGS_WINDOW_S after it came up, with its
        # SQL snapshots): the first scrape can fall before it, and then
        # measures the start-up, not the steady state.
        warm_from = serve_up + FINDINGS_WINDOW_S + args.scrape - t_start
        warm = [(t, r) for t, r in rss_series if t >= warm_from]
        rss_warm = warm[0][1] if warm else rss_first
        rss_max_warm = max((r for _, r in warm), default=rss_warm)
        # Let Prometheus take the last scrape of the run.
        time.sleep(args.scrape + 1)
        step = every
        ups = prom_query(prom_port, "/api/v1/query_range", query='up{job="innoprof"}', start=t_start,
                         end=t_end, step=step)
        up_values = [float(v) for _, v in ups[0]["values"]] if ups else []
        # The raw samples Prometheus stored (not a step-aligned evaluation).
        window = f"{int(t_end - t_start) + 1}s"
        raw = prom_query(prom_port, "/api/v1/query", query=f"{SERIES}[{window}]", time=t_end)
        stamps = [float(t) for t, _ in raw[0]["values"]] if raw else []
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        resets = prom_query(prom_port, "/api/v1/query", query=f"resets({SERIES}[{window}])", time=t_end)
        restarts_seen = prom_query(prom_port, "/api/v1/query", query="innoprof_target_restarts_total",
                                   time=t_end)
        longest_restart = max(restarts, default=0.0)
        longest_gap = max(gaps, default=None)
        result = {
            "server": args.server,
            "minutes": (t_end - t_start) / 60,
            "scrape_s": args.scrape,
            "restarts": len(restarts),
            "restart_s": restarts,
            "rss_first_mib": rss_first / 2**20,
            "rss_max_mib": rss_max / 2**20,
            "rss_growth_pct": (rss_max - rss_first) / rss_first * 100,
            "rss_warm_s": warm[0][0] if warm else 0.0,
            "rss_warm_mib": rss_warm / 2**20,
            "rss_growth_after_warm_pct": (rss_max_warm - rss_warm) / rss_warm * 100,
            # Each sample, to tell a step per restart from steady growth.
            "rss_series_mib": [(round(t, 1), round(b / 2**20, 2)) for t, b in rss_series],
            "cpu_s": cpu,
            "cpu_pct_of_core": cpu / (t_end - t_start) * 100,
            "scrapes": len(up_values),
            "scrapes_failed": sum(1 for v in up_values if v != 1.0),
            "samples": len(stamps),
            "longest_gap_s": longest_gap,
            "longest_restart_s": longest_restart,
            "counter_resets": float(resets[0]["value"][1]) if resets else None,
            "restarts_exported": float(restarts_seen[0]["value"][1]) if restarts_seen else None,
        }
        result["verdicts"] = {
            "rss_flat_5pct": result["rss_growth_pct"] <= 5,
            "rss_flat_5pct_after_warm": result["rss_growth_after_warm_pct"] <= 5,
            "rss_le_64mib": result["rss_max_mib"] <= 64,
            "cpu_le_1pct": result["cpu_pct_of_core"] <= 1,
            "every_scrape_answered": result["scrapes_failed"] == 0 and result["scrapes"] > 0,
            # A gap is one scrape interval; a scrape missed while the
            # server restarted would make it longer by up to the restart.
            "no_gap_beyond_a_restart": longest_gap is not None
            and longest_gap <= 1.5 * args.scrape + longest_restart,
            "no_counter_reset": result["counter_resets"] == 0,
            "restarts_counted": result["restarts_exported"] == len(restarts),
        }
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
        result["serve_exit"] = serve.returncode
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "steady.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result, indent=1))
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        subprocess.run([SERVERS, "stop", dirname], capture_output=True)
        shutil.rmtree(dirname, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        log(f"failed: {e}")
        sys.exit(1)

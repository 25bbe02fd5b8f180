#!/usr/bin/env python3
"""How long `innoprof top` takes to its first frame with named CPU stacks,
cold (a host's first run: nothing kept by an earlier run) and warm.

    firstframe.py --pid PID [--runs 3] [--innoprof target/debug/innoprof]

Each run is `innoprof top --pid PID --iterations 1` with stdout a pipe
(plain text: the first frame is printed whole once its stacks are named).
Cold runs get fresh, empty kept and per-boot directories each
(INNOPROF_CACHE_DIR, INNOPROF_RUN_DIR: what a new machine has in
/var/cache/innoprof and /run/innoprof, without touching the real ones);
warm runs share one pair, filled by a first run that is not counted.
Before each cold run the server binary's pages are dropped from the page
cache (posix_fadvise DONTNEED: its DWARF, which the server never maps, is
read from disk again, as after a boot; the pages the server maps stay).
Prints per run and as median/min/max: seconds from start to the
"attached" line, and from start to the first frame. Takes the e2e tests'
kernel lock, so concurrent tests never see its probes. Needs root and a
server under load (scripts/servers.sh, scripts/sysbench.sh).
"""

import argparse
import fcntl
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(innoprof, pid, env):
    start = time.monotonic()
    proc = subprocess.Popen(
        [innoprof, "top", "--pid", str(pid), "--iterations", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    attached = frame = None
    err = b""
    out = b""
    streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    while streams:
        ready, _, _ = select.select(list(streams), [], [], 300)
        if not ready:
            proc.kill()
            sys.exit(f"no output for 300 s: {err.decode()}")
        for fd in ready:
            chunk = os.read(fd, 65536)
            now = time.monotonic() - start
            if not chunk:
                del streams[fd]
            elif streams[fd] == "out":
                out += chunk
                if frame is None:
                    frame = now
            else:
                err += chunk
                if attached is None and b"innoprof: attached" in err:
                    attached = now
    code = proc.wait()
    if code != 0 or b"on-CPU:" not in out:
        sys.exit(f"innoprof exited {code}:\n{err.decode()}\n{out.decode()}")
    return attached, frame, err.decode()


def drop_from_page_cache(pid):
    fd = os.open(f"/proc/{pid}/exe", os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fresh_dirs(parent):
    run = tempfile.mkdtemp(prefix="run-", dir=parent)
    kept = tempfile.mkdtemp(prefix="kept-", dir=parent)
    return {"INNOPROF_RUN_DIR": run, "INNOPROF_CACHE_DIR": kept}


def summary(name, values):
    return (
        f"{name}: median {statistics.median(values):.1f} s, "
        f"min {min(values):.1f} s, max {max(values):.1f} s"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--innoprof", default="target/debug/innoprof")
    args = ap.parse_args()
    lock = open(os.path.join(tempfile.gettempdir(), "innoprof-kernel-tests.lock"), "a")
    parent = tempfile.mkdtemp(prefix="innoprof-firstframe-")
    os.chmod(parent, 0o700)
    results = {"cold": [], "warm": []}
    warm_env = dict(os.environ, **fresh_dirs(parent))
    for mode in ["cold", "warm"]:
        if mode == "warm":
            fcntl.flock(lock, fcntl.LOCK_EX)
            one_run(args.innoprof, args.pid, warm_env)  # fills the pair
            fcntl.flock(lock, fcntl.LOCK_UN)
        for i in range(args.runs):
            env = warm_env if mode == "warm" else dict(os.environ, **fresh_dirs(parent))
            if mode == "cold":
                drop_from_page_cache(args.pid)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                attached, frame, err = one_run(args.innoprof, args.pid, env)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
            said = "first run" in err
            print(
                f"{mode} {i + 1}: attached at {attached:.1f} s, first frame at {frame:.1f} s"
                f"{' (said: first run on this host)' if said else ''}",
                flush=True,
            )
            results[mode].append((attached, frame))
    for mode, runs in results.items():
        print(summary(f"{mode} attached", [a for a, _ in runs]))
        print(summary(f"{mode} first frame", [f for _, f in runs]))
    subprocess.run(["rm", "-rf", parent], check=False)


if __name__ == "__main__":
    main()

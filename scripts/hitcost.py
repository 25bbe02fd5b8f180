#!/usr/bin/env python3
"""Per-hit cost of a timed probe: innoprof against bpftrace, side by side in one run.

Builds a tiny C program (gcc, frame pointers on, no CET) whose thread sits
--depth frames deep (a hit in mysqld walks 30-60 frames for its stack) and
calls `hitcost_target` — a function entered by `push %rbp`, which the kernel
emulates — in a loop, printing every ~0.2 s how much of its own thread's CPU
time (CLOCK_THREAD_CPUTIME_ID: user + kernel, so the uprobe trap and the BPF
programs are in it) each call took. While it runs, phases are switched on a
schedule, B T B T … with the treatments of each round in random order:

  baseline            nothing attached
  bpftrace            uprobe + uretprobe on hitcost_target, a log2 histogram of
                      the latency (@ = hist(nsecs - @start[tid]))
  innoprof-nostacks   innoprof record --force --probe hitcost_target --no-cpu
                      --max-overhead off --no-stacks
  innoprof            the same with stacks, as shipped (a stack at most once
                      per ms per CPU, the hits between carried by the next)
  innoprof-everystack the same with every hit's stack (--stack-interval 0):
                      what a stack walk costs on top of a hit

Per phase: the median CPU ns per call over its reports, after skipping
--settle seconds after the switch. Per-hit cost = a treatment phase's ns/call
minus the mean of its two neighbouring baselines. Reported per configuration:
the median with a 95 % percentile bootstrap interval, and the ratio
innoprof ÷ bpftrace per round (the same round's phases), median and interval
(target of issue 12 item 3: <= 1.1). `innoprof calibrate` (innoprof's own
measurement of a hit) is printed beside it.

Usage: scripts/hitcost.py [--rounds 20] [--phase 3] [--settle 1] [--depth 40]
                          [--configs bpftrace,innoprof-nostacks,innoprof,innoprof-everystack]
                          [--seed N] [--out hitcost-out] [--innoprof PATH]
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ready_fd import ReadyPipe  # noqa: E402 - innoprof's --ready-fd handshake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Entered by `push %rbp`, which the kernel emulates, as it does the
   prologues of most InnoDB functions; written in assembly so that no
   compiler setting can drop or inline the frame. */
unsigned long hitcost_target(unsigned long x);
__asm__(".text\n.globl hitcost_target\n.type hitcost_target, @function\nhitcost_target:\n"
        "  push %rbp\n  mov %rsp, %rbp\n  lea 1(%rdi), %rax\n  imul $0x5bd1e995, %rax, %rax\n"
        "  pop %rbp\n  ret\n.size hitcost_target, .-hitcost_target\n");

static double ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) void hitcost_loop(void) {
  printf("ready\n");
  fflush(stdout);
  unsigned long x = 1;
  for (;;) {
    double c0 = ns(CLOCK_THREAD_CPUTIME_ID), w0 = ns(CLOCK_MONOTONIC), w1;
    long calls = 0;
    do {
      for (int i = 0; i < 1000; i++) x = hitcost_target(x + i);
      calls += 1000;
      w1 = ns(CLOCK_MONOTONIC);
    } while (w1 - w0 < 2e8);
    double c1 = ns(CLOCK_THREAD_CPUTIME_ID);
    printf("%ld %.1f %.1f %.9f\n", calls, c1 - c0, w1 - w0, w1 / 1e9);
    fflush(stdout);
  }
}

/* Not a tail call (the barrier after it), so every level is a real frame. */
__attribute__((noinline)) void hitcost_deep(int d) {
  if (d > 0) hitcost_deep(d - 1); else hitcost_loop();
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  hitcost_deep(argc > 1 ? atoi(argv[1]) : 0);
  return 0;
}
"""

BPFTRACE = """uprobe:{bin}:hitcost_target {{ @start[tid] = nsecs; }}
uretprobe:{bin}:hitcost_target /@start[tid]/ {{ @ = hist(nsecs - @start[tid]); delete(@start[tid]); }}
BEGIN {{ printf("hitcost-ready\\n"); }}
"""


def log(msg):
    print(f"hitcost: {msg}", file=sys.stderr, flush=True)


class Loop:
    """The calling loop; its reports (time, ns/call CPU, ns/call wall)."""

    def __init__(self, binary, depth):
        self.proc = subprocess.Popen([binary, str(depth)], stdout=subprocess.PIPE, text=True, bufsize=1)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the calling loop did not start")
        self.reports = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            calls, cpu, wall, end = line.split()
            # (start, end) on CLOCK_MONOTONIC, Python's time.monotonic().
            end = float(end)
            with self.cond:
                self.reports.append((end - float(wall) / 1e9, end, float(cpu) / int(calls),
                                     float(wall) / int(calls)))
                self.cond.notify_all()

    def collect(self, settle, seconds, at_least=3):
        """Reports that start `settle` s from now or later and end within
        `seconds` s after that (longer if fewer than `at_least` fit: a
        starved loop reports late)."""
        t0 = time.monotonic() + settle
        t1 = t0 + seconds
        with self.cond:
            while True:
                inside = [r for r in self.reports if r[0] >= t0]
                if inside and inside[-1][1] >= t1 and len(inside) >= at_least:
                    break
                if self.proc.poll() is not None:
                    raise RuntimeError("the calling loop exited")
                self.cond.wait(1.0)
        end = max(t1, inside[at_least - 1][1])
        rs = [r for r in inside if r[1] <= end]
        return {"reports": len(rs), "cpu_ns_per_call": statistics.median(r[2] for r in rs),
                "wall_ns_per_call": statistics.median(r[3] for r in rs)}

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Tool:
    """innoprof, ready once its `--ready-fd` line comes, or (bpftrace) once `ready_text`
    is in its stdout."""

    def __init__(self, argv, workdir, name, ready_text=None):
        self.out = os.path.join(workdir, name + ".out")
        self.err = os.path.join(workdir, name + ".err")
        t = time.monotonic()
        files = {"stdout": open(self.out, "w"), "stderr": open(self.err, "w")}
        pipe = None if ready_text else ReadyPipe()
        self.proc = pipe.popen(argv, **files) if pipe else subprocess.Popen(argv, **files)
        try:
            while not self._ready(pipe, ready_text):
                if self.proc.poll() is not None or time.monotonic() - t > 120:
                    self.stop()
                    raise RuntimeError(f"{argv[0]} did not start: {open(self.err).read()[-1000:]}")
                time.sleep(0.02)
        finally:
            if pipe:
                pipe.close()
        self.start_s = time.monotonic() - t

    def _ready(self, pipe, ready_text):
        if pipe is None:
            return ready_text in open(self.out).read()
        try:
            return pipe.poll() is not None
        except EOFError:
            return False  # it gave up before attaching: its exit says so

    def stop(self):
        t = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.monotonic() - t


def bootstrap_median(xs, rng, n=10000):
    if not xs:
        return None, None, None
    med = statistics.median(xs)
    if len(xs) < 2:
        return med, None, None
    boots = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return med, boots[int(0.025 * n)], boots[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="phases per configuration (default 20)")
    ap.add_argument("--phase", type=float, default=3, help="measured seconds per phase (default 3)")
    ap.add_argument("--settle", type=float, default=1, help="seconds skipped after each switch (default 1)")
    ap.add_argument("--depth", type=int, default=40, help="frames below the probed call (default 40)")
    ap.add_argument("--configs", default="bpftrace,innoprof-nostacks,innoprof,innoprof-everystack")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--innoprof", default=os.path.join(ROOT, "target", "release", "innoprof"))
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build --release first")
    ap.add_argument("--out", default="hitcost-out")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    configs = args.configs.split(",")
    for c in configs:
        if c not in ("bpftrace", "innoprof-nostacks", "innoprof", "innoprof-everystack"):
            ap.error(f"unknown configuration '{c}' "
                     "(expected bpftrace, innoprof-nostacks, innoprof, innoprof-everystack)")
    if "bpftrace" in configs and shutil.which("bpftrace") is None:
        ap.error("bpftrace is not installed; drop it from --configs or apt-get install bpftrace")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    log(f"seed {seed}")
    rng = random.Random(seed)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "innoprof-cli"], cwd=ROOT, check=True)

    work = tempfile.mkdtemp(prefix="innoprof-hitcost-")
    binary = os.path.join(work, "hitcost")
    src = binary + ".c"
    with open(src, "w") as f:
        f.write(PROGRAM)
    subprocess.run(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                    "-fcf-protection=none", "-o", binary, src],
                   check=True)
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True).stdout
    first = dis.split("<hitcost_target>:\n", 1)[1].splitlines()[0].split(":", 1)[1].strip()
    log(f"hitcost_target starts with `{first}`")
    bt = os.path.join(work, "hit.bt")
    with open(bt, "w") as f:
        f.write(BPFTRACE.format(bin=binary))
    calibrate = json.loads(subprocess.run([args.innoprof, "calibrate", "--json"], check=True,
                                          capture_output=True, text=True).stdout)
    calibrate_nostacks = json.loads(subprocess.run([args.innoprof, "calibrate", "--json", "--no-stacks"],
                                                   check=True, capture_output=True, text=True).stdout)

    loop = Loop(binary, args.depth)
    tool = None
    phases = []
    t_start = time.time()
    try:
        phases.append(dict(loop.collect(args.settle, args.phase), config="baseline", round=None))
        n = 0
        for rnd in range(args.rounds):
            order = list(configs)
            rng.shuffle(order)
            for c in order:
                n += 1
                if c == "bpftrace":
                    tool = Tool(["bpftrace", "-p", str(loop.proc.pid), bt], work, f"bt{n}", ready_text="hitcost-ready")
                else:
                    rec = os.path.join(work, f"rec{n}")
                    tool = Tool([args.innoprof, "record", "--pid", str(loop.proc.pid), "--force",
                                 "--probe", "hitcost_target", "--no-cpu", "--max-overhead", "off",
                                 "--duration", "24h", "--out", rec]
                                + (["--no-stacks"] if c == "innoprof-nostacks" else [])
                                + (["--stack-interval", "0"] if c == "innoprof-everystack" else []),
                                work, f"innoprof{n}")
                m = loop.collect(args.settle, args.phase)
                m["start_s"] = tool.start_s
                m["stop_s"] = tool.stop()
                out_path, tool = tool.out, None
                if c != "bpftrace":
                    with open(os.path.join(rec, "summary.json")) as f:
                        s = json.load(f)
                    m["calls_seen"] = sum(p.get("calls", 0) for p in s.get("probes", []))
                    m["innoprof_overhead"] = s.get("overhead")
                    shutil.rmtree(rec, ignore_errors=True)
                else:
                    m["bpftrace_hist_lines"] = sum(1 for l in open(out_path) if l.startswith("["))
                phases.append(dict(m, config=c, round=rnd))
                phases.append(dict(loop.collect(args.settle, args.phase), config="baseline", round=None))
                b0, t, b1 = phases[-3], phases[-2], phases[-1]
                t["hit_ns"] = t["cpu_ns_per_call"] - (b0["cpu_ns_per_call"] + b1["cpu_ns_per_call"]) / 2
                t["hit_wall_ns"] = t["wall_ns_per_call"] - (b0["wall_ns_per_call"] + b1["wall_ns_per_call"]) / 2
                log(f"round {rnd + 1}/{args.rounds} {c}: {t['hit_ns']:.0f} ns per hit "
                    f"({t['cpu_ns_per_call']:.0f} ns/call; baselines {b0['cpu_ns_per_call']:.1f}, "
                    f"{b1['cpu_ns_per_call']:.1f})")
    finally:
        if tool is not None:
            tool.stop()
        loop.stop()
        shutil.rmtree(work, ignore_errors=True)

    brng = random.Random(seed)
    rows = []
    treat = [p for p in phases if p["config"] != "baseline"]
    for c in configs:
        ps = [p for p in treat if p["config"] == c]
        med, lo, hi = bootstrap_median([p["hit_ns"] for p in ps], brng)
        wmed, wlo, whi = bootstrap_median([p["hit_wall_ns"] for p in ps], brng)
        rows.append({"config": c, "phases": len(ps), "hit_ns": med, "hit_ns_lo": lo, "hit_ns_hi": hi,
                     "hit_wall_ns": wmed, "hit_wall_ns_lo": wlo, "hit_wall_ns_hi": whi,
                     "start_s": statistics.median(p["start_s"] for p in ps),
                     "stop_s": statistics.median(p["stop_s"] for p in ps)})
    ratios = {}
    if "bpftrace" in configs:
        for c in configs:
            if c == "bpftrace":
                continue
            per_round = []
            for rnd in range(args.rounds):
                a = [p["hit_ns"] for p in treat if p["config"] == c and p["round"] == rnd]
                b = [p["hit_ns"] for p in treat if p["config"] == "bpftrace" and p["round"] == rnd]
                if a and b and b[0] > 0:
                    per_round.append(a[0] / b[0])
            ratios[c] = dict(zip(("median", "lo", "hi"), bootstrap_median(per_round, brng)), rounds=len(per_round))

    meta = {"rounds": args.rounds, "phase_s": args.phase, "settle_s": args.settle, "depth": args.depth,
            "seed": seed, "entry_instruction": first, "wall_s": time.time() - t_start,
            "innoprof_calibrate": calibrate, "innoprof_calibrate_no_stacks": calibrate_nostacks}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hitcost.json"), "w") as f:
        json.dump({"meta": meta, "summary": rows, "ratio_to_bpftrace": ratios, "phases": phases}, f, indent=1)

    f = lambda v: "-" if v is None else f"{v:.0f}"
    print(f"per-hit cost of a timed probe on a push-prologue function ({first}), {args.depth} frames deep; "
          f"{args.rounds} rounds, {args.phase:g} s phases after a {args.settle:g} s skip; thread CPU ns per call "
          f"minus the mean of the neighbouring unprobed phases; medians with 95 % bootstrap intervals")
    cells = [["config", "phases", "ns per hit, CPU [95% CI]", "ns per hit, wall [95% CI]",
              "ratio to bpftrace [95% CI]", "start s", "stop s"]]
    for r in rows:
        rat = ratios.get(r["config"])
        rs = "-" if not rat or rat["median"] is None else (
            f"{rat['median']:.2f} [{'-' if rat['lo'] is None else format(rat['lo'], '.2f')}, "
            f"{'-' if rat['hi'] is None else format(rat['hi'], '.2f')}]")
        cells.append([r["config"], str(r["phases"]), f"{f(r['hit_ns'])} [{f(r['hit_ns_lo'])}, {f(r['hit_ns_hi'])}]",
                      f"{f(r['hit_wall_ns'])} [{f(r['hit_wall_ns_lo'])}, {f(r['hit_wall_ns_hi'])}]", rs,
                      f"{r['start_s']:.2f}", f"{r['stop_s']:.2f}"])
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    print(f"innoprof calibrate (its own measurement, timed push entry): {calibrate.get('latency_emulated_ns', float('nan')):.0f} ns "
          f"with stacks, {calibrate_nostacks.get('latency_emulated_ns', float('nan')):.0f} ns without")
    log(f"{time.time() - t_start:.0f} s; wrote {args.out}/hitcost.json")


if __name__ == "__main__":
    main()

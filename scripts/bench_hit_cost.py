#!/usr/bin/env python3
"""What one probe hit costs, two innoprof builds side by side.

Runs `innoprof calibrate --json` of each binary in turn, interleaved
(A, B, A, B, ...), N times each, and prints the medians of each figure
with their range and the ratio B/A. Calibration times uprobe hits on
innoprof's own functions in a loop (kernel-measured BPF run time, and the
hit's wall time from user space), so it prices what a change to the BPF
programs adds per hit, independently of any server's load.

    scripts/bench_hit_cost.py OLD_INNOPROF NEW_INNOPROF [N]
"""
import json
import statistics
import subprocess
import sys

FIGURES = [
    ("latency_emulated_ns", "timed hit (push entry)"),
    ("count_emulated_ns", "count-only hit"),
    ("bpf_latency_ns", "BPF run time, timed pair"),
    ("bpf_count_ns", "BPF run time, count"),
]


def calibrate(binary):
    out = subprocess.run([binary, "calibrate", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    runs = {a: [], b: []}
    for _ in range(n):
        for binary in (a, b):
            runs[binary].append(calibrate(binary))
    print(f"{n} interleaved calibrations each; median [min, max]")
    for key, what in FIGURES:
        va = [r[key] for r in runs[a]]
        vb = [r[key] for r in runs[b]]
        ma, mb = statistics.median(va), statistics.median(vb)
        print(f"{what:28} A {ma:8.1f} ns [{min(va):.0f}, {max(va):.0f}]"
              f"   B {mb:8.1f} ns [{min(vb):.0f}, {max(vb):.0f}]"
              f"   B-A {mb - ma:+7.1f} ns   B/A {mb / ma:.3f}")


if __name__ == "__main__":
    main()

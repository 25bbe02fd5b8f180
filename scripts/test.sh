#!/usr/bin/env bash
# Sets up this machine and runs every test: unit tests, the C++ fixture
# tests, and the end-to-end tests against real MySQL 5.6.24 and MariaDB
# 10.2.11 (plus resolver checks on MySQL 8.0.15 and MariaDB 11.4.5) under
# sysbench. Needs root (BPF, uprobes).
set -euo pipefail
cd "$(dirname "$0")/.."
# A test run builds once: incremental state (~2 GB in target/) buys nothing.
export CARGO_INCREMENTAL=0
# A full disk fails in a second here, not an hour in: mysqld waits for space
# (InnoDB retries a failed write) and the tests behind it wait with it. From
# a clean clone a run writes ~3.5 GB to target/ (the release tarball's build
# included) and some hundreds of MB to $TMPDIR (datadirs, debug-file copies).
need_mb=${INNOPROF_TEST_DISK_MB:-4096}
for dir in . "${TMPDIR:-/tmp}"; do
    free_mb=$(df -Pm "$dir" | awk 'NR == 2 { print $4 }')
    if [ "$free_mb" -lt "$need_mb" ]; then
        echo "test.sh: $free_mb MB free on $(df -P "$dir" | awk 'NR == 2 { print $6 }') ($dir); the tests need about $need_mb MB (INNOPROF_TEST_DISK_MB)" >&2
        exit 1
    fi
done
scripts/setup.sh --tests
for server in mysql-5.6.24 mariadb-10.2.11 mysql-8.0.15 mariadb-11.4.5 debian-mariadb; do
    scripts/servers.sh fetch "$server" >/dev/null
done
cargo build --workspace --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: one failing test binary must not hide the others.
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || status=$?
# Attach and detach timed against their promise (a benchmark, not a timed
# test: medians of interleaved reps; issue 65, they grew 40-400x unseen).
scripts/bench_attach.py 2>&1 | tee -a "$log" || status=$?
# One closing line over all test binaries.
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"

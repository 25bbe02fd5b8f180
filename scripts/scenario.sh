#!/usr/bin/env bash
# The seed incidents (S1-S6, docs/SCENARIOS.md) as runnable demos:
#
#   scripts/scenario.sh s1|s2|s3|s5|s6 [SERVER] [OUT]
#   (S4, the overhead comparison, is scripts/bench.py)
#
# s1/s6  hot row + long REPEATABLE READ snapshot (seed 003): undo version
#        builds per updated row, their stacks, `innoprof diff`, and the
#        oprofile-style CPU table before/after
# s2     INSERTs into tables without a primary key (seed 000): row-id
#        allocations vs rows inserted, dict_sys mutex waits
# s3     mutex waits over time (seed 000): a 1 s time series while sysbench
#        goes from 2 to 16 threads (MariaDB 10.2.11 only)
# s5     redo log fsync latency apart from data-file fsyncs (seed 004): the
#        redo log on a RAM-backed disk, then throttled to 100 writes/s
#
# SERVER: mariadb-10.2.11 (default), mysql-5.6.24; s1/s6 also
# mariadb-11.4.5, mysql-8.0.15. Each demo is the end-to-end test of the
# same name (tests/e2e/scenarios.rs), so what it shows is what CI checks:
# it starts the server, drives the load, records, and prints what a DBA
# would read. The recordings stay in OUT (default ./innoprof-scenarios):
# summary.txt/json, folded stacks, flame graphs, diff.txt. INNOPROF_LONG=1
# runs each load phase three times longer. Needs root (BPF, loop devices).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 s1|s2|s3|s5|s6 [SERVER] [OUT]" >&2; exit 2; }
[ $# -ge 1 ] || usage
scenario=$1 server=${2:-mariadb-10.2.11} out=${3:-innoprof-scenarios}
if [ "$scenario" = s3 ]; then
    [ "$server" = mariadb-10.2.11 ] || { echo "$0: s3 runs on mariadb-10.2.11" >&2; exit 2; }
    scripts/setup.sh --tests
    scripts/servers.sh fetch "$server" >/dev/null
    exec cargo test -q -p innoprof-e2e --test timeseries -- \
        --exact s3_mutex_waits_follow_load_change --nocapture
fi
case "$scenario" in
    s1|s6) test=s1_s6_many_row_versions ;;
    s2) test=s2_tables_without_primary_key ;;
    s5) test=s5_redo_log_latency ;;
    *) usage ;;
esac
case "$server" in
    mariadb-10.2.11|mysql-5.6.24) ;;
    mariadb-11.4.5|mysql-8.0.15)
        [ "$test" = s1_s6_many_row_versions ] || {
            echo "$0: $scenario runs on mariadb-10.2.11 or mysql-5.6.24" >&2; exit 2; } ;;
    *) echo "$0: unknown server '$server' (see scripts/servers.sh list)" >&2; exit 2 ;;
esac

scripts/setup.sh --tests
scripts/servers.sh fetch "$server" >/dev/null
mkdir -p "$out"
out=$(cd "$out" && pwd)
name="${test}_${server//[.-]/_}"
# Only this test's lines, not cargo's or the servers' progress.
INNOPROF_SCENARIO_OUT="$out" cargo test -q -p innoprof-e2e --test scenarios -- \
    --exact "$name" --nocapture 2>&1 \
    | grep -vE '^(servers\.sh|sysbench\.sh|running [0-9]|test result|test .* running for)|^\.*$'
echo "scenario: recordings in $out/${test%%_*}-$server/" >&2

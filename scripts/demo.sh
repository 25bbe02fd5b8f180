#!/usr/bin/env bash
# The main job on a built-in default: start the bundled MariaDB 10.2.11,
# drive a sysbench oltp_read_write load, record it with innoprof for 20 s,
# print the summary and leave the bundle in ./innoprof-demo (or $1) and
# ./innoprof-demo.tar.gz; the last line names report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-innoprof-demo}
scripts/setup.sh
cargo build --release -q -p innoprof-cli

dir=$(mktemp -d /tmp/innoprof-demo.XXXXXX)
trap 'scripts/servers.sh stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
pid=$(scripts/servers.sh start mariadb-10.2.11 "$dir")
echo "demo: MariaDB 10.2.11 running as pid $pid; preparing sysbench tables" >&2
scripts/sysbench.sh "$dir" prepare >/dev/null
scripts/sysbench.sh "$dir" run --threads=4 --time=30 >"$dir/sysbench.txt" 2>&1 &
sleep 3
target/release/innoprof record --pid "$pid" --duration 20s --out "$out"
wait
echo "demo: sysbench: $(grep -E 'transactions:' "$dir/sysbench.txt" | xargs)" >&2
echo "demo: bundle in $out/ and $out.tar.gz (summary.txt, summary.json, metadata.json, histograms, *.folded, oncpu.svg, cpu.pb.gz, waits.pb.gz)" >&2
echo "demo: open the report: $(realpath "$out")/report.html" >&2

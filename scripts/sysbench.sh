#!/usr/bin/env bash
# Run Debian's sysbench against a server started with scripts/servers.sh.
#
#   sysbench.sh DIR prepare|run|cleanup [TEST] [sysbench args...]
#
# TEST defaults to oltp_read_write; it may also be the path of a Lua script.
# Defaults (each overridable by passing the same option): for the built-in
# tests --tables=2 --table-size=10000 and, for `run`, --threads=2 --time=10.
# Connection options always point at DIR: --mysql-socket=DIR/mysql.sock
# --mysql-user=root --mysql-db=sbtest.
set -euo pipefail

PROG="$(basename "$0")"
die() { echo "$PROG: error: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: $PROG DIR prepare|run|cleanup [TEST] [sysbench args...]"
dir=$1; cmd=$2; shift 2
case "$cmd" in
    prepare|run|cleanup|prewarm) ;;
    *) die "unknown sysbench command '$cmd' (expected prepare, run or cleanup)" ;;
esac
[ -d "$dir" ] || die "no such directory: $dir"
dir=$(cd "$dir" && pwd)
[ -S "$dir/mysql.sock" ] || die "no server socket at $dir/mysql.sock (start it with scripts/servers.sh start NAME $dir)"
command -v sysbench >/dev/null 2>&1 || die "sysbench not found; apt-get install sysbench"

test=oltp_read_write
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then test=$1; shift; fi

# Add a default option unless the caller passed it already.
opts=()
has_opt() { local a; for a in "${user_args[@]}"; do case "$a" in "--$1="*|"--$1") return 0 ;; esac; done; return 1; }
default() { has_opt "$1" || opts+=("--$1=$2"); }
user_args=("$@")

# The built-in oltp_* tests take table options; a script of our own (a
# path, e.g. tests/fixture/insert_rows.lua) declares only what it uses.
case "$test" in
    */*|*.lua) ;;
    *) default tables 2
       default table-size 10000 ;;
esac
if [ "$cmd" = run ]; then
    default threads 2
    default time 10
fi

exec sysbench "$test" --db-driver=mysql \
    --mysql-socket="$dir/mysql.sock" --mysql-user=root --mysql-password= --mysql-db=sbtest \
    "${opts[@]}" "${user_args[@]}" "$cmd"

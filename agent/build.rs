//! Builds the C BPF programs in `../bpf` with clang into OUT_DIR.
//! `vmlinux.h` is generated from the build host's kernel BTF with bpftool.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let bpf_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bpf");
    println!("cargo:rerun-if-changed={}", bpf_dir.display());

    let vmlinux = out.join("vmlinux.h");
    if !vmlinux.exists() {
        let dump = Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "c",
            ])
            .output()
            .unwrap_or_else(|e| panic!("running bpftool (apt-get install bpftool): {e}"));
        assert!(
            dump.status.success(),
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&dump.stderr)
        );
        std::fs::write(&vmlinux, dump.stdout).unwrap();
    }

    for entry in std::fs::read_dir(&bpf_dir).unwrap() {
        let src = entry.unwrap().path();
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".bpf.c") else {
            continue;
        };
        let obj = out.join(format!("{stem}.bpf.o"));
        let status = Command::new(env::var("CLANG").unwrap_or_else(|_| "clang".into()))
            .args([
                "-O2",
                "-mcpu=v3",
                "-g",
                "-target",
                "bpf",
                "-D__TARGET_ARCH_x86",
                "-Wall",
                "-Werror",
            ])
            .arg("-I")
            .arg(&out)
            .arg("-I")
            .arg(&bpf_dir)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("running clang (apt-get install clang libbpf-dev): {e}"));
        assert!(status.success(), "clang failed on {}", src.display());
    }
}

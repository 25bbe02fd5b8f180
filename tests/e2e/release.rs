//! The release artifact (scripts/release.sh) works where there is no
//! source tree and no Rust: extracted under a temp directory, its binary
//! resolves the catalog in a real server binary (catalog and BPF objects
//! are inside it), and its man pages, completions and systemd unit are
//! usable as shipped.

use std::path::Path;
use std::process::Command;

use innoprof_e2e::*;

fn ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_release_tarball_runs_outside_the_source_tree() {
    let tarball = ok(&mut Command::new(repo_root().join("scripts/release.sh")));
    let tarball = Path::new(tarball.trim());
    let name = tarball
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_end_matches(".tar.gz")
        .to_string();
    assert!(
        name.starts_with("innoprof-") && name.ends_with("-x86_64-linux-gnu"),
        "{name}"
    );

    // Somewhere with no Cargo.toml above it, no repository, no target/.
    let host = tempfile::Builder::new()
        .prefix("innoprof-host-")
        .tempdir_in("/tmp")
        .unwrap();
    ok(Command::new("tar")
        .arg("-C")
        .arg(host.path())
        .arg("-xzf")
        .arg(tarball));
    let root = host.path().join(&name);
    let bin = root.join("bin/innoprof");
    let clean = |cmd: &mut Command| {
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir(host.path());
    };

    let mut version = Command::new(&bin);
    version.arg("--version");
    clean(&mut version);
    let version = ok(&mut version);
    assert!(
        version.contains("(commit ") && !version.contains("unknown"),
        "{version}"
    );

    // Stripped: no .symtab, no DWARF, and much smaller than the 60 MB
    // release build with its debug info.
    let sections = ok(Command::new("readelf").arg("-S").arg(&bin));
    assert!(!sections.contains(".symtab") && !sections.contains(".debug_info"));
    let size = std::fs::metadata(&bin).unwrap().len();
    assert!(size < 30 << 20, "{size} bytes");
    let glibc = std::fs::read_to_string(root.join("GLIBC.txt")).unwrap();
    assert!(glibc.contains("needs GLIBC 2."), "{glibc}");

    // Shipped without .symtab, innoprof still finds its own calibration
    // functions (exported in .dynsym) and loads its embedded BPF objects
    // through the statically linked libbpf/libelf.
    let needs = ok(Command::new("ldd").arg(&bin));
    assert!(
        !needs.contains("libelf") && !needs.contains("libz"),
        "{needs}"
    );
    let mut calibrate = Command::new(&bin);
    calibrate.args(["calibrate", "--json"]);
    clean(&mut calibrate);
    let cost: serde_json::Value = serde_json::from_str(&ok(&mut calibrate)).unwrap();
    assert!(
        cost["latency_emulated_ns"].as_f64().unwrap() > 0.0,
        "{cost}"
    );

    // The embedded catalog and resolver, on a real server binary.
    let fetched =
        ok(Command::new(repo_root().join("scripts/servers.sh")).args(["fetch", "mariadb-10.2.11"]));
    let mut probes = Command::new(&bin);
    probes.args(["probes", "--json", "--binary", fetched.trim()]);
    clean(&mut probes);
    let inspection: serde_json::Value = serde_json::from_str(&ok(&mut probes)).unwrap();
    assert_eq!(inspection["catalog"], "probes/mariadb-10.2.toml");
    let resolved: Vec<&str> = inspection["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["resolution"]["symbols"].as_array().unwrap().is_empty())
        .map(|p| p["spec"]["name"].as_str().unwrap())
        .collect();
    for want in [
        "innodb.redo.write_up_to",
        "innodb.undo.prev_version",
        "innodb.mutex.enter",
    ] {
        assert!(
            resolved.contains(&want),
            "{want} not resolved: {resolved:?}"
        );
    }

    // Man pages render; completions parse in their shells.
    let man1 = root.join("share/man/man1");
    for page in ["innoprof.1", "innoprof-record.1", "innoprof-serve.1"] {
        assert!(man1.join(page).is_file(), "{page}");
    }
    let completions = root.join("share/completions");
    for (shell, file) in [
        ("bash", "innoprof.bash"),
        ("zsh", "_innoprof"),
        ("fish", "innoprof.fish"),
    ] {
        ok(Command::new(shell).arg("-n").arg(completions.join(file)));
    }

    // The unit as systemd reads it, with ExecStart pointing at the
    // extracted binary and its man page found through MANPATH.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/innoprof.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/innoprof serve"));
    let units = host.path().join("units");
    std::fs::create_dir(&units).unwrap();
    let here = unit.replace("/usr/local/bin/innoprof", bin.to_str().unwrap());
    std::fs::write(units.join("innoprof.service"), here).unwrap();
    let mut verify = Command::new("systemd-analyze");
    verify
        .args(["verify", "--man=yes"])
        .arg(units.join("innoprof.service"))
        .env("MANPATH", root.join("share/man"));
    let o = verify.output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    assert!(root
        .join("share/innoprof/dashboards/innoprof.json")
        .is_file());
    assert!(root.join("README.md").is_file());
}

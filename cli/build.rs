//! Stamps `innoprof --version` with the git commit and the build date, so a
//! binary copied to a database host says which source it came from.
//! Without git (a source tarball) the commit is "unknown"; a reproducible
//! build sets SOURCE_DATE_EPOCH and gets that date instead of today's.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm):
/// no date crate for one line of output.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (y, m, d) = civil(epoch.div_euclid(86_400));
    println!("cargo:rustc-env=INNOPROF_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=INNOPROF_BUILD_DATE={y:04}-{m:02}-{d:02}");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // `innoprof calibrate` probes innoprof's own calibration functions by
    // name: in .dynsym they survive `strip` (the shipped binary has no
    // .symtab).
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=innoprof_calib_*");
    // A new commit re-stamps the binary: HEAD moves, or the branch it names does.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}

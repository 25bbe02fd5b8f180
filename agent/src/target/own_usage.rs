//! innoprof's own CPU time and peak memory: what the agent costs, for the
//! summary's overhead and `INNOPROF_DEBUG_PHASES`.

use std::time::Duration;

/// `INNOPROF_DEBUG_PHASES=1`: innoprof's own CPU (user + system) and peak
/// RSS so far, on stderr, at each phase of a recording: where its cost
/// goes (issue 12's agent footprint), without a profiler.
pub fn debug_phase(name: &str) {
    if std::env::var_os("INNOPROF_DEBUG_PHASES").is_some() {
        eprintln!(
            "innoprof: {name}: CPU {:.3} s, peak RSS {} MiB",
            own_cpu_time().as_secs_f64(),
            own_max_rss_kb() / 1024
        );
    }
}

/// CPU time (user + system) innoprof itself has used so far, its finished
/// children included: the hit-cost calibration runs in a child innoprof
/// ([`crate::cost::calibrate::Calibrator::Child`]) and is innoprof's cost all
/// the same.
pub(crate) fn own_cpu_time() -> Duration {
    let used = |who: libc::c_int| {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct it is given.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Duration::ZERO;
        }
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    used(libc::RUSAGE_SELF) + used(libc::RUSAGE_CHILDREN)
}

/// innoprof's peak resident set, in KiB.
pub(crate) fn own_max_rss_kb() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_maxrss as u64
}

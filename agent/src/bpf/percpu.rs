//! Per-CPU maps' shape: how many values a per-CPU lookup returns.

/// The number of possible CPUs, read once (libbpf parses a sysfs file
/// each time it is asked; the governor asks twenty times a second).
pub fn possible_cpus() -> Result<usize, libbpf_rs::Error> {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if let Some(&n) = CPUS.get() {
        return Ok(n);
    }
    let n = libbpf_rs::num_possible_cpus()?;
    Ok(*CPUS.get_or_init(|| n))
}

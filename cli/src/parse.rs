//! Value parsers for command-line options: typed, bounded, never panicking.

use std::time::Duration;

/// Longest recording accepted; longer is surely a typo (`30d` for `30s`).
const MAX_RECORDING: Duration = Duration::from_secs(30 * 24 * 3600);

/// Shortest recording accepted: below it, attaching and detaching take
/// longer than the window watched, and per-second figures (calls/s,
/// innoprof's own CPU %) divide by almost nothing (`1ns` printed 60912 %).
const MIN_RECORDING: Duration = Duration::from_millis(100);

/// `--duration`: bare seconds as bcc tools take them (`30`, `0.5`) or
/// humantime syntax (`500ms`, `30s`, `2m`, `1h 30m`), at least 100 ms and
/// at most 30 days.
pub fn recording_duration(text: &str) -> Result<Duration, String> {
    let d = match bare_seconds(text) {
        Some(d) => d,
        None => humantime::parse_duration(text)
            .map_err(|e| format!("{e} (expected e.g. 30, 500ms, 30s, 2m)"))?,
    };
    if d.is_zero() {
        return Err("must be more than zero (e.g. 30s)".into());
    }
    if d < MIN_RECORDING {
        return Err(format!(
            "{} is too short: record for 100ms or more (e.g. 30s)",
            humantime::format_duration(d)
        ));
    }
    if d > MAX_RECORDING {
        return Err(format!(
            "{} is longer than the 30 days allowed",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// `30` or `2.5`: seconds. Anything else (units, signs, exponents) is
/// left to humantime; a number too large for a Duration is refused there.
fn bare_seconds(text: &str) -> Option<Duration> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let secs: f64 = t.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_usual_durations_and_refuses_the_rest() {
        assert_eq!(recording_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(recording_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(recording_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(recording_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert!(recording_duration("0")
            .unwrap_err()
            .contains("more than zero"));
        assert!(recording_duration("0.05")
            .unwrap_err()
            .contains("100ms or more"));
        assert!(recording_duration("1.2.3").is_err());
        assert!(recording_duration("9999999999999")
            .unwrap_err()
            .contains("30 days"));
        assert!(recording_duration("0s")
            .unwrap_err()
            .contains("more than zero"));
        assert!(recording_duration("31days")
            .unwrap_err()
            .contains("30 days"));
        assert!(recording_duration("soon")
            .unwrap_err()
            .contains("expected e.g."));
        assert!(recording_duration("1ns")
            .unwrap_err()
            .contains("100ms or more"));
        assert!(recording_duration("99ms").is_err());
        assert!(recording_duration("99999999999999999999999y").is_err());
        assert!(recording_duration("").is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Arbitrary text: a bounded duration or an error, never a panic.
        #[test]
        fn never_panics_and_stays_in_bounds(text in "\\PC{0,40}") {
            if let Ok(d) = recording_duration(&text) {
                proptest::prop_assert!(d >= MIN_RECORDING && d <= MAX_RECORDING);
            }
        }

        /// Number-and-unit shaped text, including huge numbers.
        #[test]
        fn never_panics_on_numbers_with_units(
            n in proptest::num::u64::ANY,
            unit in "(ns|us|ms|s|m|h|d|w|M|y|)",
        ) {
            let _ = recording_duration(&format!("{n}{unit}"));
        }
    }
}

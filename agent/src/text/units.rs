//! Human units for tables.

pub fn ns(ns: u64) -> String {
    let v = ns as f64;
    if v >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} us", v / 1e3)
    } else {
        format!("{ns} ns")
    }
}

pub fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1}k", n / 1e3)
    } else if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn units() {
        assert_eq!(super::ns(999), "999 ns");
        assert_eq!(super::ns(1_500), "1.50 us");
        assert_eq!(super::ns(2_500_000_000), "2.50 s");
        assert_eq!(super::count(12.0), "12");
        assert_eq!(super::count(45_300.0), "45.3k");
        assert_eq!(super::count(2.5), "2.5");
    }
}

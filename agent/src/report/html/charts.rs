//! Inline SVG charts drawn in Rust (no script, no library in the page):
//! a latency histogram per probe and line charts over time. Every text
//! goes through maud, so names from the binary are escaped.

use maud::{html, Markup};

use super::timeseries::Line;
use crate::bpf::histogram::{Bucket, Log2Histogram};
use crate::text::units;

/// Colours of successive lines (Tableau 10).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
pub const BAR_COLOUR: &str = "#4e79a7";

/// Bars per log2 bucket from the lowest to the highest non-empty one
/// (empty buckets between them drawn empty), counts on a linear axis.
pub fn histogram(buckets: &[Bucket]) -> Markup {
    let (w, h, left, bottom, top) = (440.0, 190.0, 46.0, 34.0, 10.0);
    // A bucket's slot as the BPF side numbers them; none for a bucket no
    // recording writes (summary.json is a bundle's say): an upper bound
    // that is not a power of two from 2 ns to the last slot's.
    let slot = |b: &Bucket| {
        let s = (b.high_ns >= 2 && b.high_ns.is_power_of_two())
            .then(|| b.high_ns.trailing_zeros() as usize - 1)?;
        (s < crate::bpf::abi::HIST_SLOTS).then_some(s)
    };
    let slots: Vec<(usize, u64)> = buckets
        .iter()
        .filter_map(|b| Some((slot(b)?, b.count)))
        .collect();
    let (Some(lo), Some(hi)) = (
        slots.iter().map(|s| s.0).min(),
        slots.iter().map(|s| s.0).max(),
    ) else {
        return html! { p.empty { "no calls" } };
    };
    let counts: Vec<(usize, u64)> = (lo..=hi)
        .map(|s| {
            let c = slots
                .iter()
                .filter(|x| x.0 == s)
                .fold(0u64, |n, x| n.saturating_add(x.1));
            (s, c)
        })
        .collect();
    let max = counts.iter().map(|c| c.1).max().unwrap_or(1).max(1) as f64;
    let plot_w = w - left - 8.0;
    let plot_h = h - bottom - top;
    let bar_w = plot_w / counts.len() as f64;
    let label_every = counts.len().div_ceil(6);
    html! {
        svg.chart.histogram width=(w) height=(h) viewBox={"0 0 " (w) " " (h)} role="img" {
            line x1=(left) y1=(top + plot_h) x2=(w - 8.0) y2=(top + plot_h) stroke="#999" {}
            text x=(left - 4.0) y=(top + 8.0) text-anchor="end" { (max as u64) }
            text x=(left - 4.0) y=(top + plot_h) text-anchor="end" { "0" }
            @for (i, (s, c)) in counts.iter().enumerate() {
                @let bh = *c as f64 / max * plot_h;
                @let x = left + i as f64 * bar_w;
                @let (low, high) = Log2Histogram::bounds(*s);
                rect x=(x + 1.0) y=(top + plot_h - bh) width=((bar_w - 2.0).max(1.0)) height=(bh) fill=(BAR_COLOUR) {
                    title { (c) " calls in [" (units::ns(low)) ", " (units::ns(high)) ")" }
                }
                @if i % label_every == 0 {
                    text x=(x + bar_w / 2.0) y=(top + plot_h + 14.0) text-anchor="middle" { (compact_ns(low)) }
                }
            }
            text x=(left + plot_w / 2.0) y=(h - 4.0) text-anchor="middle" class="axis" { "wait (log2 buckets, lower bound)" }
        }
    }
}

/// Lines over time: x in seconds since the start, y formatted by `fmt`.
pub fn lines(lines: &[Line], y_title: &str, fmt: fn(f64) -> String) -> Markup {
    let (w, h, left, right, top, bottom) = (1000.0, 280.0, 80.0, 230.0, 12.0, 34.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let x_max = xs.fold(0.0f64, f64::max).max(1e-9);
    // A NaN y is an interval nothing watched: a gap in its line.
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let px = |x: f64| left + x / x_max * plot_w;
    let py = |y: f64| top + plot_h - y / y_max * plot_h;
    html! {
        svg.chart.timeseries width=(w) height=(h) viewBox={"0 0 " (w) " " (h)} role="img" {
            line x1=(left) y1=(top + plot_h) x2=(left + plot_w) y2=(top + plot_h) stroke="#999" {}
            line x1=(left) y1=(top) x2=(left) y2=(top + plot_h) stroke="#999" {}
            text x=(left - 4.0) y=(top + 8.0) text-anchor="end" { (fmt(y_max)) }
            text x=(left - 4.0) y=(top + plot_h) text-anchor="end" { "0" }
            text x=(left) y=(top + plot_h + 14.0) text-anchor="middle" { "0 s" }
            text x=(left + plot_w) y=(top + plot_h + 14.0) text-anchor="middle" { (format!("{x_max:.0} s")) }
            text x=(left + plot_w / 2.0) y=(h - 4.0) text-anchor="middle" class="axis" { (y_title) ", by end of interval" }
            @for (i, l) in lines.iter().enumerate() {
                @let colour = PALETTE[i % PALETTE.len()];
                @for run in l.points.split(|p| !p.1.is_finite()).filter(|r| !r.is_empty()) {
                    @let pts: Vec<String> = run.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
                    polyline points=(pts.join(" ")) fill="none" stroke=(colour) stroke-width="2" {
                        title { (l.name) }
                    }
                }
                @for &(x, y) in l.points.iter().filter(|p| p.1.is_finite()) {
                    circle cx=(format!("{:.1}", px(x))) cy=(format!("{:.1}", py(y))) r="2.5" fill=(colour) {
                        title { (l.name) " at " (format!("{x:.1}")) " s: " (fmt(y)) }
                    }
                }
                rect x=(left + plot_w + 12.0) y=(top + 4.0 + 16.0 * i as f64) width="10" height="10" fill=(colour) {}
                text x=(left + plot_w + 26.0) y=(top + 13.0 + 16.0 * i as f64) { (legend_name(&l.name)) }
            }
        }
    }
}

/// Axis labels: `524 us`, `2.1 ms`, `16 ns` (two or three digits).
fn compact_ns(ns: u64) -> String {
    let (v, unit) = match ns {
        0..1_000 => (ns as f64, "ns"),
        1_000..1_000_000 => (ns as f64 / 1e3, "us"),
        1_000_000..1_000_000_000 => (ns as f64 / 1e6, "ms"),
        _ => (ns as f64 / 1e9, "s"),
    };
    if v < 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

/// Legends have ~200 px: long names keep their end (the distinctive part).
fn legend_name(name: &str) -> String {
    let n = name.chars().count();
    if n > 32 {
        format!("…{}", name.chars().skip(n - 31).collect::<String>())
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_fills_gaps_and_escapes_nothing_unsafe() {
        let b = |low_ns, high_ns, count| Bucket {
            low_ns,
            high_ns,
            count,
        };
        let svg = histogram(&[b(1024, 2048, 5), b(8192, 16384, 1)]).into_string();
        assert_eq!(svg.matches("<rect").count(), 4, "slots 10..=13: {svg}");
        assert!(svg.contains("5 calls in [1.02 us, 2.05 us)"));
        assert_eq!(compact_ns(524_288), "524 us");
        assert_eq!(compact_ns(2_097_152), "2.1 ms");
        assert_eq!(compact_ns(16), "16 ns");
    }

    #[test]
    fn line_names_are_escaped() {
        let l = Line {
            name: "PolicyMutex<T>::enter".into(),
            points: vec![(1.0, 5.0), (2.0, 7.0)],
        };
        let svg = lines(&[l], "wait", |v| format!("{v}")).into_string();
        assert!(svg.contains("PolicyMutex&lt;T&gt;::enter") && !svg.contains("<T>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    /// An interval nothing watched (NaN) breaks the line: two runs, no
    /// point drawn at 0 and no NaN in the page.
    #[test]
    fn an_unwatched_interval_is_a_gap_not_a_zero() {
        let l = Line {
            name: "innodb.undo.prev_version".into(),
            points: vec![(1.0, 5.0), (2.0, f64::NAN), (3.0, 7.0), (4.0, 6.0)],
        };
        let svg = lines(&[l], "calls per second watched", |v| format!("{v}")).into_string();
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
        assert!(!svg.contains("NaN"), "{svg}");
    }
}

//! Flame-graph SVGs from folded stacks, drawn by inferno (the Rust port of
//! flamegraph.pl). Deterministic: colours come from a hash of the frame
//! name, never from a random generator, so the same profile gives the same
//! bytes. The perl palette colours `_[k]` frames (kernel) orange, C++
//! (`::`) yellow and C red.

use inferno::flamegraph::{self, color::MultiPalette, Options, Palette};

#[derive(Debug, thiserror::Error)]
#[error("drawing flame graph `{title}`")]
pub struct FlameGraphError {
    title: String,
    source: std::io::Error,
}

/// A flame graph of `folded` (`root;…;leaf count` lines, or the
/// three-column differential form `stack before after`). `None` when there
/// is nothing to draw.
pub fn render(
    folded: &str,
    title: &str,
    count_name: &str,
) -> Result<Option<Vec<u8>>, FlameGraphError> {
    if folded.lines().all(|l| l.trim().is_empty()) {
        return Ok(None);
    }
    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name.to_string();
    opts.colors = Palette::Multi(MultiPalette::Perl);
    opts.deterministic = true;
    opts.hash = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, folded.lines(), &mut svg).map_err(|source| {
        FlameGraphError {
            title: title.to_string(),
            source,
        }
    })?;
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_svg_with_frames() {
        let folded = "main;work_[k] 3\nmain;PolicyMutex<X>::enter(unsigned long) 5\n";
        let a = render(folded, "on-CPU", "samples").unwrap().unwrap();
        let b = render(folded, "on-CPU", "samples").unwrap().unwrap();
        assert_eq!(a, b);
        let text = String::from_utf8(a).unwrap();
        assert!(text.starts_with("<?xml") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("PolicyMutex&lt;X&gt;::enter"));
        assert!(render("\n", "empty", "samples").unwrap().is_none());
    }

    #[test]
    fn differential_input() {
        let svg = render("main;a 1 5\nmain;b 4 0\n", "diff", "samples")
            .unwrap()
            .unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("main"));
    }
}

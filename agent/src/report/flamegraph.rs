//! Flame-graph SVGs from folded stacks, drawn by inferno (the Rust port of
//! flamegraph.pl). Deterministic: colours come from a hash of the frame
//! name, never from a random generator, so the same profile gives the same
//! bytes. The perl palette colours `_[k]` frames (kernel) orange, C++
//! (`::`) yellow and C red. Boxes are labelled with short names and keep
//! the whole signature on hover (`frame_label`).

use inferno::flamegraph::{self, color::MultiPalette, Options, Palette, TextTruncateDirection};

use super::frame_label;

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
    // A cut label keeps the function's name, not its last parameters.
    opts.text_truncate_direction = TextTruncateDirection::Right;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, folded.lines(), &mut svg).map_err(|source| {
        FlameGraphError {
            title: title.to_string(),
            source,
        }
    })?;
    let text = String::from_utf8(svg).expect("inferno writes UTF-8");
    // inferno's own labels if its script reads titles otherwise than
    // frame_label knows (a test fails on that first).
    let svg = frame_label::shorten_labels(&text).unwrap_or(text);
    Ok(Some(svg.into_bytes()))
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
        assert!(text.contains("PolicyMutex&lt;X&gt;::enter(unsigned long) (5 samples"));
        assert!(text.contains("innoprof_short(find_child(e, \"title\")"));
        assert!(render("\n", "empty", "samples").unwrap().is_none());
    }

    /// The boxes' labels are short, the titles whole, and the script
    /// shortens what it lays out again.
    #[test]
    fn short_labels_whole_titles() {
        let long = "buf_flush_batch(buf_pool_t*, buf_flush_t, unsigned long, unsigned long, flush_counters_t*)";
        let folded = format!("start_thread;{long} 10\nstart_thread;other 1\n");
        let svg = String::from_utf8(render(&folded, "t", "samples").unwrap().unwrap()).unwrap();
        assert!(svg.contains(&format!("<title>{long} (10 samples")), "{svg}");
        assert!(svg.contains(">buf_flush_batch</text>"), "{svg}");
        // No box label (`<text …">`) with the parameters; the title has them.
        assert!(!svg.contains("\">buf_flush_batch(buf"), "{svg}");
        assert_eq!(svg.matches("innoprof_short(find_child").count(), 2);
        assert!(svg.contains("function innoprof_short(name)"));
    }

    #[test]
    fn differential_input() {
        let svg = render("main;a 1 5\nmain;b 4 0\n", "diff", "samples")
            .unwrap()
            .unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("main"));
    }
}

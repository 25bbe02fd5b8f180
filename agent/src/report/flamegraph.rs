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
    let lines: Vec<String> = folded.lines().map(short_frames).collect();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg).map_err(
        |source| FlameGraphError {
            title: title.to_string(),
            source,
        },
    )?;
    Ok(Some(svg))
}

/// A folded line with each frame's parameter list left out, for the
/// picture only (the folded files keep the full names): a frame is a few
/// hundred pixels wide, and a C++ signature cut to fit read
/// `..unsigned int, bool)`. Overloads of one function then share a box.
fn short_frames(line: &str) -> String {
    // The counts are the trailing numbers: one, or two (differential).
    let mut stack = line.trim_end();
    let mut counts = Vec::new();
    for _ in 0..2 {
        match stack.rsplit_once(' ') {
            Some((head, n)) if !head.is_empty() && n.parse::<u64>().is_ok() => {
                counts.push(n);
                stack = head;
            }
            _ => break,
        }
    }
    if counts.is_empty() {
        return line.to_string();
    }
    let mut out = stack
        .split(';')
        .map(short_frame)
        .collect::<Vec<_>>()
        .join(";");
    for n in counts.iter().rev() {
        out.push(' ');
        out.push_str(n);
    }
    out
}

/// `ns::f(unsigned char const*, bool) const [inlined]` -> `ns::f [inlined]`;
/// `X::operator()(int)` -> `X::operator()`; anything else as it is.
fn short_frame(frame: &str) -> String {
    let (body, suffix) = match frame.find(" [") {
        Some(i) => frame.split_at(i),
        None => (frame, ""),
    };
    let body = body.trim_end_matches(" const");
    if !body.ends_with(')') {
        return frame.to_string();
    }
    let mut depth = 0i32;
    for (i, c) in body.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return if i == 0 {
                        frame.to_string()
                    } else {
                        format!("{}{suffix}", &body[..i])
                    };
                }
            }
            _ => {}
        }
    }
    frame.to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn frames_are_drawn_without_their_parameters() {
        assert_eq!(
            short_frames("main;trx_undo_prev_version_build(unsigned char const*, mtr_t*) [inlined];ut_delay(unsigned long) 7"),
            "main;trx_undo_prev_version_build [inlined];ut_delay 7"
        );
        assert_eq!(
            short_frames("a;X::operator()(int) const 3 5"),
            "a;X::operator() 3 5"
        );
        assert_eq!(
            short_frames("a;do_syscall_64_[k] 2"),
            "a;do_syscall_64_[k] 2"
        );
        assert_eq!(short_frames("(lost stack) 4"), "(lost stack) 4");
        let svg = render("main;f(unsigned int, bool) 5\n", "t", "samples")
            .unwrap()
            .unwrap();
        let text = String::from_utf8(svg).unwrap();
        assert!(!text.contains("unsigned int, bool"), "{text}");
    }

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

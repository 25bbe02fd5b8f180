//! Flame-graph SVGs from folded stacks, drawn by inferno (the Rust port of
//! flamegraph.pl). Deterministic: colours come from a hash of the frame
//! name, never from a random generator, so the same profile gives the same
//! bytes. The perl palette colours `_[k]` frames (kernel) orange, C++
//! (`::`) yellow and C red. Boxes are labelled with short names and keep
//! the whole signature on hover (`frame_label`).

use inferno::flamegraph::{self, color::MultiPalette, Options, Palette, TextTruncateDirection};

use super::folded_read::{self, Counts, Delta, Folded, TRUNCATED};
use super::frame_label;

/// Most rectangles a flame graph draws. inferno already leaves out what is
/// narrower than [`flamegraph::defaults::MIN_WIDTH`] % of the whole (at
/// most 10,000 a row); a busy server's 10-minute profile draws a few
/// thousand. Past the cap the narrowest are merged into their callers
/// (drawn as part of the caller's width, as a narrow frame is).
pub const MAX_RECTANGLES: usize = 50_000;
/// Most bytes of a flame graph SVG (a few thousand rectangles are 1-3 MB).
pub const MAX_SVG_BYTES: usize = 32 << 20;
/// Bytes of an SVG besides its rectangles (inferno's script and style, and
/// innoprof's label script): ~25 KB, with room.
const SVG_FIXED_BYTES: usize = 64 << 10;
/// Bytes of a rectangle besides its name, which it holds twice (the
/// title, and the label at most as long): `<g><title>` … `(1,234,567
/// samples, 12.34%; +1.23%)</title><rect x=… y=… width=… height=…
/// fill=… fg:x=… fg:w=…/><text x=… y=…>` … `</text></g>` is ~200.
const RECT_BYTES: usize = 320;
/// Most bytes of folded text handed to inferno (each rectangle's whole
/// stack once at most).
const MAX_INPUT_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
#[error("drawing flame graph `{title}`")]
pub struct FlameGraphError {
    title: String,
    source: std::io::Error,
}

/// A flame graph, and what innoprof's caps cut of it (also the SVG's
/// subtitle), in one line.
#[derive(Debug, Clone)]
pub struct Drawn {
    pub svg: Vec<u8>,
    pub note: Option<String>,
}

/// A flame graph of `folded` (`root;…;leaf count` lines). `None` when there
/// is nothing to draw.
pub fn render(
    folded: &str,
    title: &str,
    count_name: &str,
) -> Result<Option<Drawn>, FlameGraphError> {
    draw(folded_read::parse::<u64>(folded), title, count_name, &[])
}

/// A differential flame graph of `folded` (`stack before after` lines,
/// inferno's difffolded): widths of `after`, red grew, blue shrank.
/// `cut_before`: what the caps cut of its sides as they were read (their
/// stacks come here already cut, so only this says it on the graph).
pub fn render_differential(
    folded: &str,
    title: &str,
    count_name: &str,
    cut_before: &[String],
) -> Result<Option<Drawn>, FlameGraphError> {
    draw(
        folded_read::parse::<Delta>(folded),
        title,
        count_name,
        cut_before,
    )
}

fn draw<C: Counts>(
    folded: Folded<C>,
    title: &str,
    count_name: &str,
    cut_before: &[String],
) -> Result<Option<Drawn>, FlameGraphError> {
    if folded.total().width() == 0 {
        return Ok(None);
    }
    let pruned = prune(&folded);
    let mut cuts: Vec<String> = cut_before.to_vec();
    cuts.extend(folded.cut.describe());
    if pruned.merged > 0 {
        cuts.push(format!(
            "{} frame(s) past {MAX_RECTANGLES} rectangles or {} MiB merged into their callers",
            pruned.merged,
            MAX_SVG_BYTES >> 20
        ));
    }
    let note = (!cuts.is_empty()).then(|| format!("cut to innoprof's caps: {}", cuts.join("; ")));
    let title = crate::text::printable(title).into_owned();
    let mut opts = Options::default();
    opts.title = title.clone();
    opts.subtitle = note.clone();
    opts.count_name = count_name.to_string();
    opts.colors = Palette::Multi(MultiPalette::Perl);
    opts.deterministic = true;
    opts.hash = true;
    // A cut label keeps the function's name, not its last parameters.
    opts.text_truncate_direction = TextTruncateDirection::Right;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, pruned.text.lines(), &mut svg)
        .map_err(|source| FlameGraphError { title, source })?;
    let text = String::from_utf8(svg).expect("inferno writes UTF-8");
    // inferno's own labels if its script reads titles otherwise than
    // frame_label knows (a test fails on that first).
    let svg = frame_label::shorten_labels(&text).unwrap_or(text);
    Ok(Some(Drawn {
        svg: svg.into_bytes(),
        note,
    }))
}

/// A frame of the merged stacks: one rectangle of the graph.
struct Node<C> {
    name: u32,
    /// Index of the caller's node; `NO_PARENT` at the root.
    parent: u32,
    /// Its stacks' counts summed: its width.
    counts: C,
    /// Bytes of its stack as a folded line, names made printable.
    path_bytes: usize,
}

const NO_PARENT: u32 = u32::MAX;

/// The folded lines inferno draws, and how many rectangles the caps merged.
struct Pruned {
    text: String,
    merged: usize,
}

/// The stacks merged into their rectangles (as inferno merges them) and
/// cut to what is drawn, so inferno never holds more than that: frames
/// narrower than inferno's minimum width (which it leaves out) are merged
/// into their caller as soon as they are complete, and of the rest at most
/// [`MAX_RECTANGLES`], widest first, within [`MAX_SVG_BYTES`]. What is
/// merged stays in its caller's width, so every total is kept.
fn prune<C: Counts>(f: &Folded<C>) -> Pruned {
    let total = f.total();
    // inferno's own test: narrower than MIN_WIDTH % of the whole.
    let min_width = total.width() as f64 * flamegraph::defaults::MIN_WIDTH / 100.0;
    let narrow = |c: &C| (c.width() as f64) < min_width;
    let printable_len = |id: u32| crate::text::printable(f.name(id)).len();
    let mut stacks: Vec<(&[u32], C)> = f.stacks().collect();
    // Stacks sharing a prefix are neighbours: each frame is complete when
    // the walk leaves it.
    stacks.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut nodes: Vec<Node<C>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    // Narrow root frames: written as they are (inferno leaves them out
    // and counts them in the whole).
    let mut narrow_roots: Vec<(u32, C)> = Vec::new();
    let mut close = |nodes: &mut Vec<Node<C>>, open: &mut Vec<usize>, depth: usize| {
        while open.len() > depth {
            let n = open.pop().expect("deeper than depth");
            if narrow(&nodes[n].counts) {
                if nodes[n].parent == NO_PARENT {
                    narrow_roots.push((nodes[n].name, nodes[n].counts));
                }
                // Everything after it is its callees, narrower still.
                nodes.truncate(n);
            }
        }
    };
    for (stack, counts) in stacks {
        let common = open
            .iter()
            .zip(stack)
            .take_while(|&(&n, &id)| nodes[n].name == id)
            .count();
        close(&mut nodes, &mut open, common);
        for &id in &stack[common..] {
            let (parent, above) = match open.last() {
                Some(&p) => (p as u32, nodes[p].path_bytes + 1),
                None => (NO_PARENT, 0),
            };
            nodes.push(Node {
                name: id,
                parent,
                counts: C::default(),
                path_bytes: above + printable_len(id),
            });
            open.push(nodes.len() - 1);
        }
        for &n in &open {
            nodes[n].counts.add(counts);
        }
    }
    close(&mut nodes, &mut open, 0);

    // Widest first; a caller before its callees (as wide at most, and
    // made after it), so every prefix of the order is whole stacks.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        nodes[b]
            .counts
            .width()
            .cmp(&nodes[a].counts.width())
            .then(a.cmp(&b))
    });
    let mut kept = vec![false; nodes.len()];
    let (mut svg_bytes, mut input_bytes, mut drawn) = (SVG_FIXED_BYTES, 0, 0);
    for &n in &order {
        let name = crate::text::printable(f.name(nodes[n].name));
        let svg_cost = RECT_BYTES + 2 * xml_escaped_len(&name);
        let input_cost = nodes[n].path_bytes + 48;
        if drawn == MAX_RECTANGLES
            || svg_bytes + svg_cost > MAX_SVG_BYTES
            || input_bytes + input_cost > MAX_INPUT_BYTES
        {
            break;
        }
        kept[n] = true;
        drawn += 1;
        svg_bytes += svg_cost;
        input_bytes += input_cost;
    }
    let merged = nodes.len() - drawn;

    // Each drawn frame's own counts: its width less its drawn callees'.
    let mut own: Vec<C> = nodes.iter().map(|n| n.counts).collect();
    let mut rest = total;
    for node in nodes.iter().zip(&kept).filter(|(_, k)| **k).map(|(n, _)| n) {
        match node.parent {
            NO_PARENT => rest.sub(node.counts),
            p => own[p as usize].sub(node.counts),
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let mut path: Vec<u32> = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        if !kept[n] || own[n] == C::default() {
            continue;
        }
        path.clear();
        let mut at = n as u32;
        while at != NO_PARENT {
            path.push(nodes[at as usize].name);
            at = nodes[at as usize].parent;
        }
        let mut line = String::with_capacity(node.path_bytes + 24);
        for (i, &id) in path.iter().rev().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(&crate::text::printable(f.name(id)));
        }
        line.push(' ');
        own[n].write(&mut line);
        lines.push(line);
    }
    // Narrow roots as they are, while the input has room; the rest, and
    // wide roots past the caps, as one `[truncated]` frame.
    for (id, counts) in narrow_roots {
        let name = crate::text::printable(f.name(id));
        if input_bytes + name.len() + 48 > MAX_INPUT_BYTES {
            continue;
        }
        input_bytes += name.len() + 48;
        rest.sub(counts);
        let mut line = name.into_owned();
        line.push(' ');
        counts.write(&mut line);
        lines.push(line);
    }
    if rest != C::default() {
        let mut line = format!("{TRUNCATED} ");
        rest.write(&mut line);
        lines.push(line);
    }
    lines.sort_unstable();
    let mut text = String::with_capacity(input_bytes);
    for l in lines {
        text.push_str(&l);
        text.push('\n');
    }
    Pruned { text, merged }
}

/// Length of `s` once XML-escaped as inferno writes text (`&quot;` the
/// longest).
fn xml_escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'&' => 5,
            b'<' | b'>' => 4,
            b'"' | b'\'' => 6,
            _ => 1,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(folded: &str) -> (String, Option<String>) {
        let d = render(folded, "t", "samples").unwrap().unwrap();
        (String::from_utf8(d.svg).unwrap(), d.note)
    }

    #[test]
    fn deterministic_svg_with_frames() {
        let folded = "main;work_[k] 3\nmain;PolicyMutex<X>::enter(unsigned long) 5\n";
        let a = render(folded, "on-CPU", "samples").unwrap().unwrap().svg;
        let b = render(folded, "on-CPU", "samples").unwrap().unwrap().svg;
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
        let (svg, note) = svg(&format!("start_thread;{long} 10\nstart_thread;other 1\n"));
        assert!(svg.contains(&format!("<title>{long} (10 samples")), "{svg}");
        assert!(svg.contains(">buf_flush_batch</text>"), "{svg}");
        // No box label (`<text …">`) with the parameters; the title has them.
        assert!(!svg.contains("\">buf_flush_batch(buf"), "{svg}");
        assert_eq!(svg.matches("innoprof_short(find_child").count(), 2);
        assert!(svg.contains("function innoprof_short(name)"));
        assert!(note.is_none() && !svg.contains("id=\"subtitle\""));
    }

    #[test]
    fn differential_input() {
        let d = render_differential("main;a 1 5\nmain;b 4 0\n", "diff", "samples", &[])
            .unwrap()
            .unwrap();
        let svg = String::from_utf8(d.svg).unwrap();
        assert!(svg.contains("main;a") || svg.contains(">a<"), "{svg}");
        assert!(svg.contains("(5 samples, 100.00%"), "{svg}");
    }

    /// Frames narrower than inferno's minimum width are merged into their
    /// caller before inferno sees them: the same rectangles and totals.
    #[test]
    fn narrow_frames_are_merged_as_inferno_leaves_them_out() {
        let mut folded = String::from("main;hot 100000\n");
        for i in 0..500 {
            folded += &format!("main;cold{i};deeper 1\nroot{i} 1\n");
        }
        let (svg, note) = svg(&folded);
        assert!(note.is_none(), "{note:?}");
        assert!(!svg.contains("cold") && !svg.contains("root1"), "narrow");
        // The whole is every sample: main's 100,500 of 101,000.
        assert!(svg.contains("main (100,500 samples, 99.50%)"), "{svg}");
    }

    /// Past the cap, the narrowest rectangles are merged into their
    /// callers: no more rectangles than the cap, the totals whole.
    #[test]
    fn rectangles_are_capped_widest_kept() {
        // 4,000 paths of 20 distinct frames, each 1/4,000 wide: 80,000
        // rectangles wide enough to draw, plus one wide path.
        let mut folded = String::from("main;wide 4000\n");
        for i in 0..4000 {
            let path: Vec<String> = (0..20).map(|d| format!("p{i}_{d}")).collect();
            folded += &format!("main;{} 1\n", path.join(";"));
        }
        let (svg, note) = svg(&folded);
        let rects = svg.matches("<rect").count();
        assert!(rects <= MAX_RECTANGLES + 2, "{rects}");
        assert!(rects > MAX_RECTANGLES / 2, "{rects}");
        let note = note.unwrap();
        assert!(note.contains("merged into their callers"), "{note}");
        assert!(svg.contains("id=\"subtitle\""), "the note is on the graph");
        assert!(svg.contains("main (8,000 samples, 100.00%)"), "totals kept");
        assert!(svg.contains("wide (4,000 samples"), "the widest kept");
        assert!(svg.len() <= MAX_SVG_BYTES);
    }

    /// One stack of 4,000,000 frames (35 MB of text): 1,024 rectangles,
    /// the last `[truncated]`, in well under a second's work.
    #[test]
    fn a_stack_of_millions_of_frames_draws_the_cap() {
        let mut folded = "frame_name;".repeat(4_000_000);
        folded.pop();
        folded.push_str(" 9\n");
        let started = std::time::Instant::now();
        let (svg, note) = svg(&folded);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // The frames, inferno's `all` and its background.
        assert_eq!(
            svg.matches("<rect").count(),
            folded_read::MAX_STACK_FRAMES + 2
        );
        assert!(svg.contains(">[truncated]<") || svg.contains("<title>[truncated] (9 samples"));
        assert!(note.unwrap().contains("deeper than 1024 frames"));
        assert!(svg.len() < 2 << 20, "{}", svg.len());
    }
}

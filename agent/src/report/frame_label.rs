//! Short frame labels in flame graphs, the full name on hover.
//!
//! A C++ frame's name is its whole signature (`buf_flush_batch(buf_pool_t*,
//! buf_flush_t, unsigned long, unsigned long, flush_counters_t*)`): cut to a
//! box it reads as `..unsigned long, flush_counters_t*)`. The box shows the
//! name without its parameter list and template arguments
//! (`buf_flush_batch`, `PolicyMutex::enter`); the `<title>` (hover, search,
//! the details line) keeps the whole signature and the counts.
//!
//! inferno draws a box's label from its title twice: in Rust when it writes
//! the SVG, and in the SVG's script whenever the graph is laid out again
//! (load, resize, zoom). So both are shortened: [`shorten_labels`] rewrites
//! the written labels, and the script gets [`SHORT_JS`], the same rule in
//! JavaScript, wrapped around the two places it reads a title. A test runs
//! the JavaScript under node against [`short`] on the names of real stacks.

/// The label of frame `name`: without its trailing parameter list (and the
/// qualifiers after it), without template arguments; `[inlined]` kept.
/// Operators and names this would empty are left whole.
pub fn short(name: &str) -> String {
    let name = name.trim_end();
    let (body, suffix) = match name.strip_suffix(" [inlined]") {
        Some(b) => (b, " [inlined]"),
        None => (name, ""),
    };
    if body.contains("operator") {
        return name.to_string();
    }
    let mut body = body.trim_end();
    loop {
        let before = body;
        for q in [" const", " volatile", " &&", " &"] {
            body = body.strip_suffix(q).unwrap_or(body).trim_end();
        }
        if body == before {
            break;
        }
    }
    if body.ends_with(')') {
        if let Some(open) = matching_open(body) {
            if open > 0 {
                body = &body[..open];
            }
        }
    }
    let mut out = String::with_capacity(body.len() + suffix.len());
    let mut depth = 0usize;
    for c in body.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.trim();
    if out.is_empty() || depth != 0 {
        return name.to_string();
    }
    format!("{out}{suffix}")
}

/// The byte index of the `(` that the final `)` of `s` closes.
fn matching_open(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// [`short`] in JavaScript, for the SVG's script. The same steps in the
/// same order; `innoprof_frame_label_test` compares the two.
pub const SHORT_JS: &str = r#"
function innoprof_short(name) {
    name = name.replace(/\s+$/, "");
    var body = name, suffix = "";
    if (body.endsWith(" [inlined]")) { body = body.slice(0, -" [inlined]".length); suffix = " [inlined]"; }
    if (body.indexOf("operator") >= 0) return name;
    body = body.replace(/\s+$/, "");
    var quals = [" const", " volatile", " &&", " &"];
    for (;;) {
        var before = body;
        for (var q = 0; q < quals.length; q++) {
            if (body.endsWith(quals[q])) body = body.slice(0, -quals[q].length);
            body = body.replace(/\s+$/, "");
        }
        if (body === before) break;
    }
    if (body.endsWith(")")) {
        var depth = 0;
        for (var i = body.length - 1; i >= 0; i--) {
            var c = body[i];
            if (c === ")") depth++;
            else if (c === "(") { depth--; if (depth === 0) { if (i > 0) body = body.slice(0, i); break; } }
        }
    }
    var out = "", d = 0;
    for (var j = 0; j < body.length; j++) {
        var ch = body[j];
        if (ch === "<") d++;
        else if (ch === ">" && d > 0) d--;
        else if (d === 0) out += ch;
    }
    out = out.trim();
    if (out === "" || d !== 0) return name;
    return out + suffix;
}
"#;

/// What inferno's script reads a label from (the title without its counts),
/// at both of the places it lays out labels.
const TITLE_READ: &str = r#"find_child(e, "title").textContent.replace(/\([^(]*\)$/,"")"#;

/// The SVG with short labels, in its text and in its script. Fails (and
/// the caller keeps inferno's SVG) if the script does not read titles as
/// this inferno version does, so an upgrade that changes it is seen in the
/// tests, not as long labels.
pub fn shorten_labels(svg: &str) -> Option<String> {
    let script = svg.find("<script")?;
    if svg[script..].matches(TITLE_READ).count() != 2 {
        return None;
    }
    let cdata = script + svg[script..].find("<![CDATA[")? + "<![CDATA[".len();
    let mut out = String::with_capacity(svg.len());
    out.push_str(&svg[..cdata]);
    out.push_str(SHORT_JS);
    let wrapped = format!("innoprof_short({TITLE_READ})");
    let head_end = svg[cdata..]
        .find("</script>")
        .map(|i| cdata + i)
        .unwrap_or(svg.len());
    out.push_str(&svg[cdata..head_end].replace(TITLE_READ, &wrapped));
    out.push_str(&written_labels(&svg[head_end..]));
    Some(out)
}

/// Each frame's `<title>NAME (counts)</title>…<text …>LABEL</text>` with
/// LABEL redone from the short name, in the room the long one had: the
/// whole name fitted, or it was cut to `prefix..` (inferno's rule), or
/// nothing fitted.
fn written_labels(frames: &str) -> String {
    let mut out = String::with_capacity(frames.len());
    let mut rest = frames;
    while let Some(t) = rest.find("<title>") {
        let title_start = t + "<title>".len();
        let Some(title_len) = rest[title_start..].find("</title>") else {
            break;
        };
        let title = unescape(&rest[title_start..title_start + title_len]);
        let after_title = title_start + title_len;
        let label = rest[after_title..].find("<text").and_then(|a| {
            let open = after_title + a;
            let content = open + rest[open..].find('>')? + 1;
            let close = content + rest[content..].find("</text>")?;
            // The text must be this frame's: before the next frame starts.
            match rest[after_title..open].contains("<title>") {
                true => None,
                false => Some((content, close)),
            }
        });
        let Some((content, close)) = label else {
            out.push_str(&rest[..after_title]);
            rest = &rest[after_title..];
            continue;
        };
        out.push_str(&rest[..content]);
        let old = unescape(&rest[content..close]);
        out.push_str(&escape(&refit(&old, without_counts(&title))));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// The title without its trailing `(N samples, x%)`, as the script strips it.
fn without_counts(title: &str) -> &str {
    if title.ends_with(')') {
        if let Some(open) = title.rfind('(') {
            return &title[..open];
        }
    }
    title
}

/// The short label in the room `old` (inferno's label of `full`) had.
fn refit(old: &str, full: &str) -> String {
    if old.is_empty() {
        return String::new();
    }
    let short = short(full);
    if !old.ends_with("..") || old == full.trim_end() {
        return short;
    }
    // Cut: inferno kept fitchars - 2 characters and "..".
    let fitchars = old.chars().count();
    if short.chars().count() < fitchars {
        return short;
    }
    let mut cut: String = short.chars().take(fitchars.saturating_sub(2)).collect();
    cut.push_str("..");
    cut
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: &[(&str, &str)] = &[
        ("buf_flush_batch(buf_pool_t*, buf_flush_t, unsigned long, unsigned long, flush_counters_t*)", "buf_flush_batch"),
        ("PolicyMutex<TTASEventMutex<GenericPolicy> >::enter(unsigned int, unsigned int, char const*, unsigned int)", "PolicyMutex::enter"),
        ("buf_do_flush_list_batch [inlined]", "buf_do_flush_list_batch [inlined]"),
        ("fil_io(IORequest const&, bool, page_id_t const&) [inlined]", "fil_io [inlined]"),
        ("THD::is_error() const", "THD::is_error"),
        ("(anonymous namespace)::read_one(int)", "(anonymous namespace)::read_one"),
        ("std::vector<int, std::allocator<int> >::push_back(int&&) &&", "std::vector::push_back"),
        ("operator new(unsigned long)", "operator new(unsigned long)"),
        ("bool std::operator< <char>(std::string const&, std::string const&)", "bool std::operator< <char>(std::string const&, std::string const&)"),
        ("mysqld+0x1234", "mysqld+0x1234"),
        ("[unknown]", "[unknown]"),
        ("__clone3", "__clone3"),
        ("(unbalanced", "(unbalanced"),
        ("f(a))", "f(a))"),
        ("<lambda>", "<lambda>"),
        ("", ""),
    ];

    #[test]
    fn short_names() {
        for (long, want) in NAMES {
            assert_eq!(short(long), *want, "{long}");
        }
    }

    /// The script's rule is the Rust one, on the table above and on every
    /// frame of the demo's kind of stacks, run by node.
    #[test]
    fn innoprof_frame_label_test() {
        let mut names: Vec<String> = NAMES.iter().map(|(n, _)| n.to_string()).collect();
        names.extend(
            [
                "row_search_mvcc(unsigned char*, page_cur_mode_t, row_prebuilt_t*, unsigned long, unsigned long)",
                "ha_innobase::index_read(unsigned char*, unsigned char const*, unsigned int, ha_rkey_function)",
                "Item_func::fix_fields(THD*, Item**)",
                "dict_index_t* dict_table_get_first_index<dict_table_t>(dict_table_t const*)",
                "sync_array_wait_event(sync_array_t*, sync_cell_t*&)",
                "irqentry_exit_to_user_mode",
            ]
            .map(String::from),
        );
        let script = format!(
            "{SHORT_JS}\nconst names = {};\nprocess.stdout.write(JSON.stringify(names.map(innoprof_short)));",
            serde_json::to_string(&names).unwrap()
        );
        let out = std::process::Command::new("node")
            .arg("-e")
            .arg(&script)
            .output()
            .expect("node (Node.js) runs the flame graph's script rule");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let js: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
        let rust: Vec<String> = names.iter().map(|n| short(n)).collect();
        assert_eq!(js, rust);
    }

    #[test]
    fn labels_refit_in_the_room_they_had() {
        let full = "buf_flush_batch(buf_pool_t*, unsigned long)";
        assert_eq!(refit(full, full), "buf_flush_batch");
        assert_eq!(refit("buf_flush_ba..", full), "buf_flush_ba..");
        assert_eq!(refit("buf_flush_batch(buf_p..", full), "buf_flush_batch");
        assert_eq!(refit("", full), "");
        assert_eq!(without_counts("f(int) (3 samples, 1.00%)"), "f(int) ");
        assert_eq!(without_counts("all"), "all");
    }
}

//! Puts an inferno flame graph into the page. Each graph goes into its own
//! `<iframe srcdoc>`: the SVG's script (click to zoom, search) and its ids
//! and CSS (`#title`, `text {…}`) would otherwise act on the whole page
//! and on each other. The frame is sandboxed to scripts and the search
//! prompt.
//!
//! Cleaned of what would put a URL in the page without any fetch: the XML
//! declaration and DOCTYPE (a DTD URL), comments (links to the FlameGraph
//! project), inferno's own namespace URI for its `fg:` attributes (the
//! script reads them by qualified name, so the URI is free), and `://` in
//! the script's text is written `:\/\/`, the same JavaScript string.

/// `(srcdoc, height in px)`.
pub fn srcdoc(svg: &str) -> (String, u32) {
    let start = svg.find("<svg").unwrap_or(0);
    let mut body = without_comments(&svg[start..]);
    body = body.replace(
        "xmlns:fg=\"http://github.com/jonhoo/inferno\"",
        "xmlns:fg=\"urn:x-inferno\"",
    );
    if let (Some(a), Some(b)) = (body.find("<script"), body.find("</script>")) {
        if a < b {
            let script = body[a..b].replace("://", ":\\/\\/");
            body.replace_range(a..b, &script);
        }
    }
    let height = svg_height(&body).unwrap_or(600);
    // In an HTML document an SVG without a width (inferno's script removes
    // it to fit the window) is 300 px wide: make it fill the frame. The
    // frame's URL is about:srcdoc, where inferno's zoom/search state
    // cannot be kept, so history.replaceState does nothing.
    let doc = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
         <style>body{{margin:0}} svg{{width:100%}}</style>\
         <script>history.replaceState=function(){{}};</script></head><body>{body}</body></html>"
    );
    (doc, height)
}

fn without_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("<!--") {
        out.push_str(&rest[..i]);
        match rest[i..].find("-->") {
            Some(j) => rest = &rest[i + j + 3..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The `height` attribute of the root `<svg>`.
fn svg_height(svg: &str) -> Option<u32> {
    let tag_end = svg.find('>')?;
    let tag = &svg[..tag_end];
    let i = tag.find(" height=\"")? + " height=\"".len();
    tag[i..].split('"').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_urls_keeps_svg_and_script() {
        let svg = crate::report::flamegraph::render("main;work 3\n", "t", "samples")
            .unwrap()
            .unwrap();
        let (doc, height) = srcdoc(std::str::from_utf8(&svg.svg).unwrap());
        assert!(height > 50, "{height}");
        assert!(doc.contains("<svg") && doc.contains("init(evt)") && doc.contains(">work<"));
        assert!(!doc.contains("<!--") && !doc.contains("DOCTYPE svg"));
        assert!(doc.contains("<![CDATA["), "script kept");
        let urls: Vec<&str> = doc
            .match_indices("://")
            .map(|(i, _)| &doc[i.saturating_sub(40)..i + 30])
            .collect();
        assert!(
            urls.iter()
                .all(|u| u.contains("xmlns=\"http://www.w3.org/2000/svg\"")
                    || u.contains("xmlns:xlink=\"http://www.w3.org/1999/xlink\"")),
            "{urls:#?}"
        );
    }
}

//! Text that came from a target or a bundle, made safe to print. A probe
//! name, a frame, a comm, a path or a statement is untrusted: printed raw
//! to root's terminal, an `ESC ]2;…BEL` retitles it and `ESC [2J` clears
//! it (and worse sequences exist). Every such string reaching a terminal,
//! summary.txt or a log goes through [`printable`] (one string) or
//! [`printable_lines`] (a rendered text whose own line breaks are kept).
//! Statement text served over HTTP goes through [`fingerprint`] instead:
//! its literals may be data the reader has no right to.

pub mod units;

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters a terminal may act on rather than show: C0 controls, DEL,
/// C1 controls (U+0080–U+009F: `U+009B` is CSI on some terminals), and the
/// bidirectional overrides and isolates, which reorder what is shown
/// (a name that reads as another). Also U+FFFE and U+FFFF, the only other
/// characters XML 1.0 forbids: frame names reach the flame graphs' SVG.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{fffe}' | '\u{ffff}'
        )
}

/// `s` with every control character (line breaks and tabs included)
/// written as an escape: `\x1b` for C0 and DEL, `\u{9b}` above; borrowed
/// when there is none, so the common case costs a scan.
pub fn printable(s: &str) -> Cow<'_, str> {
    escaped(s, |_| false)
}

/// As [`printable`], but line breaks stay: for a whole rendered text (a
/// table, summary.txt) whose rows are innoprof's own. A `\r` is escaped
/// (it rewrites the line shown).
pub fn printable_lines(s: &str) -> Cow<'_, str> {
    escaped(s, |c| c == '\n')
}

fn escaped(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// `s` in at most `width` characters, `…` at the end when cut.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        out.push('…');
    }
    out
}

/// A SQL statement with its literals replaced by `?` (quoted strings,
/// numbers, hex and bit literals) and its comments dropped, whitespace
/// squeezed: what it does, without the data it carries. Identifiers
/// (quoted with backticks or not) stay. A statement cut short (the
/// processlist keeps a prefix) loses its unclosed literal as well.
pub fn fingerprint(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    // The last byte written was part of a word (a number right after one
    // is part of an identifier: `t1`, `col2`).
    let mut in_word = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' | b'"' => {
                i = skip_quoted(b, i, c);
                push_literal(&mut out);
                in_word = false;
            }
            b'`' => {
                let end = skip_quoted(b, i, b'`');
                out.push_str(&printable(&sql[i..end]));
                i = end;
                in_word = false;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => i = skip_line(b, i),
            b'#' => i = skip_line(b, i),
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = find(b, i + 2, b"*/").map_or(b.len(), |e| e + 2);
                push_space(&mut out);
            }
            b'0'..=b'9' if !in_word => {
                i = skip_number(b, i);
                push_literal(&mut out);
            }
            b'.' if !in_word && b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = skip_number(b, i);
                push_literal(&mut out);
            }
            b'x' | b'X' | b'b' | b'B' if !in_word && b.get(i + 1) == Some(&b'\'') => {
                i = skip_quoted(b, i + 1, b'\'');
                push_literal(&mut out);
            }
            c if c.is_ascii_whitespace() => {
                push_space(&mut out);
                i += 1;
                in_word = false;
            }
            _ => {
                // One whole UTF-8 character, controls escaped.
                let len = sql[i..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&printable(&sql[i..i + len]));
                in_word = c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
                i += len;
            }
        }
    }
    out.trim().to_string()
}

/// Past a literal quoted by `q` starting at `i` (doubled quotes and
/// backslash escapes inside), or the end.
fn skip_quoted(b: &[u8], i: usize, q: u8) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if q != b'`' => j += 2,
            c if c == q && b.get(j + 1) == Some(&q) => j += 2,
            c if c == q => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

fn skip_line(b: &[u8], i: usize) -> usize {
    find(b, i, b"\n").unwrap_or(b.len())
}

/// Past a decimal, hex (`0x1F`) or exponent number.
fn skip_number(b: &[u8], i: usize) -> usize {
    let mut j = i;
    if b[j] == b'0' && matches!(b.get(j + 1), Some(b'x' | b'X' | b'b' | b'B')) {
        j += 2;
    }
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'.') {
        // `1e-5`: the sign belongs to the exponent.
        if matches!(b[j], b'e' | b'E') && matches!(b.get(j + 1), Some(b'-' | b'+')) {
            j += 1;
        }
        j += 1;
    }
    j
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn push_space(out: &mut String) {
    if !out.is_empty() && !out.ends_with(' ') {
        out.push(' ');
    }
}

/// `?` for a literal; a list of them (`IN (1, 2, 3)`) stays as written,
/// one `?` each.
fn push_literal(out: &mut String) {
    out.push('?');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_terminal_sequences() {
        let evil = "evil\x1b]2;PWNED-TITLE\x07\x1b[2J";
        let shown = printable(evil);
        assert_eq!(shown, "evil\\x1b]2;PWNED-TITLE\\x07\\x1b[2J");
        assert!(!shown.chars().any(|c| c.is_control()));
        assert_eq!(printable("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
        assert_eq!(printable("csi\u{9b}2J"), "csi\\u{9b}2J");
        assert_eq!(printable("abc\u{202e}cba"), "abc\\u{202e}cba");
        assert_eq!(printable("x\u{fffe}\u{ffff}"), "x\\u{fffe}\\u{ffff}");
    }

    #[test]
    fn printable_borrows_clean_text() {
        assert!(matches!(
            printable("buf_pool_mutex <*> é"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(printable_lines("a\nb\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn printable_lines_keeps_line_breaks_only() {
        assert_eq!(printable_lines("a\nb\r\x1b[2J\n"), "a\nb\\x0d\\x1b[2J\n");
    }

    #[test]
    fn fingerprint_replaces_literals() {
        assert_eq!(
            fingerprint("SELECT * FROM `t1` WHERE name = 'alice''s' AND id IN (1, 2.5, -3e-4)"),
            "SELECT * FROM `t1` WHERE name = ? AND id IN (?, ?, -?)"
        );
        assert_eq!(
            fingerprint("UPDATE sbtest1 SET c=\"sec\\\"ret\" WHERE k=0x1F /* x */ -- y\n LIMIT 1"),
            "UPDATE sbtest1 SET c=? WHERE k=? LIMIT ?"
        );
        assert_eq!(
            fingerprint("insert into t2 values (X'ab', b'01')"),
            "insert into t2 values (?, ?)"
        );
        // Cut short: the unclosed literal goes too.
        assert_eq!(fingerprint("SELECT 'secr"), "SELECT ?");
        assert_eq!(
            fingerprint("SELECT col2 FROM t\x1b[2J"),
            "SELECT col2 FROM t\\x1b[?"
        );
    }
}

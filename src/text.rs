//! Text a peer sent, made safe for where it is written: XML 1.0 content (escaped, and the
//! characters XML cannot carry even escaped replaced), server-sent events (one `data:` line
//! per line, whatever the line ending) and log lines (one event, one line). Identifiers are
//! checked earlier, at the collection boundary (`engine::report::check_id`); this module is
//! what stands behind free text (details, error strings, topics, replies).

use std::borrow::Cow;
use std::io::Write;

/// Whether XML 1.0 can carry `c` at all (production [2] Char; surrogates are not `char`s).
pub fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Escapes `s` for XML character data and attribute values (`&`, `<`, `>`, `"`, `'`, and CR
/// as `&#13;` so that it survives end-of-line normalisation), replacing every character XML
/// 1.0 forbids (NUL and most C0 controls, U+FFFE, U+FFFF) with U+FFFD.
pub fn xml(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| matches!(c, '&' | '<' | '>' | '"' | '\'' | '\r') || !xml_char(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            c if !xml_char(c) => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Appends `s` to `out` escaped for XML character data only (`&`, `<`, `>`, and CR as
/// `&#13;`; forbidden characters become U+FFFD): quotes stay as they are, which keeps
/// JSON text carried in an element near its own size.
pub fn push_xml_text(out: &mut String, s: &str) {
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let rep = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            '\r' => "&#13;",
            c if !xml_char(c) => "\u{FFFD}",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        out.push_str(rep);
        start = i + c.len_utf8();
    }
    out.push_str(&s[start..]);
}

/// One SSE event carrying `data` (WHATWG HTML, server-sent events; RFC 8895): a field
/// value may hold no CR or LF, so each line — ended by CRLF, CR or LF — becomes its own
/// `data:` field, and the event ends with an empty line.
pub fn sse_event(data: &str) -> String {
    let mut frame = String::with_capacity(data.len() + 16);
    for line in sse_lines(data) {
        frame.push_str("data: ");
        frame.push_str(line);
        frame.push('\n');
    }
    frame.push('\n');
    frame
}

/// The lines of `s` split on CRLF, CR and LF (a trailing line end ends the last line, it
/// does not start an empty one).
pub fn sse_lines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find(['\r', '\n']) {
        out.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest);
    }
    out
}

/// Whether `c` would let text change the shape of an output: controls (C0, DEL, C1),
/// Unicode format characters (bidi overrides, zero-width, BOM), the line / paragraph
/// separators, and what XML 1.0 cannot carry (U+FFFE, U+FFFF; YANG strings exclude them).
pub fn is_hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c) || !xml_char(c)
}

/// Unicode general category Cf (format characters).
pub fn is_format(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
}

/// `s` with every hostile character written as `\u{…}` and cut to at most `max` characters
/// (the cut marked with `…`): the form in which text from a peer is kept, logged and
/// notified when it could not be refused.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4) + 8);
    let mut n = 0;
    for c in s.chars() {
        let piece = if is_hostile(c) { format!("\\u{{{:x}}}", c as u32) } else { c.to_string() };
        let len = piece.chars().count();
        if n + len > max {
            // Room for the mark: drop characters until it fits.
            while n + 1 > max && out.pop().is_some() {
                n -= 1;
            }
            if max > 0 {
                out.push('…');
            }
            return out;
        }
        out.push_str(&piece);
        n += len;
    }
    out
}

/// The first `max` characters of `s` (never splits a character).
pub fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A log writer that keeps one event on one line: the fmt layer formats each event into
/// one buffer and writes it through a fresh writer, so every CR, LF or other C0 control
/// before the final line end was put there by a field or message and is escaped here
/// (`\n`, `\r`, `\x00`…; ESC is left to the formatter, which escapes it in values and
/// uses it for colours). Whatever a peer manages to get into a log call, it cannot forge
/// a line.
pub struct OneLine<W: Write> {
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> OneLine<W> {
    pub fn new(out: W) -> OneLine<W> {
        OneLine { buf: Vec::with_capacity(256), out }
    }

    /// The escaped form of one formatted event.
    pub fn escape(event: &[u8]) -> Vec<u8> {
        let (body, end) = match event.strip_suffix(b"\n") {
            Some(b) => (b, &b"\n"[..]),
            None => (event, &b""[..]),
        };
        let mut out = Vec::with_capacity(event.len() + 8);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                // Tabs, and the formatter's own colours (it already escapes ESC in values).
                b'\t' | 0x1b => out.push(b),
                b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                b => out.push(b),
            }
        }
        out.extend_from_slice(end);
        out
    }
}

impl<W: Write> Write for OneLine<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for OneLine<W> {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.out.write_all(&Self::escape(&self.buf));
            let _ = self.out.flush();
        }
    }
}

/// The agent's log writer: stderr, one line per event.
pub fn log_writer() -> OneLine<std::io::Stderr> {
    OneLine::new(std::io::stderr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_replaces_what_xml_forbids() {
        assert_eq!(xml("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(xml("nul\0bel\u{7}"), "nul\u{FFFD}bel\u{FFFD}");
        assert_eq!(xml("cr\rlf\ntab\t"), "cr&#13;lf\ntab\t");
        assert_eq!(xml("\u{FFFE}\u{FFFF}"), "\u{FFFD}\u{FFFD}");
        assert!(matches!(xml("plain 188.3.67.3:67"), Cow::Borrowed(_)));
    }

    #[test]
    fn whatwg_sse_lines_end_at_crlf_cr_and_lf() {
        assert_eq!(sse_lines("a\r\nb\rc\nd"), ["a", "b", "c", "d"]);
        assert_eq!(sse_lines("a\n"), ["a"]);
        assert_eq!(sse_lines(""), [""]);
        assert_eq!(sse_lines("a\n\nb"), ["a", "", "b"]);
        assert_eq!(sse_event("x\revent: forged\ndata: y"), "data: x\ndata: event: forged\ndata: data: y\n\n");
    }

    #[test]
    fn printable_escapes_and_bounds() {
        assert_eq!(printable("a\r\nb", 100), "a\\u{d}\\u{a}b");
        assert_eq!(printable("\u{202e}x", 100), "\\u{202e}x");
        let long = "x".repeat(60_000);
        assert_eq!(printable(&long, 255).chars().count(), 255);
        assert!(printable(&long, 255).ends_with('…'));
        assert_eq!(truncate("héllo", 2), "hé");
    }

    #[test]
    fn one_line_writer_escapes_inner_line_ends_only() {
        assert_eq!(OneLine::<Vec<u8>>::escape(b"a\nb\r\x00c\n"), b"a\\nb\\r\\x00c\n");
        let mut sink = Vec::new();
        {
            let mut w = OneLine::new(&mut sink);
            w.write_all(b"INFO x=\"1\nFORGED\"").unwrap();
            w.write_all(b" end\n").unwrap();
        }
        assert_eq!(sink, b"INFO x=\"1\\nFORGED\" end\n");
    }
}

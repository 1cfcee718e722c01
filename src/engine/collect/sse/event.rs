//! The `text/event-stream` format (WHATWG HTML, "Server-sent events", 9.2.5-9.2.6) as
//! read by an SSE subscriber: bytes in, events out, no I/O; fuzzed by
//! `fuzz/fuzz_targets/sse_event.rs`. Bounded: a line longer than `max_line` or an event
//! whose data grows past `max_event` is not kept; the event it belongs to is reported as
//! [`Item::Oversized`] at its end and the stream goes on with the next event. What the
//! parser holds is at most one line, one event's data and the chunk being read.
//!
//! Lines end with CRLF, LF or CR (a CRLF split between two chunks is one line end); a
//! leading BOM is skipped; `:` lines are comments; fields are `data`, `event`, `id` (with
//! no NUL) and `retry` (ASCII digits only); any other field is ignored, as the format says.
//! An `id` longer than [`MAX_ID`] bytes is not taken (the event is reported as
//! [`Item::Oversized`] with limit "id"): the last event ID is kept across events and copied
//! into each one, so an unbounded id would let a stream of tiny events cost a copy of a
//! line-sized id each.

use bytes::Bytes;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The `event` field ("" when not given: the format's "message").
    pub kind: String,
    /// The `data` lines joined with LF.
    pub data: Vec<u8>,
    /// The last event ID after this event (the stream's, kept across events).
    pub id: String,
}

/// What the parser gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Event(Event),
    /// An event that was over a limit ended here; its data was dropped.
    Oversized {
        /// Which limit: "line", "event" or "id".
        limit: &'static str,
        /// The last event ID after it (its own `id` field counts if it was read).
        id: String,
    },
}

/// The bounds of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest line, in bytes without its end.
    pub max_line: usize,
    /// Largest event data (the `data` lines joined), in bytes.
    pub max_event: usize,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Longest last event ID kept, in bytes (it is sent back as `Last-Event-ID` and shown in
/// the target's state).
pub const MAX_ID: usize = 256;

/// The parser of one connection's stream (a new connection starts a new parser; the last
/// event ID is kept by the subscriber).
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    chunk: Bytes,
    at: usize,
    line: Vec<u8>,
    /// The current line went over `max_line`: the rest of it is skipped.
    skipping_line: bool,
    data: Vec<u8>,
    kind: String,
    id: String,
    /// The last event ID string: `id` as of the last blank line (WHATWG 9.2.6, dispatch
    /// step 1: set even when the event has no data and is not dispatched).
    committed: String,
    /// The event in progress went over a limit (which one).
    oversized: Option<&'static str>,
    /// The last byte read was a CR (a following LF belongs to the same line end).
    after_cr: bool,
    /// Bytes of the stream's start still compared with the BOM (None: done).
    bom: Option<usize>,
    /// The reconnection time the server asked for (milliseconds).
    pub retry: Option<u64>,
}

impl Parser {
    /// A parser whose last event ID starts as `id` (what a reconnection sent).
    pub fn new(limits: Limits, id: String) -> Parser {
        Parser {
            limits,
            chunk: Bytes::new(),
            at: 0,
            line: Vec::new(),
            skipping_line: false,
            data: Vec::new(),
            kind: String::new(),
            committed: id.clone(),
            id,
            oversized: None,
            after_cr: false,
            bom: Some(0),
            retry: None,
        }
    }

    /// Hands the parser the next chunk; call [`Parser::next`] until it returns None first.
    pub fn push(&mut self, chunk: Bytes) {
        debug_assert!(self.at >= self.chunk.len(), "push before the previous chunk was read");
        self.chunk = chunk;
        self.at = 0;
    }

    /// Bytes held besides the chunk being read (for the bound's tests).
    pub fn held(&self) -> usize {
        self.line.len() + self.data.len() + self.kind.len() + self.id.len() + self.committed.len()
    }

    /// The last event ID as of the last blank line, what a reconnection sends: an event
    /// with an `id` and no data moves it too, an event not ended by a blank line does not.
    pub fn last_event_id(&self) -> &str {
        &self.committed
    }

    /// The next event of what was pushed, if it completes one.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Item> {
        while self.at < self.chunk.len() {
            if let Some(seen) = self.bom {
                let b = self.chunk[self.at];
                if seen < BOM.len() && b == BOM[seen] {
                    self.at += 1;
                    self.bom = (seen + 1 < BOM.len()).then_some(seen + 1);
                    continue;
                }
                // Not a BOM after all: the bytes taken for one are the line's start.
                self.line.extend_from_slice(&BOM[..seen]);
                self.bom = None;
            }
            let rest = &self.chunk[self.at..];
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    self.at += 1;
                    continue;
                }
            }
            match rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(end) => {
                    self.after_cr = rest[end] == b'\r';
                    self.take(end);
                    self.at += end + 1;
                    let item = self.line_end();
                    if item.is_some() {
                        return item;
                    }
                }
                None => {
                    let n = rest.len();
                    self.take(n);
                    self.at += n;
                }
            }
        }
        None
    }

    /// Appends `n` bytes of the chunk to the current line, within `max_line`.
    fn take(&mut self, n: usize) {
        if self.skipping_line {
            return;
        }
        if self.line.len() + n > self.limits.max_line {
            self.skipping_line = true;
            self.oversized.get_or_insert("line");
            self.line = Vec::new();
            return;
        }
        self.line.extend_from_slice(&self.chunk[self.at..self.at + n]);
    }

    /// A line ended: interpret it; a blank line dispatches the event.
    fn line_end(&mut self) -> Option<Item> {
        if std::mem::take(&mut self.skipping_line) {
            return None;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            self.line = reuse(line);
            return None;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &b""[..]),
        };
        match field {
            // Once the event is over a limit its data is no longer kept.
            b"data" if self.oversized.is_none() => {
                if self.data.len() + value.len() + 1 > self.limits.max_event {
                    self.oversized = Some("event");
                    self.data = Vec::new();
                } else {
                    self.data.extend_from_slice(value);
                    self.data.push(b'\n');
                }
            }
            b"event" => self.kind = String::from_utf8_lossy(value).into_owned(),
            b"id" if value.len() > MAX_ID => {
                self.oversized.get_or_insert("id");
            }
            b"id" if !value.contains(&0) => self.id = String::from_utf8_lossy(value).into_owned(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only is a reconnection time, however many (saturated): a value
                // too large for u64 must not forget the one set before.
                let ms = value.iter().fold(0u64, |a, d| a.saturating_mul(10).saturating_add(u64::from(d - b'0')));
                self.retry = Some(ms);
            }
            _ => {}
        }
        self.line = reuse(line);
        None
    }

    fn dispatch(&mut self) -> Option<Item> {
        self.committed.clone_from(&self.id);
        let kind = std::mem::take(&mut self.kind);
        if let Some(limit) = self.oversized.take() {
            self.data.clear();
            return Some(Item::Oversized { limit, id: self.id.clone() });
        }
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        Some(Item::Event(Event { kind, data, id: self.id.clone() }))
    }
}

/// A line's buffer back for the next line, emptied (kept only while small).
fn reuse(mut v: Vec<u8>) -> Vec<u8> {
    v.clear();
    if v.capacity() > 4096 {
        v = Vec::new();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits { max_line: 64, max_event: 128 };

    /// Every item of `input` fed in chunks of `n` bytes.
    fn parse(input: &[u8], n: usize) -> Vec<Item> {
        let mut p = Parser::new(L, String::new());
        let mut out = Vec::new();
        for c in input.chunks(n.max(1)) {
            p.push(Bytes::copy_from_slice(c));
            while let Some(i) = p.next() {
                out.push(i);
            }
            assert!(p.held() <= L.max_line + L.max_event + 2 * L.max_line);
        }
        out
    }

    fn ev(kind: &str, data: &str, id: &str) -> Item {
        Item::Event(Event { kind: kind.into(), data: data.as_bytes().to_vec(), id: id.into() })
    }

    #[test]
    fn whatwg_9_2_6_fields_and_dispatch_in_any_chunking() {
        let input = b"\xEF\xBB\xBF: comment\r\ndata: a\r\ndata:b\r\n\r\nevent: report\nid: 7\ndata\n\n\
                      id: 8\n\nretry: 1500\nunknown: x\ndata: {\"x\":1}\r\rdata: c";
        let want = vec![ev("", "a\nb", ""), ev("report", "", "7"), ev("", "{\"x\":1}", "8")];
        for n in 1..input.len() + 1 {
            let got = parse(input, n);
            // "data" with no value is one empty line: the event is dispatched with data "".
            assert_eq!(got, want, "chunks of {n}");
        }
        let mut p = Parser::new(L, String::new());
        p.push(Bytes::from_static(b"retry: 1500\nretry: x\n"));
        while p.next().is_some() {}
        assert_eq!(p.retry, Some(1500));
        // Digits past u64 are still digits: the longest time, not "no retry".
        p.push(Bytes::from_static(b"retry: 99999999999999999999999\n"));
        while p.next().is_some() {}
        assert_eq!(p.retry, Some(u64::MAX));
    }

    #[test]
    fn whatwg_9_2_6_an_event_without_data_is_not_dispatched_but_its_id_is_kept() {
        let got = parse(b"id: 5\n\ndata: x\n\n", 3);
        assert_eq!(got, vec![ev("", "x", "5")]);
        // An id-only event is not dispatched but moves the last event ID string (what a
        // reconnection sends); an id not followed by a blank line does not.
        let mut p = Parser::new(L, "3".into());
        p.push(Bytes::from_static(b"id: 5\n\nid: 6\ndata: x"));
        assert_eq!(p.next(), None);
        assert_eq!(p.last_event_id(), "5");
        // An id with NUL is ignored.
        assert_eq!(parse(b"id: 1\0\ndata: y\n\n", 100), vec![ev("", "y", "")]);
    }

    #[test]
    fn oversized_lines_and_events_are_reported_and_the_stream_goes_on() {
        let long_line = format!("data: {}\n\ndata: ok\n\n", "x".repeat(200));
        for n in [1, 7, 1000] {
            assert_eq!(
                parse(long_line.as_bytes(), n),
                vec![Item::Oversized { limit: "line", id: String::new() }, ev("", "ok", "")],
                "chunks of {n}"
            );
        }
        let many = format!("id: 3\n{}\ndata: ok\n\n", "data: 0123456789012345678901234567890123456789\n".repeat(5));
        assert_eq!(
            parse(many.as_bytes(), 5),
            vec![Item::Oversized { limit: "event", id: "3".into() }, ev("", "ok", "3")]
        );
        // A line that never ends holds no more than the limit.
        let mut p = Parser::new(L, String::new());
        for _ in 0..1000 {
            p.push(Bytes::from_static(b"data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"));
            assert!(p.next().is_none());
            assert!(p.held() <= L.max_line);
        }
    }

    /// The fuzz target's checks (chunking invariance, limits) on pseudo-random streams made
    /// of the format's own pieces, so every run covers the tricky joins (CR at a chunk's
    /// end, BOM halves, long lines) without libFuzzer.
    #[test]
    fn random_streams_pass_the_fuzz_targets_checks() {
        const PIECES: &[&[u8]] = &[
            b"data",
            b"data:",
            b"data: ",
            b"id:",
            b"id: 7",
            b"event: x",
            b"retry: 10",
            b":",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"\xEF\xBB\xBF",
            b"\xEF",
            b"x",
            b"{\"a\":1}",
            b"\0",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let mut input = vec![(next() % 256) as u8];
            for _ in 0..next() % 120 {
                let piece = PIECES[(next() % PIECES.len() as u64) as usize];
                // Now and then a run long enough to pass the fuzz target's line limit.
                let times = if next() % 50 == 0 { 300 } else { 1 };
                for _ in 0..times {
                    input.extend_from_slice(piece);
                }
            }
            crate::fuzzing::sse_event(&input);
        }
    }

    /// A stream cannot make its last event ID line-sized (each event carries a copy of it):
    /// a longer id is not taken and its event is refused as oversized.
    #[test]
    fn an_id_over_max_id_is_not_kept_and_its_event_is_oversized() {
        let limits = Limits { max_line: 4096, max_event: 4096 };
        let long = "i".repeat(MAX_ID + 1);
        let input = format!("id: 1\n\nid: {long}\ndata: a\n\ndata: b\n\nid: {}\ndata: c\n\n", "j".repeat(MAX_ID));
        let mut p = Parser::new(limits, String::new());
        p.push(Bytes::from(input.into_bytes()));
        let mut got = Vec::new();
        while let Some(i) = p.next() {
            got.push(i);
        }
        assert_eq!(
            got,
            vec![Item::Oversized { limit: "id", id: "1".into() }, ev("", "b", "1"), ev("", "c", &"j".repeat(MAX_ID)),]
        );
    }

    #[test]
    fn a_bom_prefix_that_is_not_a_bom_is_data() {
        assert_eq!(parse(b"\xEF\xBBdata: x\n\n", 1), vec![]);
        assert_eq!(parse(b"\xEFdata\n\ndata: z\n\n", 2), vec![ev("", "z", "")]);
    }
}

//! RFC 6242 message framing, knowing nothing of XML: base:1.0 end-of-message (`]]>]]>`)
//! and base:1.1 chunked framing (`\n#<size>\n…\n##\n`). A decoder never buffers more than
//! the configured maximum message size.

/// The framing in force on a session (section 4.1: chunked once both hellos say 1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    EndOfMessage,
    Chunked,
}

pub const EOM: &[u8] = b"]]>]]>";
/// RFC 6242 4.2: chunk sizes are at most 4294967295.
const MAX_CHUNK: u64 = 4_294_967_295;

/// Why a byte stream is not a valid sequence of framed messages.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("message exceeds the maximum size of {0} bytes")]
    TooBig(usize),
    #[error("malformed chunked framing: {0}")]
    Malformed(&'static str),
}

enum ChunkState {
    /// Expecting `\n#` then digits or `#`.
    Header,
    /// Reading `remaining` bytes of chunk data.
    Data { remaining: usize },
}

/// Incremental decoder: feed bytes, take complete messages.
pub struct Decoder {
    framing: Framing,
    max: usize,
    buf: Vec<u8>,
    /// Bytes of `buf` already scanned for the end-of-message marker.
    scanned: usize,
    msg: Vec<u8>,
    chunk: ChunkState,
    /// A message is too big: swallow input until its end, then report once.
    discarding: bool,
}

impl Decoder {
    pub fn new(max_message_size: usize) -> Self {
        Decoder {
            framing: Framing::EndOfMessage,
            max: max_message_size,
            buf: Vec::new(),
            scanned: 0,
            msg: Vec::new(),
            chunk: ChunkState::Header,
            discarding: false,
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Switches framing after the hello exchange; bytes already buffered are reinterpreted.
    pub fn set_framing(&mut self, f: Framing) {
        self.framing = f;
        self.scanned = 0;
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete message, `Ok(None)` when more bytes are needed. After
    /// [`FramingError::TooBig`] the decoder has skipped that message and can go on; after
    /// [`FramingError::Malformed`] the stream cannot be resynchronised and must be closed.
    pub fn next_message(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        match self.framing {
            Framing::EndOfMessage => self.next_eom(),
            Framing::Chunked => self.next_chunked(),
        }
    }

    fn next_eom(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        let start = self.scanned.saturating_sub(EOM.len() - 1);
        if let Some(pos) = find(&self.buf[start..], EOM).map(|p| p + start) {
            let rest = self.buf.split_off(pos + EOM.len());
            let mut msg = std::mem::replace(&mut self.buf, rest);
            msg.truncate(pos);
            self.scanned = 0;
            if std::mem::take(&mut self.discarding) || msg.len() > self.max {
                return Err(FramingError::TooBig(self.max));
            }
            return Ok(Some(msg));
        }
        self.scanned = self.buf.len();
        if self.buf.len() > self.max + EOM.len() {
            // Keep only a possible marker prefix; the rest of this message is dropped.
            let keep = self.buf.split_off(self.buf.len() - (EOM.len() - 1));
            self.buf = keep;
            self.scanned = 0;
            self.discarding = true;
        }
        Ok(None)
    }

    fn next_chunked(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        let mut pos = 0;
        let result = loop {
            match self.chunk {
                ChunkState::Data { remaining } => {
                    let avail = (self.buf.len() - pos).min(remaining);
                    if !self.discarding {
                        self.msg.extend_from_slice(&self.buf[pos..pos + avail]);
                    }
                    pos += avail;
                    if avail == remaining {
                        self.chunk = ChunkState::Header;
                    } else {
                        self.chunk = ChunkState::Data { remaining: remaining - avail };
                        break Ok(None);
                    }
                }
                ChunkState::Header => {
                    let hdr = &self.buf[pos..];
                    if hdr.len() < 3 {
                        if hdr.iter().zip(b"\n#").any(|(a, b)| a != b) {
                            break Err(FramingError::Malformed("expected \\n#"));
                        }
                        break Ok(None);
                    }
                    if &hdr[..2] != b"\n#" {
                        break Err(FramingError::Malformed("expected \\n#"));
                    }
                    if hdr[2] == b'#' {
                        if hdr.len() < 4 {
                            break Ok(None);
                        }
                        if hdr[3] != b'\n' {
                            break Err(FramingError::Malformed("end-of-chunks not followed by \\n"));
                        }
                        pos += 4;
                        let msg = std::mem::take(&mut self.msg);
                        if std::mem::take(&mut self.discarding) {
                            break Err(FramingError::TooBig(self.max));
                        }
                        if msg.is_empty() {
                            break Err(FramingError::Malformed("end-of-chunks without any chunk"));
                        }
                        break Ok(Some(msg));
                    }
                    // Chunk size: 1-10 digits, no leading zero, then \n.
                    let digits = hdr[2..].iter().take_while(|b| b.is_ascii_digit()).count();
                    if digits == 0 {
                        break Err(FramingError::Malformed("chunk size missing"));
                    }
                    if digits > 10 || hdr[2] == b'0' {
                        break Err(FramingError::Malformed("invalid chunk size"));
                    }
                    if hdr.len() == 2 + digits {
                        break Ok(None);
                    }
                    if hdr[2 + digits] != b'\n' {
                        break Err(FramingError::Malformed("chunk size not followed by \\n"));
                    }
                    let size: u64 = std::str::from_utf8(&hdr[2..2 + digits]).unwrap_or("0").parse().unwrap_or(0);
                    if size > MAX_CHUNK {
                        break Err(FramingError::Malformed("chunk size above 4294967295"));
                    }
                    pos += 3 + digits;
                    let size = size as usize;
                    if self.msg.len() + size > self.max {
                        self.discarding = true;
                        self.msg = Vec::new();
                    }
                    self.chunk = ChunkState::Data { remaining: size };
                }
            }
        };
        self.buf.drain(..pos);
        result
    }
}

/// Frames one message for sending.
pub fn encode(framing: Framing, msg: &[u8], out: &mut Vec<u8>) {
    match framing {
        Framing::EndOfMessage => {
            out.extend_from_slice(msg);
            out.extend_from_slice(EOM);
        }
        Framing::Chunked => {
            if !msg.is_empty() {
                out.extend_from_slice(format!("\n#{}\n", msg.len()).as_bytes());
                out.extend_from_slice(msg);
            }
            out.extend_from_slice(b"\n##\n");
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder) -> Vec<Result<Vec<u8>, FramingError>> {
        let mut out = vec![];
        loop {
            match d.next_message() {
                Ok(Some(m)) => out.push(Ok(m)),
                Ok(None) => return out,
                Err(e) => {
                    let fatal = matches!(e, FramingError::Malformed(_));
                    out.push(Err(e));
                    if fatal {
                        return out;
                    }
                }
            }
        }
    }

    #[test]
    fn eom_split_anywhere() {
        let stream = b"<a/>]]>]]><b/>]]>]]>";
        for split in 0..stream.len() {
            let mut d = Decoder::new(1000);
            d.feed(&stream[..split]);
            let mut got = all(&mut d);
            d.feed(&stream[split..]);
            got.extend(all(&mut d));
            assert_eq!(got, vec![Ok(b"<a/>".to_vec()), Ok(b"<b/>".to_vec())], "split {split}");
        }
    }

    #[test]
    fn chunked_rfc6242_example_byte_by_byte() {
        // RFC 6242 section 4.2 example: two chunks forming one message.
        let stream = b"\n#4\n<rpc\n#18\n message-id=\"102\"\n\n##\n";
        let mut d = Decoder::new(1000);
        d.set_framing(Framing::Chunked);
        let mut got = vec![];
        for b in stream {
            d.feed(&[*b]);
            got.extend(all(&mut d));
        }
        assert_eq!(got, vec![Ok(b"<rpc message-id=\"102\"\n".to_vec())]);
    }

    #[test]
    fn chunked_malformed_headers() {
        for bad in [&b"#4\n<rpc"[..], b"\n#0\n", b"\n#04\nabcd", b"\n#x\n", b"\n##\n", b"\n#12345678901\n", b"\n#4 \n"]
        {
            let mut d = Decoder::new(1000);
            d.set_framing(Framing::Chunked);
            d.feed(bad);
            assert!(matches!(d.next_message(), Err(FramingError::Malformed(_))), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn too_big_is_reported_once_and_decoding_continues() {
        let mut d = Decoder::new(8);
        d.feed(b"<0123456789abcdef/>]]>]]><ok/>]]>]]>");
        assert_eq!(all(&mut d), vec![Err(FramingError::TooBig(8)), Ok(b"<ok/>".to_vec())]);
        let mut d = Decoder::new(8);
        d.set_framing(Framing::Chunked);
        d.feed(b"\n#6\n<01234\n#6\n56789>\n##\n\n#5\n<ok/>\n##\n");
        assert_eq!(all(&mut d), vec![Err(FramingError::TooBig(8)), Ok(b"<ok/>".to_vec())]);
        // A large message fed in pieces never makes the buffer grow past the limit.
        let mut d = Decoder::new(64);
        for _ in 0..1000 {
            d.feed(&[b'x'; 100]);
            assert!(all(&mut d).is_empty());
            assert!(d.buf.len() < 200);
        }
    }

    #[test]
    fn huge_chunk_sizes_allocate_nothing() {
        // RFC 6242 4.2: 4294967295 is the largest chunk; the decoder discards past the
        // message limit instead of reserving what the header announces.
        let mut d = Decoder::new(4096);
        d.set_framing(Framing::Chunked);
        d.feed(b"\n#4294967295\n");
        assert!(all(&mut d).is_empty());
        for _ in 0..256 {
            d.feed(&[b'x'; 64 * 1024]);
            assert!(all(&mut d).is_empty());
            assert!(d.buf.is_empty() && d.msg.capacity() <= 4096, "nothing kept from a discarded chunk");
        }
        for bad in [&b"\n#4294967296\n"[..], b"\n#9999999999\n", b"\n#99999999999\n"] {
            let mut d = Decoder::new(4096);
            d.set_framing(Framing::Chunked);
            d.feed(bad);
            assert!(matches!(d.next_message(), Err(FramingError::Malformed(_))), "{:?}", String::from_utf8_lossy(bad));
        }
        // Many chunks adding up past the limit are one too-big, and decoding goes on.
        let mut d = Decoder::new(4096);
        d.set_framing(Framing::Chunked);
        for _ in 0..100 {
            d.feed(b"\n#100\n");
            d.feed(&[b'y'; 100]);
        }
        d.feed(b"\n##\n\n#5\n<ok/>\n##\n");
        assert_eq!(all(&mut d), vec![Err(FramingError::TooBig(4096)), Ok(b"<ok/>".to_vec())]);
    }

    #[test]
    fn encode_round_trips() {
        for f in [Framing::EndOfMessage, Framing::Chunked] {
            let mut out = vec![];
            encode(f, b"<rpc-reply/>", &mut out);
            let mut d = Decoder::new(100);
            d.set_framing(f);
            d.feed(&out);
            assert_eq!(d.next_message().unwrap().unwrap(), b"<rpc-reply/>");
        }
    }
}

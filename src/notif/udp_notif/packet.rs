//! The UDP-notif message header (draft-ietf-netconf-udp-notif section 3.2) and the
//! segmentation option (section 4.1), encoded and decoded without I/O.
//!
//! ```text
//!  0                   1                   2                   3
//! +-----+-+-------+---------------+-------------------------------+
//! | Ver |S|  MT   |  Header Len   |      Message Length           |
//! +-----+-+-------+---------------+-------------------------------+
//! |                Message Publisher (Generator) ID               |
//! +---------------------------------------------------------------+
//! |                         Message ID                            |
//! +---------------------------------------------------------------+
//! ~   Options (TLV; the segmentation option first when present)   ~
//! ```

use super::super::Encoding;

/// The header version this module writes and reads.
pub const VERSION: u8 = 1;
/// The fixed part of the header.
pub const FIXED_HEADER_LEN: usize = 12;
/// The segmentation option: type, length, 15-bit segment number and the L flag.
pub const SEGMENT_OPTION_LEN: usize = 4;
const OPTION_SEGMENT: u8 = 1;
/// The largest segment number (15 bits; numbers never wrap).
pub const MAX_SEGMENT_NUMBER: u16 = 0x7fff;

/// The media type of the payload, in the standard space (S flag clear).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaType {
    Json = 1,
    Xml = 2,
    Cbor = 3,
}

impl From<Encoding> for MediaType {
    fn from(e: Encoding) -> MediaType {
        match e {
            Encoding::Json => MediaType::Json,
            Encoding::Xml => MediaType::Xml,
            Encoding::Cbor => MediaType::Cbor,
        }
    }
}

/// Where a segment sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub number: u16,
    pub last: bool,
}

/// A decoded header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    /// The S flag: MT is in the private space.
    pub private: bool,
    /// The 4-bit MT field, in the space `private` says.
    pub media_type: u8,
    pub header_len: u8,
    pub message_len: u16,
    pub generator_id: u32,
    pub message_id: u32,
    pub segment: Option<Segment>,
    /// Options of types this module does not know (skipped, counted).
    pub unknown_options: u8,
}

/// Why a message cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("a {len}-octet message does not fit one UDP datagram (65507 octets) and segmentation is disabled")]
    TooLarge { len: usize },
    #[error("a {len}-octet message needs more than 32768 segments of {max_segment_size} octets")]
    TooManySegments { len: usize, max_segment_size: u16 },
    #[error("max-segment-size {0} leaves no room for payload after the 16-octet header")]
    SegmentTooSmall(u16),
}

/// Why a datagram is not a UDP-notif message (one variant per cause).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} octets: shorter than the 12-octet fixed header")]
    Short(usize),
    #[error("version {0}: only version 1 is known")]
    Version(u8),
    #[error("header length {0} is below 12 or beyond the message")]
    HeaderLength(u8),
    #[error("message length {declared} but the datagram has {actual} octets")]
    MessageLength { declared: u16, actual: usize },
    #[error("an option of length {0} runs past the header (or is shorter than 2)")]
    OptionLength(u8),
    #[error("the segmentation option must have length 4, not {0}")]
    SegmentOptionLength(u8),
    #[error("the segmentation option is not the first option")]
    SegmentOptionNotFirst,
}

fn header(
    buf: &mut Vec<u8>,
    media: MediaType,
    generator_id: u32,
    message_id: u32,
    segment: Option<Segment>,
    payload: &[u8],
) {
    let header_len = FIXED_HEADER_LEN + if segment.is_some() { SEGMENT_OPTION_LEN } else { 0 };
    let message_len = header_len + payload.len();
    debug_assert!(message_len <= u16::MAX as usize);
    buf.push((VERSION << 5) | (media as u8 & 0x0f));
    buf.push(header_len as u8);
    buf.extend_from_slice(&(message_len as u16).to_be_bytes());
    buf.extend_from_slice(&generator_id.to_be_bytes());
    buf.extend_from_slice(&message_id.to_be_bytes());
    if let Some(s) = segment {
        buf.push(OPTION_SEGMENT);
        buf.push(SEGMENT_OPTION_LEN as u8);
        buf.extend_from_slice(&((s.number << 1) | u16::from(s.last)).to_be_bytes());
    }
    buf.extend_from_slice(payload);
}

/// The largest UDP payload over IPv4 (65 535 − 20 octets of IP header − 8 of UDP): a
/// UDP-notif message or segment is never larger.
pub const MAX_DATAGRAM: usize = 65_507;

/// The datagrams of one message. With `max_segment_size` (the draft's leaf, header and
/// options included) a message longer than it is cut into segments of at most that size,
/// all with `message_id`; a message that fits is sent whole, without the option. Without
/// it (segmentation disabled) the message must fit one UDP-notif message.
pub fn encode(
    media: MediaType,
    generator_id: u32,
    message_id: u32,
    payload: &[u8],
    max_segment_size: Option<u16>,
) -> Result<Vec<Vec<u8>>, EncodeError> {
    let whole = FIXED_HEADER_LEN + payload.len();
    // No datagram is larger than what UDP over IPv4 carries, whatever is configured.
    let max_segment_size = max_segment_size.map(|m| m.min(MAX_DATAGRAM as u16));
    let limit = max_segment_size.map_or(MAX_DATAGRAM, usize::from);
    if whole <= limit {
        let mut d = Vec::with_capacity(whole);
        header(&mut d, media, generator_id, message_id, None, payload);
        return Ok(vec![d]);
    }
    let Some(max) = max_segment_size else { return Err(EncodeError::TooLarge { len: payload.len() }) };
    let room = (max as usize).saturating_sub(FIXED_HEADER_LEN + SEGMENT_OPTION_LEN);
    if room == 0 {
        return Err(EncodeError::SegmentTooSmall(max));
    }
    let count = payload.len().div_ceil(room);
    if count > MAX_SEGMENT_NUMBER as usize + 1 {
        return Err(EncodeError::TooManySegments { len: payload.len(), max_segment_size: max });
    }
    Ok(payload
        .chunks(room)
        .enumerate()
        .map(|(i, chunk)| {
            let mut d = Vec::with_capacity(FIXED_HEADER_LEN + SEGMENT_OPTION_LEN + chunk.len());
            let segment = Segment { number: i as u16, last: i + 1 == count };
            header(&mut d, media, generator_id, message_id, Some(segment), chunk);
            d
        })
        .collect())
}

/// The header of one datagram and its payload (the segment's part of the message).
pub fn decode(datagram: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
    if datagram.len() < FIXED_HEADER_LEN {
        return Err(DecodeError::Short(datagram.len()));
    }
    let version = datagram[0] >> 5;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let header_len = datagram[1];
    let message_len = u16::from_be_bytes([datagram[2], datagram[3]]);
    if usize::from(message_len) != datagram.len() {
        return Err(DecodeError::MessageLength { declared: message_len, actual: datagram.len() });
    }
    if usize::from(header_len) < FIXED_HEADER_LEN || header_len as u16 > message_len {
        return Err(DecodeError::HeaderLength(header_len));
    }
    let mut h = Header {
        version,
        private: datagram[0] & 0x10 != 0,
        media_type: datagram[0] & 0x0f,
        header_len,
        message_len,
        generator_id: u32::from_be_bytes([datagram[4], datagram[5], datagram[6], datagram[7]]),
        message_id: u32::from_be_bytes([datagram[8], datagram[9], datagram[10], datagram[11]]),
        segment: None,
        unknown_options: 0,
    };
    let mut options = &datagram[FIXED_HEADER_LEN..usize::from(header_len)];
    let mut first = true;
    while !options.is_empty() {
        if options.len() < 2 {
            return Err(DecodeError::OptionLength(options.len() as u8));
        }
        let (typ, len) = (options[0], options[1]);
        if len < 2 || usize::from(len) > options.len() {
            return Err(DecodeError::OptionLength(len));
        }
        if typ == OPTION_SEGMENT {
            if usize::from(len) != SEGMENT_OPTION_LEN {
                return Err(DecodeError::SegmentOptionLength(len));
            }
            if !first {
                return Err(DecodeError::SegmentOptionNotFirst);
            }
            let v = u16::from_be_bytes([options[2], options[3]]);
            h.segment = Some(Segment { number: v >> 1, last: v & 1 == 1 });
        } else {
            h.unknown_options = h.unknown_options.saturating_add(1);
        }
        first = false;
        options = &options[usize::from(len)..];
    }
    Ok((h, &datagram[usize::from(header_len)..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_datagram_is_larger_than_udp_over_ipv4_carries() {
        let fits = vec![b'x'; MAX_DATAGRAM - FIXED_HEADER_LEN];
        assert_eq!(encode(MediaType::Json, 1, 1, &fits, None).unwrap()[0].len(), MAX_DATAGRAM);
        let over = vec![b'x'; MAX_DATAGRAM - FIXED_HEADER_LEN + 1];
        assert!(matches!(encode(MediaType::Json, 1, 1, &over, None), Err(EncodeError::TooLarge { .. })));
        // A configured segment size above it is clamped: every segment still fits.
        let big = vec![b'x'; 200_000];
        let segments = encode(MediaType::Json, 1, 1, &big, Some(u16::MAX)).unwrap();
        assert!(segments.iter().all(|d| d.len() <= MAX_DATAGRAM));
    }

    #[test]
    fn section_3_2_fixed_header_fields_in_network_order() {
        let d = encode(MediaType::Json, 0x0102_0304, 7, b"{}", None).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0], [0x21, 12, 0, 14, 1, 2, 3, 4, 0, 0, 0, 7, b'{', b'}']);
        let (h, p) = decode(&d[0]).unwrap();
        assert_eq!((h.media_type, h.generator_id, h.message_id, h.segment, p), (1, 0x0102_0304, 7, None, &b"{}"[..]));
    }

    #[test]
    fn section_4_1_segments_share_the_message_id_and_mark_the_last() {
        let payload: Vec<u8> = (0..100u8).collect();
        let d = encode(MediaType::Cbor, 9, 42, &payload, Some(16 + 30)).unwrap();
        assert_eq!(d.len(), 4);
        let mut joined = Vec::new();
        for (i, seg) in d.iter().enumerate() {
            assert!(seg.len() <= 46);
            let (h, p) = decode(seg).unwrap();
            assert_eq!(h.message_id, 42);
            assert_eq!(h.header_len, 16);
            assert_eq!(h.segment, Some(Segment { number: i as u16, last: i == 3 }));
            joined.extend_from_slice(p);
        }
        assert_eq!(joined, payload);
        // A message that fits goes whole, without the option.
        assert_eq!(decode(&encode(MediaType::Xml, 9, 43, b"<a/>", Some(46)).unwrap()[0]).unwrap().0.segment, None);
    }

    #[test]
    fn limits_of_the_header_fields_are_errors_not_truncation() {
        let big = vec![b'x'; 70_000];
        assert_eq!(encode(MediaType::Json, 1, 1, &big, None), Err(EncodeError::TooLarge { len: 70_000 }));
        assert_eq!(encode(MediaType::Json, 1, 1, &big, Some(16)), Err(EncodeError::SegmentTooSmall(16)));
        assert!(matches!(encode(MediaType::Json, 1, 1, &big, Some(17)), Err(EncodeError::TooManySegments { .. })));
    }

    #[test]
    fn malformed_datagrams_are_refused_with_their_cause() {
        assert_eq!(decode(&[0x21; 5]), Err(DecodeError::Short(5)));
        let mut d = encode(MediaType::Json, 1, 1, b"{}", None).unwrap().remove(0);
        d[0] = 0x41;
        assert_eq!(decode(&d), Err(DecodeError::Version(2)));
        d[0] = 0x21;
        d[1] = 11;
        assert_eq!(decode(&d), Err(DecodeError::HeaderLength(11)));
        d[1] = 12;
        d.push(0);
        assert!(matches!(decode(&d), Err(DecodeError::MessageLength { declared: 14, actual: 15 })));
        // An unknown option then the segmentation option: refused (it must come first).
        let mut o = vec![0x21, 20, 0, 20, 0, 0, 0, 1, 0, 0, 0, 1, 9, 4, 0, 0, 1, 4, 0, 1];
        assert_eq!(decode(&o), Err(DecodeError::SegmentOptionNotFirst));
        o[13] = 9;
        assert_eq!(decode(&o), Err(DecodeError::OptionLength(9)));
    }

    #[test]
    fn every_single_byte_change_and_truncation_of_a_segment_decodes_or_errs_without_panic() {
        let payload: Vec<u8> = (0..40u8).collect();
        let seg = encode(MediaType::Json, 5, 6, &payload, Some(32)).unwrap().remove(0);
        for i in 0..seg.len() {
            for v in [0u8, 1, 2, 4, 0x7f, 0x80, 0xff] {
                let mut d = seg.clone();
                d[i] = v;
                if let Ok((h, p)) = decode(&d) {
                    assert_eq!(usize::from(h.header_len) + p.len(), d.len());
                }
            }
        }
        for n in 0..seg.len() {
            assert!(decode(&seg[..n]).is_err(), "a truncated segment ({n} octets) is refused");
        }
    }
}

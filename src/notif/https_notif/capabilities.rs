//! The receiver's capabilities (draft-ietf-netconf-https-notif, "Discovering a Receiver's
//! Capabilities"): the GET the publisher sends and the parser of the answer, a
//! `receiver-capabilities` container with a `receiver-capability` leaf-list of URIs, in
//! JSON or XML. Pure: the body is peer input, so it is bounded and fuzzed
//! (`fuzz_targets/notif_decoders.rs`).

use quick_xml::events::Event;

use crate::notif::Encoding;

pub const CAP_ENCODING_JSON: &str = "urn:ietf:capability:https-notif-receiver:encoding:json";
pub const CAP_ENCODING_XML: &str = "urn:ietf:capability:https-notif-receiver:encoding:xml";
pub const CAP_SUB_NOTIF: &str = "urn:ietf:capability:https-notif-receiver:sub-notif";

/// The Accept of the GET: JSON is mandatory for a receiver to implement, so it goes first.
pub const ACCEPT: &str = "application/json, application/xml;q=0.5";
/// The largest capabilities body read (a handful of URIs is normal).
pub const MAX_BODY: usize = 64 * 1024;
/// The most capabilities kept from one answer.
pub const MAX_CAPABILITIES: usize = 256;

/// What a receiver said it supports. Capabilities this agent does not know are counted
/// and otherwise ignored, as the draft requires.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub json: bool,
    pub xml: bool,
    /// The receiver follows the RFC 8639 subscription state machine (it wants the
    /// subscription state notifications).
    pub sub_notif: bool,
    pub unknown: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    #[error("the capabilities body exceeds {MAX_BODY} octets")]
    TooLarge,
    #[error("capabilities in {0:?}: neither application/json nor application/xml")]
    MediaType(String),
    #[error("capabilities JSON: {0}")]
    Json(String),
    #[error("capabilities XML: {0}")]
    Xml(String),
    #[error("the body has no receiver-capabilities container")]
    NoContainer,
    #[error("more than {MAX_CAPABILITIES} capabilities")]
    TooMany,
    #[error("the receiver supports none of the encodings the subscription may use ({0})")]
    NoCommonEncoding(&'static str),
}

impl Capabilities {
    fn add(&mut self, uri: &str) -> Result<(), CapabilityError> {
        if self.unknown + usize::from(self.json) + usize::from(self.xml) + usize::from(self.sub_notif)
            >= MAX_CAPABILITIES
        {
            return Err(CapabilityError::TooMany);
        }
        match uri.trim() {
            CAP_ENCODING_JSON => self.json = true,
            CAP_ENCODING_XML => self.xml = true,
            CAP_SUB_NOTIF => self.sub_notif = true,
            _ => self.unknown += 1,
        }
        Ok(())
    }

    /// The encoding to send in: the configured one if the receiver takes it, else JSON,
    /// else XML (CBOR is not an HTTPS-notif encoding).
    pub fn choose(&self, configured: Option<Encoding>) -> Result<Encoding, CapabilityError> {
        match configured {
            Some(Encoding::Json) if self.json => Ok(Encoding::Json),
            Some(Encoding::Xml) if self.xml => Ok(Encoding::Xml),
            Some(Encoding::Json) => Err(CapabilityError::NoCommonEncoding("encode-json")),
            Some(Encoding::Xml) => Err(CapabilityError::NoCommonEncoding("encode-xml")),
            Some(Encoding::Cbor) => Err(CapabilityError::NoCommonEncoding("encode-cbor")),
            None if self.json => Ok(Encoding::Json),
            None if self.xml => Ok(Encoding::Xml),
            None => Err(CapabilityError::NoCommonEncoding("encode-json, encode-xml")),
        }
    }
}

/// The media type of a Content-Type value, lower-cased, without parameters.
fn essence(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Parses a capabilities answer by its Content-Type.
pub fn parse(content_type: &str, body: &[u8]) -> Result<Capabilities, CapabilityError> {
    if body.len() > MAX_BODY {
        return Err(CapabilityError::TooLarge);
    }
    match essence(content_type).as_str() {
        "application/json" | "application/yang-data+json" => parse_json(body),
        "application/xml" | "application/yang-data+xml" | "text/xml" => parse_xml(body),
        other => Err(CapabilityError::MediaType(crate::text::printable(other, 64))),
    }
}

/// `{"receiver-capabilities": {"receiver-capability": [...]}}`; the container may carry a
/// module prefix (the draft defines it outside any module, so both forms are seen).
fn parse_json(body: &[u8]) -> Result<Capabilities, CapabilityError> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| CapabilityError::Json(e.to_string()))?;
    let obj = v.as_object().ok_or(CapabilityError::NoContainer)?;
    let container = obj
        .iter()
        .find(|(k, _)| k.rsplit(':').next() == Some("receiver-capabilities"))
        .map(|(_, v)| v)
        .ok_or(CapabilityError::NoContainer)?;
    let mut caps = Capabilities::default();
    let list = container.as_object().and_then(|c| c.get("receiver-capability"));
    match list {
        None => {}
        Some(serde_json::Value::Array(items)) => {
            for item in items {
                let uri =
                    item.as_str().ok_or_else(|| CapabilityError::Json("receiver-capability: not a string".into()))?;
                caps.add(uri)?;
            }
        }
        Some(_) => return Err(CapabilityError::Json("receiver-capability: not a leaf-list (array)".into())),
    }
    Ok(caps)
}

/// `<receiver-capabilities><receiver-capability>URI</receiver-capability>...`, in any
/// namespace; other elements are skipped.
fn parse_xml(body: &[u8]) -> Result<Capabilities, CapabilityError> {
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut caps = Capabilities::default();
    let mut depth = 0usize;
    let mut in_container = false;
    let mut seen_container = false;
    let mut text: Option<String> = None;
    loop {
        match reader.read_event().map_err(|e| CapabilityError::Xml(e.to_string()))? {
            Event::Start(e) => {
                depth += 1;
                let local = e.local_name();
                if depth == 1 && local.as_ref() == "receiver-capabilities" {
                    in_container = true;
                    seen_container = true;
                } else if depth == 2 && in_container && local.as_ref() == "receiver-capability" {
                    text = Some(String::new());
                }
            }
            Event::Empty(e) if depth == 0 && e.local_name().as_ref() == "receiver-capabilities" => {
                seen_container = true;
            }
            Event::Text(t) => {
                if let Some(s) = text.as_mut() {
                    let t = t.xml10_content();
                    if s.len() + t.len() > MAX_BODY {
                        return Err(CapabilityError::TooLarge);
                    }
                    s.push_str(&t);
                }
            }
            Event::GeneralRef(r) => {
                // A reference inside the URI text (&amp;, &#x41;).
                let ch = match r.resolve_char_ref().map_err(|e| CapabilityError::Xml(e.to_string()))? {
                    Some(c) => c,
                    None => match &*r {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "apos" => '\'',
                        "quot" => '"',
                        other => {
                            return Err(CapabilityError::Xml(format!(
                                "undefined entity &{};",
                                crate::text::printable(other, 32)
                            )))
                        }
                    },
                };
                if let Some(s) = text.as_mut() {
                    s.push(ch);
                }
            }
            Event::DocType(_) => return Err(CapabilityError::Xml("DOCTYPE is not accepted".into())),
            Event::End(_) => {
                if depth == 2 {
                    if let Some(s) = text.take() {
                        caps.add(&s)?;
                    }
                }
                if depth == 1 {
                    in_container = false;
                }
                depth = depth.saturating_sub(1);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if depth != 0 {
        return Err(CapabilityError::Xml("the document ends inside an element".into()));
    }
    if !seen_container {
        return Err(CapabilityError::NoContainer);
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_example_answers_parse_in_json_and_xml() {
        let json = br#"{"receiver-capabilities": {"receiver-capability": [
            "urn:ietf:capability:https-notif-receiver:encoding:json",
            "urn:ietf:capability:https-notif-receiver:encoding:xml",
            "urn:ietf:capability:https-notif-receiver:sub-notif", "urn:example:custom"]}}"#;
        let c = parse("application/json", json).unwrap();
        assert_eq!(c, Capabilities { json: true, xml: true, sub_notif: true, unknown: 1 });
        let xml = b"<receiver-capabilities xmlns=\"urn:x\">\n  <receiver-capability>\n    urn:ietf:capability:https-notif-receiver:encoding:xml\n  </receiver-capability>\n</receiver-capabilities>";
        let c = parse("application/xml; charset=utf-8", xml).unwrap();
        assert_eq!(c, Capabilities { xml: true, ..Default::default() });
        assert_eq!(c.choose(None), Ok(Encoding::Xml));
        assert_eq!(c.choose(Some(Encoding::Json)), Err(CapabilityError::NoCommonEncoding("encode-json")));
    }

    #[test]
    fn json_is_preferred_and_prefixed_containers_are_accepted() {
        let body = br#"{"ietf-https-notif-transport:receiver-capabilities": {"receiver-capability": ["urn:ietf:capability:https-notif-receiver:encoding:xml", "urn:ietf:capability:https-notif-receiver:encoding:json"]}}"#;
        assert_eq!(parse("application/json", body).unwrap().choose(None), Ok(Encoding::Json));
    }

    #[test]
    fn bad_answers_are_errors_with_their_cause() {
        assert!(matches!(parse("text/html", b"<html/>"), Err(CapabilityError::MediaType(_))));
        assert!(matches!(parse("application/json", b"{"), Err(CapabilityError::Json(_))));
        assert_eq!(parse("application/json", b"{\"other\": {}}"), Err(CapabilityError::NoContainer));
        assert!(matches!(
            parse("application/json", br#"{"receiver-capabilities": {"receiver-capability": [1]}}"#),
            Err(CapabilityError::Json(_))
        ));
        assert_eq!(parse("application/xml", b"<other/>"), Err(CapabilityError::NoContainer));
        assert!(matches!(parse("application/xml", b"<a><b></a>"), Err(CapabilityError::Xml(_))));
        assert_eq!(parse("application/json", &vec![b' '; MAX_BODY + 1]), Err(CapabilityError::TooLarge));
        let many: Vec<String> = (0..MAX_CAPABILITIES + 1).map(|i| format!("\"urn:x:{i}\"")).collect();
        let body = format!("{{\"receiver-capabilities\": {{\"receiver-capability\": [{}]}}}}", many.join(","));
        assert_eq!(parse("application/json", body.as_bytes()), Err(CapabilityError::TooMany));
        // An empty container: valid, but no encoding to send in.
        let c = parse("application/xml", b"<receiver-capabilities/>").unwrap();
        assert!(c.choose(None).is_err());
    }

    #[test]
    fn every_truncation_of_an_answer_is_refused_without_panic() {
        let json = br#"{"receiver-capabilities": {"receiver-capability": ["urn:ietf:capability:https-notif-receiver:encoding:json"]}}"#;
        let xml = b"<receiver-capabilities><receiver-capability>urn:a&amp;b&#x41;</receiver-capability></receiver-capabilities>";
        for n in 0..json.len() {
            assert!(parse("application/json", &json[..n]).is_err());
        }
        for n in 0..xml.len() {
            assert!(parse("application/xml", &xml[..n]).is_err(), "truncated at {n}");
        }
        assert_eq!(parse("application/xml", xml).unwrap().unknown, 1);
    }
}

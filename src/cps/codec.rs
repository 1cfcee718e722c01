//! The three payload encodings of the C-PS REST interface (seed 004, Protocol Adapter: "JSON
//! or XML payloads"; Scalability Considerations: "compress metric payloads (e.g., using
//! gzip, CBOR …)"). Every body type of `wire.rs` goes through one serde model, so the three
//! carry exactly the same members (kebab-case names everywhere):
//!
//! - JSON (RFC 8259) with serde_json;
//! - XML with quick-xml's serde support: one element per member, a list as repeated
//!   elements, the root element named after the body (`metric-batch`, `ack`, …) in the
//!   namespace [`XML_NS`], which a decoder requires;
//! - CBOR (RFC 8949) with ciborium: a map with the same text keys.
//!
//! Pure; the decoders are bounded by the body size limit of the callers (`MAX_BODY`) and
//! ciborium's recursion limit, and fuzzed by `cps_wire`.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The namespace of every XML body.
pub const XML_NS: &str = "urn:cats-sma:cps:1";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Encoding {
    #[default]
    Json,
    Xml,
    Cbor,
}

impl Encoding {
    /// The YANG enum value (`cats-sma-types:encoding`).
    pub fn parse(s: &str) -> Option<Encoding> {
        match s {
            "json" => Some(Encoding::Json),
            "xml" => Some(Encoding::Xml),
            "cbor" => Some(Encoding::Cbor),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Xml => "application/xml",
            Encoding::Cbor => "application/cbor",
        }
    }

    /// From a Content-Type or Accept value (parameters such as `; charset=utf-8` ignored);
    /// `None` for anything else.
    pub fn from_media_type(v: &str) -> Option<Encoding> {
        let t = v.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match t.as_str() {
            "application/json" => Some(Encoding::Json),
            "application/xml" | "text/xml" => Some(Encoding::Xml),
            "application/cbor" => Some(Encoding::Cbor),
            _ => None,
        }
    }

    /// Encodes `v`; `root` names the XML root element.
    pub fn encode<T: Serialize>(self, root: &str, v: &T) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Json => serde_json::to_vec(v).map_err(|e| e.to_string()),
            Encoding::Cbor => {
                let mut out = Vec::new();
                ciborium::into_writer(v, &mut out).map_err(|e| e.to_string())?;
                Ok(out)
            }
            Encoding::Xml => {
                let mut body = String::new();
                let mut ser = quick_xml::se::Serializer::with_root(&mut body, Some(root)).map_err(|e| e.to_string())?;
                ser.expand_empty_elements(false);
                v.serialize(ser).map_err(|e| e.to_string())?;
                // The serializer writes `<root>` or `<root/>` first: the namespace goes on it.
                let open = format!("<{root}");
                let Some(rest) = body.strip_prefix(&open) else { return Err("XML without its root".into()) };
                Ok(format!("{open} xmlns=\"{XML_NS}\"{rest}").into_bytes())
            }
        }
    }

    /// Decodes a body; the error is a short printable reason.
    pub fn decode<T: DeserializeOwned>(self, root: &str, body: &[u8]) -> Result<T, String> {
        let bounded = |e: String| crate::text::printable(&e, 200);
        match self {
            Encoding::Json => serde_json::from_slice(body).map_err(|e| bounded(e.to_string())),
            Encoding::Cbor => ciborium::from_reader(body).map_err(|e| bounded(e.to_string())),
            Encoding::Xml => {
                let text = std::str::from_utf8(body).map_err(|e| format!("XML: {e}"))?;
                check_xml_root(text, root)?;
                quick_xml::de::from_str(text).map_err(|e| bounded(format!("XML: {e}")))
            }
        }
    }
}

/// The first element must be `root` in [`XML_NS`] (no prefix: the default namespace).
fn check_xml_root(text: &str, root: &str) -> Result<(), String> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(text);
    loop {
        match r.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) => {
                let name: &str = e.name().0;
                if name != root {
                    let got = name.to_owned();
                    return Err(crate::text::printable(&format!("XML: root element <{got}>, expected <{root}>"), 200));
                }
                let ns = e.attributes().flatten().find(|a| a.key.0 == "xmlns").map(|a| a.value.clone().into_owned());
                return match ns.as_deref() {
                    Some(XML_NS) => Ok(()),
                    _ => Err(format!("XML: <{root}> must be in namespace {XML_NS}")),
                };
            }
            Ok(Event::Eof) => return Err("XML: no element".into()),
            Ok(_) => {}
            Err(e) => return Err(crate::text::printable(&format!("XML: {e}"), 200)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types() {
        assert_eq!(Encoding::from_media_type("application/json; charset=utf-8"), Some(Encoding::Json));
        assert_eq!(Encoding::from_media_type("Application/XML"), Some(Encoding::Xml));
        assert_eq!(Encoding::from_media_type("application/cbor"), Some(Encoding::Cbor));
        assert_eq!(Encoding::from_media_type("text/plain"), None);
    }

    #[test]
    fn xml_needs_its_namespace_and_root() {
        let ok = format!("<ack xmlns=\"{XML_NS}\"><acked-sequence>5</acked-sequence></ack>");
        let a: crate::cps::wire::Ack = Encoding::Xml.decode("ack", ok.as_bytes()).unwrap();
        assert_eq!(a.acked_sequence, 5);
        let bare = "<ack><acked-sequence>5</acked-sequence></ack>";
        assert!(Encoding::Xml
            .decode::<crate::cps::wire::Ack>("ack", bare.as_bytes())
            .unwrap_err()
            .contains("namespace"));
        let other = format!("<nack xmlns=\"{XML_NS}\"/>");
        assert!(Encoding::Xml.decode::<crate::cps::wire::Ack>("ack", other.as_bytes()).is_err());
        assert!(Encoding::Xml.decode::<crate::cps::wire::Ack>("ack", b"\xff\xfe").is_err());
        assert!(Encoding::Cbor.decode::<crate::cps::wire::Ack>("ack", b"\xff").is_err());
    }
}

//! Media types (RFC 8040 section 5.2 and RFC 8072 section 2.1): which encoding a request
//! body uses (Content-Type) and which one the reply should use (Accept).

use yang2::data::DataFormat;

use super::error::Failure;
use crate::error::ErrorTag;

pub const YANG_DATA_JSON: &str = "application/yang-data+json";
pub const YANG_DATA_XML: &str = "application/yang-data+xml";
pub const YANG_PATCH_JSON: &str = "application/yang-patch+json";
pub const YANG_PATCH_XML: &str = "application/yang-patch+xml";

/// The two encodings of RFC 8040.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Xml,
}

impl Encoding {
    pub fn format(self) -> DataFormat {
        match self {
            Encoding::Json => DataFormat::JSON,
            Encoding::Xml => DataFormat::XML,
        }
    }
    pub fn data_type(self) -> &'static str {
        match self {
            Encoding::Json => YANG_DATA_JSON,
            Encoding::Xml => YANG_DATA_XML,
        }
    }
}

/// What a request body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Data(Encoding),
    Patch(Encoding),
}

fn essence(v: &str) -> String {
    v.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Reads Content-Type. Plain application/json and application/xml are accepted as the
/// yang-data types, as most clients send them.
pub fn content_type(header: Option<&str>) -> Result<BodyKind, Failure> {
    let Some(h) = header else {
        return Err(Failure::status(
            415,
            ErrorTag::InvalidValue,
            "a request body needs a Content-Type (application/yang-data+json or +xml)",
        ));
    };
    Ok(match essence(h).as_str() {
        YANG_DATA_JSON | "application/json" => BodyKind::Data(Encoding::Json),
        YANG_DATA_XML | "application/xml" | "text/xml" => BodyKind::Data(Encoding::Xml),
        YANG_PATCH_JSON => BodyKind::Patch(Encoding::Json),
        YANG_PATCH_XML => BodyKind::Patch(Encoding::Xml),
        other => {
            return Err(Failure::status(415, ErrorTag::InvalidValue, format!("unsupported media type \"{other}\"")))
        }
    })
}

/// Chooses the reply encoding from Accept (RFC 8040 section 5.2: without a usable Accept,
/// the request's own encoding, else JSON). `None` when Accept names only types we cannot
/// produce (406).
pub fn accept(header: Option<&str>, request: Option<Encoding>) -> Option<Encoding> {
    let fallback = request.unwrap_or(Encoding::Json);
    let Some(h) = header.filter(|h| !h.trim().is_empty()) else {
        return Some(fallback);
    };
    let mut best: Option<(f32, Encoding)> = None;
    let mut any = false;
    for item in h.split(',') {
        let mut parts = item.split(';');
        let ty = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").and_then(|v| v.trim().parse::<f32>().ok()))
            .next()
            .unwrap_or(1.0);
        if q <= 0.0 {
            continue;
        }
        let enc = match ty.as_str() {
            YANG_DATA_JSON | "application/json" => Some(Encoding::Json),
            YANG_DATA_XML | "application/xml" | "text/xml" => Some(Encoding::Xml),
            "*/*" | "application/*" => {
                any = true;
                Some(fallback)
            }
            // text/event-stream is chosen by the stream resource itself.
            "text/event-stream" => Some(fallback),
            _ => None,
        };
        if let Some(e) = enc {
            if best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, e));
            }
        }
    }
    match best {
        Some((_, e)) => Some(e),
        None if any => Some(fallback),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_and_content_type() {
        assert_eq!(accept(None, None), Some(Encoding::Json));
        assert_eq!(accept(None, Some(Encoding::Xml)), Some(Encoding::Xml));
        assert_eq!(accept(Some("application/yang-data+xml"), None), Some(Encoding::Xml));
        assert_eq!(
            accept(Some("application/yang-data+xml;q=0.5, application/yang-data+json"), None),
            Some(Encoding::Json)
        );
        assert_eq!(accept(Some("*/*"), Some(Encoding::Xml)), Some(Encoding::Xml));
        assert_eq!(accept(Some("image/png"), None), None);
        assert_eq!(
            content_type(Some("application/yang-data+json; charset=utf-8")).unwrap(),
            BodyKind::Data(Encoding::Json)
        );
        assert_eq!(content_type(Some("application/yang-patch+xml")).unwrap(), BodyKind::Patch(Encoding::Xml));
        assert_eq!(content_type(Some("text/plain")).unwrap_err().status, 415);
        assert_eq!(content_type(None).unwrap_err().status, 415);
    }
}

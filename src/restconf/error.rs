//! RFC 8040 section 7 errors: the status code and the `ietf-restconf:errors` body, made from
//! the same typed [`RpcError`]s the datastores raise for NETCONF. The status comes from
//! [`ErrorTag::http_status`] unless the RFC asks for another code of the tag's row (404 for
//! a missing resource, 405 for a method a resource lacks, 406/415 for media types, 412 for
//! a failed precondition).

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::media::Encoding;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::error::xml_path;
use crate::xml::escape_text;

pub const NS_RESTCONF: &str = "urn:ietf:params:xml:ns:yang:ietf-restconf";

/// A request that failed: the status and the errors to report.
#[derive(Debug)]
pub struct Failure {
    pub status: u16,
    pub errors: Vec<RpcError>,
    /// The methods the resource takes, for the `Allow` header every 405 carries (RFC 7231
    /// section 6.5.5).
    pub allow: Option<&'static str>,
}

impl Failure {
    /// A failure with an explicit status (one the RFC allows for the tag).
    pub fn status(status: u16, tag: ErrorTag, message: impl Into<String>) -> Failure {
        Failure { status, errors: vec![RpcError::protocol(tag, message)], allow: None }
    }
    /// 400 with the given tag (protocol layer).
    pub fn bad(tag: ErrorTag, message: impl Into<String>) -> Failure {
        Failure::status(tag.http_status(), tag, message)
    }
    /// 404: the target resource does not exist (RFC 8040 section 7: invalid-value).
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure { status: 404, errors: vec![RpcError::application(ErrorTag::InvalidValue, message)], allow: None }
    }
    /// 405: the resource exists but does not take this method; `allow` lists those it
    /// takes (the `Allow` header).
    pub fn method(allow: &'static str, message: impl Into<String>) -> Failure {
        Failure { allow: Some(allow), ..Failure::status(405, ErrorTag::OperationNotSupported, message) }
    }
    pub fn with_path(mut self, path: &str) -> Failure {
        if let Some(e) = self.errors.first_mut() {
            if e.path.is_none() {
                e.path = Some(path.to_owned());
            }
        }
        self
    }
}

impl From<RpcError> for Failure {
    fn from(e: RpcError) -> Failure {
        Failure { status: e.tag.http_status(), errors: vec![e], allow: None }
    }
}

impl From<Vec<RpcError>> for Failure {
    fn from(errors: Vec<RpcError>) -> Failure {
        let status = errors.first().map(|e| e.tag.http_status()).unwrap_or(500);
        Failure { status, errors, allow: None }
    }
}

/// The `errors` body in the chosen encoding.
pub fn render(errors: &[RpcError], enc: Encoding) -> String {
    match enc {
        Encoding::Json => render_json(errors),
        Encoding::Xml => render_xml(errors),
    }
}

fn render_json(errors: &[RpcError]) -> String {
    json!({ "ietf-restconf:errors": { "error": error_list_json(errors) } }).to_string()
}

/// The `error` list entries as JSON (also used inside yang-patch-status).
pub fn error_list_json(errors: &[RpcError]) -> Vec<Value> {
    errors
        .iter()
        .map(|e| {
            let mut m = Map::new();
            m.insert("error-type".into(), json!(e.error_type.as_str()));
            m.insert("error-tag".into(), json!(e.tag.as_str()));
            if let Some(t) = &e.app_tag {
                m.insert("error-app-tag".into(), json!(t));
            }
            if let Some(p) = &e.path {
                m.insert("error-path".into(), json!(p));
            }
            m.insert("error-message".into(), json!(e.message));
            let mut info = Map::new();
            if let Some(a) = &e.bad_attribute {
                info.insert("bad-attribute".into(), json!(a));
            }
            if let Some(b) = &e.bad_element {
                info.insert("bad-element".into(), json!(b));
            }
            if let Some(n) = &e.bad_namespace {
                info.insert("bad-namespace".into(), json!(n));
            }
            if let Some(s) = e.session_id {
                info.insert("session-id".into(), json!(s));
            }
            if !info.is_empty() {
                m.insert("error-info".into(), Value::Object(info));
            }
            Value::Object(m)
        })
        .collect()
}

fn render_xml(errors: &[RpcError]) -> String {
    format!("<errors xmlns=\"{NS_RESTCONF}\">{}</errors>", error_list_xml(errors))
}

/// The `<error>` elements (also used inside yang-patch-status).
pub fn error_list_xml(errors: &[RpcError]) -> String {
    let mut out = String::new();
    for e in errors {
        out.push_str("<error>");
        let _ = write!(out, "<error-type>{}</error-type>", e.error_type.as_str());
        let _ = write!(out, "<error-tag>{}</error-tag>", e.tag.as_str());
        if let Some(t) = &e.app_tag {
            let _ = write!(out, "<error-app-tag>{}</error-app-tag>", escape_text(t));
        }
        if let Some(p) = &e.path {
            let (xpath, decls) = xml_path(p);
            let _ = write!(out, "<error-path{decls}>{}</error-path>", escape_text(&xpath));
        }
        let _ = write!(out, "<error-message>{}</error-message>", escape_text(&e.message));
        crate::mgmt::error::error_info_xml(e, &mut out);
        out.push_str("</error>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_body_in_both_encodings() {
        let e = RpcError::application(ErrorTag::DataExists, "already there")
            .with_path("/cats-sma:cats-sma/scis/sci[csci-id='a']");
        let j: Value = serde_json::from_str(&render(std::slice::from_ref(&e), Encoding::Json)).unwrap();
        let first = &j["ietf-restconf:errors"]["error"][0];
        assert_eq!(first["error-tag"], "data-exists");
        assert_eq!(first["error-type"], "application");
        assert_eq!(first["error-path"], "/cats-sma:cats-sma/scis/sci[csci-id='a']");
        let x = render(&[e], Encoding::Xml);
        assert!(x.starts_with("<errors xmlns=\"urn:ietf:params:xml:ns:yang:ietf-restconf\">"), "{x}");
        assert!(x.contains("<error-tag>data-exists</error-tag>"), "{x}");
        assert!(x.contains("xmlns:cats-sma=\"urn:cats-sma:yang:cats-sma\""), "{x}");
        let f: Failure = RpcError::protocol(ErrorTag::InUse, "locked").into();
        assert_eq!(f.status, 409);
    }
}

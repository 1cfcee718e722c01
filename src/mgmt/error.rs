//! Encoding rpc-errors (RFC 6241 section 4.3) from the shared typed errors.

use std::fmt::Write as _;

use super::ns::NS_BASE;
use crate::error::{ErrorTag, ErrorType, RpcError};
use crate::xml::escape_text;

/// One `<rpc-error>` element. The error-path is converted from libyang's module-prefixed
/// form to XML prefixes declared on the element itself.
pub fn rpc_error_xml(e: &RpcError, out: &mut String) {
    out.push_str("<rpc-error>");
    let _ = write!(out, "<error-type>{}</error-type>", e.error_type.as_str());
    let _ = write!(out, "<error-tag>{}</error-tag>", e.tag.as_str());
    out.push_str("<error-severity>error</error-severity>");
    if let Some(t) = &e.app_tag {
        let _ = write!(out, "<error-app-tag>{}</error-app-tag>", escape_text(t));
    }
    if let Some(p) = &e.path {
        let (xpath, decls) = xml_path(p);
        let _ = write!(out, "<error-path{decls}>{}</error-path>", escape_text(&xpath));
    }
    let _ = write!(out, "<error-message xml:lang=\"en\">{}</error-message>", escape_text(&e.message));
    error_info_xml(e, out);
    out.push_str("</rpc-error>");
}

/// The `<error-info>` element of an error (RFC 6241 Appendix A; RFC 8040 section 7.1 uses
/// the same content), if it has any.
pub fn error_info_xml(e: &RpcError, out: &mut String) {
    let mut info = String::new();
    if let Some(a) = &e.bad_attribute {
        let _ = write!(info, "<bad-attribute>{}</bad-attribute>", escape_text(a));
    }
    if let Some(b) = &e.bad_element {
        let _ = write!(info, "<bad-element>{}</bad-element>", escape_text(b));
    }
    if let Some(n) = &e.bad_namespace {
        let _ = write!(info, "<bad-namespace>{}</bad-namespace>", escape_text(n));
    }
    if let Some(s) = e.session_id {
        let _ = write!(info, "<session-id>{s}</session-id>");
    }
    if !info.is_empty() {
        let _ = write!(out, "<error-info>{info}</error-info>");
    }
}

/// `/cats-sma:cats-sma/scis` → (`/cats-sma:cats-sma/cats-sma:scis`, ` xmlns:cats-sma="…"`):
/// every step gets the prefix of its module, and each module name used becomes a prefix
/// bound to that module's namespace.
pub fn xml_path(path: &str) -> (String, String) {
    let ctx = crate::yang::context();
    let mut out = String::with_capacity(path.len() + 32);
    let mut modules: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    let mut depth = 0;
    let mut quote: Option<char> = None;
    let mut seg_start = true;
    let mut chars = path.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), _) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '[') => {
                depth += 1;
                seg_start = true;
                out.push(c);
            }
            (None, ']') => {
                depth -= 1;
                out.push(c);
            }
            (None, '/') => {
                seg_start = true;
                out.push(c);
            }
            (None, _) if seg_start && (c.is_alphabetic() || c == '_') => {
                seg_start = false;
                // Read the whole name (with an optional module prefix).
                let rest = &path[i..];
                let len = rest
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '-' || ch == '_' || ch == '.' || ch == ':'))
                    .unwrap_or(rest.len());
                let name = &rest[..len];
                for _ in 1..name.chars().count() {
                    chars.next();
                }
                let (module, local) = match name.split_once(':') {
                    Some((m, l)) => (Some(m.to_owned()), l),
                    None => (None, name),
                };
                if depth == 0 {
                    if let Some(m) = module {
                        current = Some(m);
                    }
                }
                let m = if depth == 0 {
                    current.clone()
                } else {
                    name.split_once(':').map(|(m, _)| m.to_owned()).or(current.clone())
                };
                match m {
                    Some(m) => {
                        if !modules.contains(&m) {
                            modules.push(m.clone());
                        }
                        let _ = write!(out, "{m}:{local}");
                    }
                    None => out.push_str(local),
                }
            }
            (None, c) => {
                if !c.is_whitespace() && c != '=' {
                    seg_start = false;
                }
                out.push(c);
            }
        }
    }
    let mut decls = String::new();
    for m in modules {
        if let Some(module) = ctx.get_module_latest(&m) {
            let _ = write!(decls, " xmlns:{m}=\"{}\"", module.namespace());
        }
    }
    (out, decls)
}

/// A complete `<rpc-reply>` carrying errors.
pub fn reply_errors(attrs: &str, errors: &[RpcError]) -> String {
    let mut out = format!("<rpc-reply xmlns=\"{NS_BASE}\"{attrs}>");
    for e in errors {
        rpc_error_xml(e, &mut out);
    }
    out.push_str("</rpc-reply>");
    out
}

/// Content that cannot be extracted within the message's own size (RFC 6241 Appendix A:
/// too-big, "the request is too large for the implementation to handle").
pub fn too_big(e: crate::xml::XmlError) -> RpcError {
    RpcError::new(ErrorTag::TooBig, ErrorType::Rpc, e.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorTag;

    #[test]
    fn error_path_gets_xml_prefixes() {
        let (p, d) = xml_path("/cats-sma:cats-sma/scis/sci[csci-id='a/b']/cats-sma-policy:x");
        assert_eq!(p, "/cats-sma:cats-sma/cats-sma:scis/cats-sma:sci[cats-sma:csci-id='a/b']/cats-sma-policy:x");
        assert!(d.contains("xmlns:cats-sma=\"urn:cats-sma:yang:cats-sma\""));
    }

    #[test]
    fn rpc_error_has_appendix_a_fields() {
        let e = RpcError::protocol(ErrorTag::LockDenied, "locked <by> 7").with_session_id(7);
        let mut s = String::new();
        rpc_error_xml(&e, &mut s);
        assert!(s.contains("<error-tag>lock-denied</error-tag>"));
        assert!(s.contains("<error-type>protocol</error-type>"));
        assert!(s.contains("<session-id>7</session-id>"));
        assert!(s.contains("locked &lt;by&gt; 7"));
    }
}

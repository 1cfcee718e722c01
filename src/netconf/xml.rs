//! A small namespace-aware XML element tree over one received message, built with
//! quick-xml. Elements remember their byte span in the message, so configuration content
//! (an edit-config `<config>`, possibly megabytes) is handed to libyang as the original text
//! with its in-scope namespace declarations, never rebuilt node by node.

use std::ops::Range;
use std::sync::Arc;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Namespace declarations in scope: a chain of frames, one per element that declares any.
#[derive(Debug, Default)]
pub struct Scope {
    decls: Vec<(Option<String>, String)>,
    parent: Option<Arc<Scope>>,
}

impl Scope {
    /// Resolves a prefix (None = the default namespace).
    pub fn resolve(&self, prefix: Option<&str>) -> Option<&str> {
        let mut s = Some(self);
        while let Some(scope) = s {
            if let Some((_, uri)) = scope.decls.iter().rev().find(|(p, _)| p.as_deref() == prefix) {
                return Some(uri.as_str()).filter(|u| !u.is_empty());
            }
            s = scope.parent.as_deref();
        }
        if prefix == Some("xml") {
            return Some("http://www.w3.org/XML/1998/namespace");
        }
        None
    }

    /// Every binding in scope, innermost wins.
    pub fn bindings(&self) -> Vec<(Option<String>, String)> {
        let mut out: Vec<(Option<String>, String)> = Vec::new();
        let mut s = Some(self);
        while let Some(scope) = s {
            for (p, u) in scope.decls.iter().rev() {
                if !out.iter().any(|(q, _)| q == p) {
                    out.push((p.clone(), u.clone()));
                }
            }
            s = scope.parent.as_deref();
        }
        out
    }
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub ns: Option<String>,
    pub prefix: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone)]
pub struct Element {
    pub ns: Option<String>,
    pub prefix: Option<String>,
    pub name: String,
    /// Attributes other than namespace declarations.
    pub attrs: Vec<Attr>,
    pub children: Vec<Element>,
    /// Direct character content, entity references resolved.
    pub text: String,
    /// The whole element in the source message.
    pub span: Range<usize>,
    /// The namespaces in scope at this element (including its own declarations).
    pub scope: Arc<Scope>,
    /// Prefixes this element declares itself.
    pub own_prefixes: Vec<Option<String>>,
}

/// Why a message is not well-formed XML (answered with malformed-message).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct XmlError(pub String);

impl Element {
    pub fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    pub fn child(&self, ns: &str, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.is(ns, name))
    }

    /// A parameter of a base NETCONF operation: in the base namespace or, as many clients
    /// send it (ncclient's unqualified `<config>`), in no namespace.
    pub fn param(&self, name: &str) -> Option<&Element> {
        self.children
            .iter()
            .find(|c| c.name == name && matches!(c.ns.as_deref(), None | Some("") | Some(crate::netconf::NS_BASE)))
    }

    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|a| a.name == name && a.ns.is_none()).map(|a| a.value.as_str())
    }

    pub fn attr_ns(&self, ns: &str, name: &str) -> Option<&str> {
        self.attrs.iter().find(|a| a.name == name && a.ns.as_deref() == Some(ns)).map(|a| a.value.as_str())
    }

    /// The text trimmed of surrounding whitespace.
    pub fn trimmed(&self) -> &str {
        self.text.trim()
    }

    /// This element's source text with every in-scope namespace declaration it does not
    /// make itself added to its start tag, so it parses on its own.
    pub fn standalone_text(&self, src: &str) -> String {
        let raw = &src[self.span.clone()];
        let qname_len =
            raw[1..].find(|c: char| c.is_whitespace() || c == '>' || c == '/').map(|i| i + 1).unwrap_or(raw.len());
        let mut out = String::with_capacity(raw.len() + 128);
        out.push_str(&raw[..qname_len]);
        for (p, uri) in self.scope.bindings() {
            if self.own_prefixes.contains(&p) {
                continue;
            }
            match p {
                Some(p) => out.push_str(&format!(" xmlns:{p}=\"{}\"", escape_attr(&uri))),
                None => out.push_str(&format!(" xmlns=\"{}\"", escape_attr(&uri))),
            }
        }
        out.push_str(&raw[qname_len..]);
        out
    }

    /// The concatenated standalone text of all children (the content of `<config>`).
    pub fn children_text(&self, src: &str) -> String {
        self.children.iter().map(|c| c.standalone_text(src)).collect()
    }
}

/// Parses a message into its root element. No DOCTYPE, one root, well-formed.
pub fn parse(src: &str) -> Result<Element, XmlError> {
    let mut reader = Reader::from_str(src);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let top = Arc::new(Scope::default());
    loop {
        let start = reader.buffer_position() as usize;
        let ev = reader.read_event().map_err(|e| XmlError(format!("at byte {}: {e}", reader.error_position())))?;
        let end = reader.buffer_position() as usize;
        match ev {
            Event::Start(e) | Event::Empty(e) if root.is_some() => {
                let _ = e;
                return Err(XmlError("content after the root element".into()));
            }
            Event::Start(ref e) => {
                let parent_scope = stack.last().map(|p| p.scope.clone()).unwrap_or_else(|| top.clone());
                stack.push(start_element(e, start, parent_scope)?);
            }
            Event::Empty(ref e) => {
                let parent_scope = stack.last().map(|p| p.scope.clone()).unwrap_or_else(|| top.clone());
                let mut el = start_element(e, start, parent_scope)?;
                el.span = start..end;
                close(&mut stack, &mut root, el);
            }
            Event::End(_) => {
                let mut el = stack.pop().ok_or_else(|| XmlError("unbalanced end tag".into()))?;
                el.span.end = end;
                close(&mut stack, &mut root, el);
            }
            Event::Text(t) => {
                let text = t.xml10_content();
                match stack.last_mut() {
                    Some(el) => el.text.push_str(&text),
                    None if text.trim().is_empty() => {}
                    None => return Err(XmlError("text outside the root element".into())),
                }
            }
            Event::CData(c) => {
                let s: &str = &c;
                match stack.last_mut() {
                    Some(el) => el.text.push_str(s),
                    None => return Err(XmlError("CDATA outside the root element".into())),
                }
            }
            Event::GeneralRef(r) => {
                let ch = match r.resolve_char_ref().map_err(|e| XmlError(e.to_string()))? {
                    Some(c) => c,
                    None => match &*r {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "apos" => '\'',
                        "quot" => '"',
                        other => return Err(XmlError(format!("undefined entity &{other};"))),
                    },
                };
                match stack.last_mut() {
                    Some(el) => el.text.push(ch),
                    None => return Err(XmlError("reference outside the root element".into())),
                }
            }
            Event::DocType(_) => return Err(XmlError("DOCTYPE is not allowed in NETCONF messages".into())),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(XmlError(format!(
            "element <{}> is not closed",
            stack.last().map(|e| e.name.as_str()).unwrap_or("")
        )));
    }
    root.ok_or_else(|| XmlError("no root element".into()))
}

fn close(stack: &mut [Element], root: &mut Option<Element>, el: Element) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(el),
        None => *root = Some(el),
    }
}

fn split_qname(q: &[u8]) -> Result<(Option<String>, String), XmlError> {
    let s = std::str::from_utf8(q).map_err(|_| XmlError("name is not UTF-8".into()))?;
    Ok(match s.split_once(':') {
        Some((p, l)) => (Some(p.to_owned()), l.to_owned()),
        None => (None, s.to_owned()),
    })
}

fn start_element(e: &BytesStart<'_>, start: usize, parent: Arc<Scope>) -> Result<Element, XmlError> {
    let (prefix, name) = split_qname(e.name().as_ref().as_bytes())?;
    let mut decls = Vec::new();
    let mut raw_attrs = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(|err| XmlError(format!("bad attribute: {err}")))?;
        let key: &str = a.key.as_ref();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|err| XmlError(format!("bad attribute value: {err}")))?
            .into_owned();
        if key == "xmlns" {
            decls.push((None, value));
        } else if let Some(p) = key.strip_prefix("xmlns:") {
            decls.push((Some(p.to_owned()), value));
        } else {
            raw_attrs.push((key.to_owned(), value));
        }
    }
    let own_prefixes = decls.iter().map(|(p, _)| p.clone()).collect();
    let scope = if decls.is_empty() { parent } else { Arc::new(Scope { decls, parent: Some(parent) }) };
    let ns = scope.resolve(prefix.as_deref()).map(str::to_owned);
    if prefix.is_some() && ns.is_none() {
        return Err(XmlError(format!("undeclared namespace prefix \"{}\"", prefix.unwrap_or_default())));
    }
    let mut attrs = Vec::with_capacity(raw_attrs.len());
    for (key, value) in raw_attrs {
        let (p, n) = split_qname(key.as_bytes())?;
        // Unprefixed attributes are in no namespace (XML Namespaces 6.2).
        let ans = match &p {
            Some(p) => Some(
                scope
                    .resolve(Some(p))
                    .ok_or_else(|| XmlError(format!("undeclared namespace prefix \"{p}\"")))?
                    .to_owned(),
            ),
            None => None,
        };
        attrs.push(Attr { ns: ans, prefix: p, name: n, value });
    }
    Ok(Element {
        ns,
        prefix,
        name,
        attrs,
        children: Vec::new(),
        text: String::new(),
        span: start..start,
        scope,
        own_prefixes,
    })
}

/// Escapes text content.
pub fn escape_text(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['<', '>', '&']) {
        return s.into();
    }
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").into()
}

/// Escapes an attribute value (double-quoted).
pub fn escape_attr(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['<', '>', '&', '"']) {
        return s.into();
    }
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_spans_and_standalone_children() {
        let src = r#"<rpc xmlns="urn:ietf:params:xml:ns:netconf:base:1.0" xmlns:p="urn:x" message-id="1"><edit-config><config><p:a p:op="x">t&amp;<b/></p:a><c xmlns="urn:y"/></config></edit-config></rpc>"#;
        let root = parse(src).unwrap();
        assert!(root.is("urn:ietf:params:xml:ns:netconf:base:1.0", "rpc"));
        assert_eq!(root.attr("message-id"), Some("1"));
        let config = &root.children[0].children[0];
        let a = &config.children[0];
        assert_eq!(a.ns.as_deref(), Some("urn:x"));
        assert_eq!(a.attr_ns("urn:x", "op"), Some("x"));
        assert_eq!(a.text, "t&");
        assert_eq!(a.children[0].ns.as_deref(), Some("urn:ietf:params:xml:ns:netconf:base:1.0"));
        let text = config.children_text(src);
        assert!(text.starts_with("<p:a xmlns:p=\"urn:x\""), "{text}");
        let c = &text[text.find("<c ").unwrap()..];
        assert!(
            c.contains("xmlns=\"urn:y\"") && c.matches("xmlns=").count() == 1,
            "own default namespace kept, not duplicated: {c}"
        );
        // The standalone text parses on its own.
        parse(&a.standalone_text(src)).unwrap();
    }

    #[test]
    fn malformed_inputs_are_errors() {
        for bad in
            ["<a>", "<a></b>", "<a/><b/>", "<!DOCTYPE a><a/>", "<p:a/>", "<a>&foo;</a>", "text", "<a x='1' x='2'/>"]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}

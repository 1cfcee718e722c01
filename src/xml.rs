//! A small namespace-aware XML element tree over one received message, built with
//! quick-xml. Elements remember their byte span in the message, so configuration content
//! (an edit-config `<config>`, possibly megabytes) is handed to libyang as the original text
//! with its in-scope namespace declarations, never rebuilt node by node.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{PrefixDeclaration, QName, ResolveResult};
use quick_xml::NsReader;

pub use crate::config::message_limits::MessageLimits as XmlLimits;

const NS_XML: &str = "http://www.w3.org/XML/1998/namespace";

/// The namespace bindings in scope at an element, one per prefix (None = the default
/// namespace), for what quick-xml cannot resolve while reading: prefixes inside content
/// (identityrefs, XPath expressions) and the declarations configuration content needs to
/// stand alone. Elements share one snapshot until a declaration changes the bindings.
#[derive(Debug, Default)]
pub struct Scope {
    bindings: Vec<(Option<String>, String)>,
}

impl Scope {
    /// Resolves a prefix (None = the default namespace).
    pub fn resolve(&self, prefix: Option<&str>) -> Option<&str> {
        if prefix == Some("xml") {
            return Some(NS_XML);
        }
        self.bindings.iter().find(|(p, _)| p.as_deref() == prefix).map(|(_, u)| u.as_str())
    }

    /// Every binding in scope.
    pub fn bindings(&self) -> &[(Option<String>, String)] {
        &self.bindings
    }

    /// Whether declaring `decls` on an element in this scope would change nothing.
    fn unchanged_by(&self, decls: &[(Option<String>, String)]) -> bool {
        decls.iter().all(|(p, u)| match self.resolve(p.as_deref()) {
            Some(v) => v == u,
            None => u.is_empty(),
        })
    }

    /// This scope with `decls` applied (an empty URI undeclares).
    fn with(&self, decls: &[(Option<String>, String)]) -> Scope {
        let mut bindings: Vec<(Option<String>, String)> =
            self.bindings.iter().filter(|(p, _)| !decls.iter().any(|(q, _)| q == p)).cloned().collect();
        for (p, u) in decls {
            if !u.is_empty() && !bindings.iter().any(|(q, _)| q == p) {
                bindings.push((p.clone(), u.clone()));
            }
        }
        Scope { bindings }
    }
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub ns: Option<String>,
    pub prefix: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug)]
pub struct Element {
    /// The namespace, shared by every element of the message that has it.
    pub ns: Option<Arc<str>>,
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

impl Element {
    /// The element alone, without its children.
    fn shallow(&self) -> Element {
        Element {
            ns: self.ns.clone(),
            prefix: self.prefix.clone(),
            name: self.name.clone(),
            attrs: self.attrs.clone(),
            children: Vec::with_capacity(self.children.len()),
            text: self.text.clone(),
            span: self.span.clone(),
            scope: self.scope.clone(),
            own_prefixes: self.own_prefixes.clone(),
        }
    }
}

/// Cloned with an explicit stack: a tree as deep as a message allows never recurses.
impl Clone for Element {
    fn clone(&self) -> Element {
        let mut stack: Vec<(&Element, usize, Element)> = vec![(self, 0, self.shallow())];
        loop {
            let top = stack.last_mut().expect("the stack holds the root until it is returned");
            let src = top.0;
            if top.1 < src.children.len() {
                let child = &src.children[top.1];
                top.1 += 1;
                stack.push((child, 0, child.shallow()));
                continue;
            }
            let (_, _, done) = stack.pop().expect("non-empty");
            match stack.last_mut() {
                Some(parent) => parent.2.children.push(done),
                None => return done,
            }
        }
    }
}

thread_local! {
    /// How many Element drops are in progress on this thread's stack.
    static DROP_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Nesting past which a drop continues with an explicit stack instead of the call stack.
const RECURSIVE_DROP_LEVELS: u32 = 64;

/// Dropped recursively for the first levels (nothing moves: as fast as the derived drop),
/// then with an explicit stack, so a tree of any depth drops in bounded stack.
impl Drop for Element {
    fn drop(&mut self) {
        if self.children.is_empty() {
            return;
        }
        let children = std::mem::take(&mut self.children);
        DROP_DEPTH.with(|depth| {
            let d = depth.get();
            if d < RECURSIVE_DROP_LEVELS {
                depth.set(d + 1);
                drop(children);
                depth.set(d);
            } else {
                let mut pending = children;
                while let Some(mut el) = pending.pop() {
                    pending.append(&mut el.children);
                }
            }
        });
    }
}

/// Why a message is refused: not well-formed XML, or over one of the [`XmlLimits`]
/// (both answered with malformed-message, RFC 6241 Appendix A / RFC 8040 400).
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
            .find(|c| c.name == name && matches!(c.ns.as_deref(), None | Some("") | Some(crate::mgmt::ns::NS_BASE)))
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

    /// This element's source text with the in-scope namespace declarations it uses but
    /// does not make itself added to its start tag, so it parses on its own.
    pub fn standalone_text(&self, src: &str) -> Result<String, XmlError> {
        let mut out = Standalone::new(&self.scope, src.len(), self.span.len());
        out.push(self, src)?;
        Ok(out.text)
    }

    /// The concatenated standalone text of all children (the content of `<config>`), in
    /// time linear in the message: the bindings in scope are looked up once, and each child
    /// gets only those whose prefix its own text mentions.
    pub fn children_text(&self, src: &str) -> Result<String, XmlError> {
        let mut out = Standalone::new(&self.scope, src.len(), self.span.len());
        for c in &self.children {
            out.push(c, src)?;
        }
        Ok(out.text)
    }
}

/// Builds standalone element text; the declarations it adds never exceed the size of the
/// message (plus a little), so no message can make it amplify.
struct Standalone<'s> {
    bindings: HashMap<Option<&'s str>, &'s str>,
    text: String,
    budget: usize,
}

impl<'s> Standalone<'s> {
    fn new(scope: &'s Scope, message_len: usize, content_len: usize) -> Self {
        let bindings = scope.bindings.iter().map(|(p, u)| (p.as_deref(), u.as_str())).collect();
        Standalone { bindings, text: String::with_capacity(content_len + 128), budget: message_len + 64 * 1024 }
    }

    fn push(&mut self, el: &Element, src: &str) -> Result<(), XmlError> {
        let raw = &src[el.span.clone()];
        let qname_len =
            raw[1..].find(|c: char| c.is_whitespace() || c == '>' || c == '/').map(|i| i + 1).unwrap_or(raw.len());
        let before = self.text.len();
        self.text.push_str(&raw[..qname_len]);
        let mut wanted: Vec<Option<&str>> = vec![None];
        let mut seen: HashSet<&str> = HashSet::new();
        for p in prefix_candidates(raw) {
            if self.bindings.contains_key(&Some(p)) && seen.insert(p) {
                wanted.push(Some(p));
            }
        }
        for p in wanted {
            if el.own_prefixes.iter().any(|o| o.as_deref() == p) {
                continue;
            }
            let Some(uri) = self.bindings.get(&p) else { continue };
            match p {
                Some(p) => {
                    self.text.push_str(" xmlns:");
                    self.text.push_str(p);
                    self.text.push_str("=\"");
                }
                None => self.text.push_str(" xmlns=\""),
            }
            self.text.push_str(&escape_attr(uri));
            self.text.push('"');
        }
        let added = self.text.len() - before - qname_len;
        self.budget = self.budget.checked_sub(added).ok_or_else(|| {
            XmlError("the namespace declarations the content needs exceed the size of the message".into())
        })?;
        self.text.push_str(&raw[qname_len..]);
        Ok(())
    }
}

/// Every `name:` in `raw` that could be a namespace prefix (element and attribute names,
/// and prefixes inside values such as identityrefs and instance-identifiers): found from
/// each `:` (a memchr search), so the scan costs little more than reading the text.
fn prefix_candidates(raw: &str) -> impl Iterator<Item = &str> {
    let b = raw.as_bytes();
    let is_name = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.') || c >= 0x80;
    raw.match_indices(':').filter_map(move |(colon, _)| {
        let start = b[..colon].iter().rposition(|&c| !is_name(c)).map_or(0, |i| i + 1);
        (start < colon && raw.is_char_boundary(start)).then(|| &raw[start..colon])
    })
}

/// Whether `c` is an XML 1.0 `Char` (surrogates cannot occur in a `char`).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// The byte offset of the first character XML 1.0 does not allow, if any.
fn forbidden_char(src: &str) -> Option<usize> {
    let b = src.as_bytes();
    // Fast path: the C0 controls are single bytes; U+FFFE and U+FFFF are EF BF BE / EF BF BF.
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r') {
            return Some(i);
        }
        if c == 0xEF && b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF)) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Parses a message into its root element with the default [`XmlLimits`]. No DOCTYPE, one
/// root, well-formed.
pub fn parse(src: &str) -> Result<Element, XmlError> {
    parse_with(src, &XmlLimits::default())
}

/// Parses a message into its root element, refusing it as soon as it exceeds `limits`.
/// Namespace resolution is quick-xml's ([`NsReader`]); nothing here recurses.
pub fn parse_with(src: &str, limits: &XmlLimits) -> Result<Element, XmlError> {
    parse_in(src, limits, false)
}

/// Parses a NETCONF `<rpc>` as [`parse_with`] does, except that configuration content —
/// the `<config>` of edit-config and edit-data, and of the `<source>` of copy-config and
/// validate — is built down to its top-level elements only: what is inside them is read
/// and checked as everywhere else (well-formed, within `limits`, every prefix bound, every
/// reference defined) but not built, since it reaches libyang as the message's own text
/// ([`Element::children_text`]). A 100 000-entry edit-config is not also a 300 000-element
/// tree built and freed here. Spans and scopes of what is built are as [`parse_with`]'s.
pub fn parse_rpc(src: &str, limits: &XmlLimits) -> Result<Element, XmlError> {
    parse_in(src, limits, true)
}

fn parse_in(src: &str, limits: &XmlLimits, skim_config: bool) -> Result<Element, XmlError> {
    // XML 1.0 section 2.2: characters outside `Char` make a message not well-formed. They
    // are refused here, raw or as references, because what follows hands names, values and
    // namespaces to libyang through C strings (a NUL panicked in yang2: fuzz finding).
    if let Some(at) = forbidden_char(src) {
        return Err(XmlError(format!("at byte {at}: a character XML 1.0 does not allow")));
    }
    let mut reader = NsReader::from_str(src);
    reader.config_mut().check_end_names = true;
    reader.resolver_mut().set_max_namespace_bindings(limits.max_namespace_declarations);
    let mut p = Parser {
        limits,
        stack: Vec::new(),
        root: None,
        top: Arc::new(Scope::default()),
        elements: 0,
        decls: 0,
        namespaces: HashMap::new(),
        last_ns: None,
        skim_config,
        config_at: None,
        skimmed: Vec::new(),
    };
    loop {
        let start = reader.buffer_position() as usize;
        let ev = reader.read_event().map_err(|e| XmlError(format!("at byte {}: {e}", reader.error_position())))?;
        let end = reader.buffer_position() as usize;
        let skimming = !p.skimmed.is_empty();
        match ev {
            Event::Start(_) | Event::Empty(_) if p.root.is_some() => {
                return Err(XmlError("content after the root element".into()));
            }
            Event::Start(ref e) if skimming || p.skims_children() => {
                let scope = p.skim_element(&reader, e)?;
                p.skimmed.push(scope);
            }
            Event::Empty(ref e) if skimming || p.skims_children() => {
                p.skim_element(&reader, e)?;
            }
            Event::End(_) if skimming => {
                p.skimmed.pop();
            }
            Event::Text(_) | Event::CData(_) if skimming => {}
            Event::GeneralRef(r) if skimming => {
                resolve_reference(&r)?;
            }
            Event::Start(ref e) => {
                let el = p.start_element(&reader, e, start)?;
                p.stack.push(el);
                if p.opens_config() {
                    p.config_at = Some(p.stack.len() - 1);
                }
            }
            Event::Empty(ref e) => {
                let mut el = p.start_element(&reader, e, start)?;
                el.span = start..end;
                p.close(el);
            }
            Event::End(_) => {
                let mut el = p.stack.pop().ok_or_else(|| XmlError("unbalanced end tag".into()))?;
                el.span.end = end;
                if p.config_at == Some(p.stack.len()) {
                    p.config_at = None;
                }
                p.close(el);
            }
            Event::Text(t) => {
                let text = t.xml10_content();
                match p.stack.last_mut() {
                    Some(el) => el.text.push_str(&text),
                    None if text.trim().is_empty() => {}
                    None => return Err(XmlError("text outside the root element".into())),
                }
            }
            Event::CData(c) => {
                let s: &str = &c;
                match p.stack.last_mut() {
                    Some(el) => el.text.push_str(s),
                    None => return Err(XmlError("CDATA outside the root element".into())),
                }
            }
            Event::GeneralRef(r) => {
                let ch = resolve_reference(&r)?;
                match p.stack.last_mut() {
                    Some(el) => el.text.push(ch),
                    None => return Err(XmlError("reference outside the root element".into())),
                }
            }
            Event::DocType(_) => return Err(XmlError("DOCTYPE is not allowed in NETCONF messages".into())),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(open) = p.stack.last() {
        return Err(XmlError(format!("element <{}> is not closed", open.name)));
    }
    p.root.take().ok_or_else(|| XmlError("no root element".into()))
}

/// Whether `skimmed` (from [`parse_rpc`]) is `full` (from [`parse_with`], same message) with
/// some elements' children left out: every element built is the same in both (name,
/// namespace, attributes, text, span, scope). For the fuzz target and tests.
#[doc(hidden)]
pub fn same_down_to_skimmed(full: &Element, skimmed: &Element) -> bool {
    let mut stack = vec![(full, skimmed)];
    while let Some((f, k)) = stack.pop() {
        let attrs_equal = f.attrs.len() == k.attrs.len()
            && f.attrs
                .iter()
                .zip(&k.attrs)
                .all(|(a, b)| a.ns == b.ns && a.prefix == b.prefix && a.name == b.name && a.value == b.value);
        if f.name != k.name
            || f.ns != k.ns
            || f.prefix != k.prefix
            || !attrs_equal
            || f.text != k.text
            || f.span != k.span
            || f.own_prefixes != k.own_prefixes
            || f.scope.bindings != k.scope.bindings
        {
            return false;
        }
        if k.children.is_empty() {
            continue;
        }
        if f.children.len() != k.children.len() {
            return false;
        }
        stack.extend(f.children.iter().zip(&k.children));
    }
    true
}

/// The character a reference (`&#…;` or a predefined entity) stands for.
pub(crate) fn resolve_reference(r: &quick_xml::events::BytesRef<'_>) -> Result<char, XmlError> {
    Ok(match r.resolve_char_ref().map_err(|e| XmlError(e.to_string()))? {
        Some(c) if !is_xml_char(c) => {
            return Err(XmlError(format!("&#{}; is not a character XML 1.0 allows", c as u32)))
        }
        Some(c) => c,
        None => match &**r {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "apos" => '\'',
            "quot" => '"',
            other => return Err(XmlError(format!("undefined entity &{other};"))),
        },
    })
}

/// A namespace declaration: the prefix (None: the default namespace) and the URI.
type Decl = (Option<String>, String);

struct Parser<'l> {
    limits: &'l XmlLimits,
    stack: Vec<Element>,
    root: Option<Element>,
    top: Arc<Scope>,
    elements: usize,
    /// Declarations so far that changed the bindings in scope.
    decls: usize,
    /// Each namespace of the message once (at most one per counted declaration).
    namespaces: HashMap<String, Arc<str>>,
    last_ns: Option<Arc<str>>,
    /// Whether configuration content is skimmed ([`parse_rpc`]).
    skim_config: bool,
    /// The index in `stack` of the open `<config>` whose content is skimmed.
    config_at: Option<usize>,
    /// The scopes of the open elements being skimmed, innermost last (empty: building).
    skimmed: Vec<Arc<Scope>>,
}

impl Parser<'_> {
    /// Whether the element just pushed is configuration content's `<config>`: below
    /// `<rpc>`, under edit-config (base namespace) or edit-data (NMDA), or under the
    /// `<source>` of copy-config or validate.
    fn opens_config(&self) -> bool {
        use crate::mgmt::ns::{NS_BASE, NS_NMDA};
        if !self.skim_config || self.config_at.is_some() {
            return false;
        }
        let base = |e: &Element| matches!(e.ns.as_deref(), None | Some("") | Some(NS_BASE));
        match self.stack.as_slice() {
            [rpc, op, config] if rpc.is(NS_BASE, "rpc") && config.name == "config" => {
                (op.is(NS_BASE, "edit-config") && base(config))
                    || (op.is(NS_NMDA, "edit-data") && config.ns.as_deref() == Some(NS_NMDA))
            }
            [rpc, op, source, config] if rpc.is(NS_BASE, "rpc") && config.name == "config" => {
                (op.is(NS_BASE, "copy-config") || op.is(NS_BASE, "validate"))
                    && source.name == "source"
                    && base(source)
                    && base(config)
            }
            _ => false,
        }
    }

    /// Whether the next element starts skimmed: its parent is a child of `<config>`.
    fn skims_children(&self) -> bool {
        self.config_at.is_some_and(|at| self.stack.len() >= at + 2)
    }

    /// Checks an element as [`Parser::start_element`] does (depth, element and attribute
    /// budgets, attribute values, namespace declarations and prefixes) without building
    /// it; returns its scope for the elements inside it.
    fn skim_element(&mut self, reader: &NsReader<&[u8]>, e: &BytesStart<'_>) -> Result<Arc<Scope>, XmlError> {
        self.count_element()?;
        if let ResolveResult::Unknown(p) = reader.resolver().resolve_element(e.name()).0 {
            return Err(XmlError(format!("undeclared namespace prefix \"{p}\"")));
        }
        let (decls, _) = self.attributes(reader, e, false)?;
        self.scope_with(decls).map(|(scope, _)| scope)
    }

    fn start_element(
        &mut self,
        reader: &NsReader<&[u8]>,
        e: &BytesStart<'_>,
        start: usize,
    ) -> Result<Element, XmlError> {
        self.count_element()?;
        let qname = e.name();
        let (prefix, name) = split_qname(qname)?;
        let ns = match reader.resolver().resolve_element(qname).0 {
            ResolveResult::Bound(ns) => Some(self.intern(ns.0)),
            ResolveResult::Unbound => None,
            ResolveResult::Unknown(p) => return Err(XmlError(format!("undeclared namespace prefix \"{p}\""))),
        };
        let (decls, attrs) = self.attributes(reader, e, true)?;
        let (scope, own_prefixes) = self.scope_with(decls)?;
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

    /// The depth and element budget for one more element.
    fn count_element(&mut self) -> Result<(), XmlError> {
        let l = self.limits;
        if self.stack.len() + self.skimmed.len() >= l.max_depth {
            return Err(XmlError(format!("elements nest deeper than {} levels", l.max_depth)));
        }
        self.elements += 1;
        if self.elements > l.max_elements {
            return Err(XmlError(format!("the message has more than {} elements", l.max_elements)));
        }
        Ok(())
    }

    /// The shared copy of a namespace name: consecutive elements mostly share one.
    fn intern(&mut self, ns: &str) -> Arc<str> {
        if let Some(last) = self.last_ns.as_ref().filter(|l| &***l == ns) {
            return last.clone();
        }
        let shared = match self.namespaces.get(ns) {
            Some(s) => s.clone(),
            None => {
                let s: Arc<str> = ns.into();
                self.namespaces.insert(ns.to_owned(), s.clone());
                s
            }
        };
        self.last_ns = Some(shared.clone());
        shared
    }

    fn close(&mut self, el: Element) {
        match self.stack.last_mut() {
            Some(parent) => parent.children.push(el),
            None => self.root = Some(el),
        }
    }

    /// An element's namespace declarations and (when `build`) its other attributes, every
    /// attribute checked against the limits and counted in the element budget.
    fn attributes(
        &mut self,
        reader: &NsReader<&[u8]>,
        e: &BytesStart<'_>,
        build: bool,
    ) -> Result<(Vec<Decl>, Vec<Attr>), XmlError> {
        let l = self.limits;
        let resolver = reader.resolver();
        let mut decls: Vec<Decl> = Vec::new();
        let mut attrs = Vec::new();
        let mut count = 0usize;
        for a in e.attributes() {
            let a = a.map_err(|err| XmlError(format!("bad attribute: {err}")))?;
            if a.value.len() > l.max_attribute_size {
                return Err(XmlError(format!("an attribute value exceeds {} bytes", l.max_attribute_size)));
            }
            let value = a
                .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .map_err(|err| XmlError(format!("bad attribute value: {err}")))?;
            if !value.chars().all(is_xml_char) {
                return Err(XmlError("an attribute value holds a character XML 1.0 does not allow".into()));
            }
            if let Some(d) = a.key.as_namespace_binding() {
                if decls.len() == l.max_namespace_declarations_per_element {
                    return Err(XmlError(format!(
                        "an element declares more than {} namespaces",
                        l.max_namespace_declarations_per_element
                    )));
                }
                let p = match d {
                    PrefixDeclaration::Default => None,
                    PrefixDeclaration::Named(p) => Some(p.to_owned()),
                };
                decls.push((p, value.into_owned()));
                continue;
            }
            if count == l.max_attributes {
                return Err(XmlError(format!("an element has more than {} attributes", l.max_attributes)));
            }
            count += 1;
            // Attributes share the element budget: each costs as much memory as an element.
            self.elements += 1;
            if self.elements > l.max_elements {
                return Err(XmlError(format!("the message has more than {} elements and attributes", l.max_elements)));
            }
            // Unprefixed attributes are in no namespace (XML Namespaces 6.2).
            let ans = match resolver.resolve_attribute(a.key).0 {
                ResolveResult::Bound(ns) if build => Some(ns.0.to_owned()),
                ResolveResult::Bound(_) | ResolveResult::Unbound => None,
                ResolveResult::Unknown(p) => return Err(XmlError(format!("undeclared namespace prefix \"{p}\""))),
            };
            if build {
                let (p, n) = split_qname(a.key)?;
                attrs.push(Attr { ns: ans, prefix: p, name: n, value: value.into_owned() });
            }
        }
        Ok((decls, attrs))
    }

    /// The scope of an element declaring `decls` in the innermost open element's scope
    /// (shared when they change nothing), counted in the declaration budget, and the
    /// prefixes it declares.
    fn scope_with(&mut self, decls: Vec<Decl>) -> Result<(Arc<Scope>, Vec<Option<String>>), XmlError> {
        let l = self.limits;
        let parent = match self.skimmed.last() {
            Some(s) => s,
            None => self.stack.last().map(|p| &p.scope).unwrap_or(&self.top),
        };
        let scope = if parent.unchanged_by(&decls) {
            parent.clone()
        } else {
            self.decls += decls.len();
            if self.decls > l.max_namespace_declarations {
                return Err(XmlError(format!(
                    "the message declares more than {} namespaces",
                    l.max_namespace_declarations
                )));
            }
            Arc::new(parent.with(&decls))
        };
        Ok((scope, decls.into_iter().map(|(p, _)| p).collect()))
    }
}

fn split_qname(q: QName<'_>) -> Result<(Option<String>, String), XmlError> {
    let s: &str = q.as_ref();
    Ok(match s.split_once(':') {
        Some((p, l)) => (Some(p.to_owned()), l.to_owned()),
        None => (None, s.to_owned()),
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
mod forbidden_chars {
    use super::*;

    #[test]
    fn issue22_rpc_parse_skims_config_content_only() {
        let nc = "urn:ietf:params:xml:ns:netconf:base:1.0";
        let nmda = crate::mgmt::ns::NS_NMDA;
        let limits = XmlLimits::default();
        let deep = r#"<nacm xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-acm"><groups><group xmlns:x="urn:x"><name>g&amp;&#x41;</name><user-name>u</user-name></group></groups></nacm>"#;
        let cases = [
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><edit-config><target><running/></target><config>{deep}</config></edit-config></rpc>"#
                ),
                true,
            ),
            (
                format!(
                    r#"<nc:rpc xmlns:nc="{nc}" message-id="1"><nc:edit-config><nc:config>{deep}<top xmlns="urn:t"/></nc:config></nc:edit-config></nc:rpc>"#
                ),
                true,
            ),
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><copy-config><target><running/></target><source><config>{deep}</config></source></copy-config></rpc>"#
                ),
                true,
            ),
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><validate><source><config>{deep}</config></source></validate></rpc>"#
                ),
                true,
            ),
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><edit-data xmlns="{nmda}"><config>{deep}</config></edit-data></rpc>"#
                ),
                true,
            ),
            // Not configuration content: built in full.
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><get><filter type="subtree"><config>{deep}</config></filter></get></rpc>"#
                ),
                false,
            ),
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><edit-config><config xmlns="urn:other">{deep}</config></edit-config></rpc>"#
                ),
                false,
            ),
            (
                format!(
                    r#"<rpc xmlns="{nc}" message-id="1"><get-config><source><config>{deep}</config></source></get-config></rpc>"#
                ),
                false,
            ),
        ];
        for (msg, skims) in &cases {
            let full = parse_with(msg, &limits).unwrap();
            let skim = parse_rpc(msg, &limits).unwrap();
            assert!(same_down_to_skimmed(&full, &skim), "{msg}");
            // The top-level children of <config> are built, with spans for children_text.
            let mut config = &skim;
            while config.name != "config" {
                config = &config.children[config.children.len() - 1];
            }
            assert_eq!(config.children[0].name, "nacm");
            assert_eq!(config.children[0].children.is_empty(), *skims, "{msg}");
            assert_eq!(config.children_text(msg).unwrap(), {
                let mut c = &full;
                while c.name != "config" {
                    c = &c.children[c.children.len() - 1];
                }
                c.children_text(msg).unwrap()
            });
        }
        // What the full parse refuses inside configuration content, the skimming one does too.
        let bad = [
            "<a xmlns=\"urn:a\"><b></c></a>",
            "<p:a/>",
            "<a b=\"1\" b=\"2\"/>",
            "<a>&bogus;</a>",
            "<a>&#0;</a>",
            "<a x:y=\"1\"/>",
        ];
        for b in bad {
            let msg = format!(
                r#"<rpc xmlns="{nc}" message-id="1"><edit-config><config><top xmlns="urn:t">{b}</top></config></edit-config></rpc>"#
            );
            assert!(parse_with(&msg, &limits).is_err(), "{b}");
            assert!(parse_rpc(&msg, &limits).is_err(), "{b}");
        }
        // Limits count skimmed elements and depth too.
        let tight = XmlLimits { max_elements: 8, max_depth: 6, ..XmlLimits::default() };
        let many = format!(
            r#"<rpc xmlns="{nc}" message-id="1"><edit-config><config><top xmlns="urn:t">{}</top></config></edit-config></rpc>"#,
            "<a/>".repeat(8)
        );
        assert!(parse_with(&many, &tight).is_err() && parse_rpc(&many, &tight).is_err());
        let nested = format!(
            r#"<rpc xmlns="{nc}" message-id="1"><edit-config><config><top xmlns="urn:t"><a><b><c/></b></a></top></config></edit-config></rpc>"#
        );
        assert!(parse_with(&nested, &tight).is_err() && parse_rpc(&nested, &tight).is_err());
    }

    #[test]
    fn characters_outside_xml_1_0_are_not_well_formed() {
        // A NUL reached yang2's CString::new(..).unwrap() through an XPath prefix's
        // namespace (fuzz finding subtree_filter/xpath-prefix-ns-nul).
        for bad in [
            "<rpc xmlns:n=\"a\u{0}b\"/>",
            "<rpc>a\u{1}b</rpc>",
            "<rpc>&#0;</rpc>",
            "<rpc>&#x1F;</rpc>",
            "<rpc a=\"&#0;\"/>",
            "<rpc>\u{FFFE}</rpc>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let ok = parse("<rpc xmlns=\"urn:x\" a=\"&#9;\">\t\r\n&#x10FFFF;\u{e9}</rpc>").unwrap();
        assert_eq!(ok.attr("a"), Some("\t"));
        // An escaped NUL in a namespace declaration stays text: no NUL reaches a namespace.
        if let Ok(r) = parse("<rpc xmlns=\"a&#0;b\"/>") {
            assert!(!r.ns.as_deref().unwrap_or_default().contains('\0'));
        }
    }
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
        let text = config.children_text(src).unwrap();
        assert!(text.starts_with("<p:a ") && text[..text.find('>').unwrap()].contains(" xmlns:p=\"urn:x\""), "{text}");
        let c = &text[text.find("<c ").unwrap()..];
        assert!(
            c.contains("xmlns=\"urn:y\"") && c.matches("xmlns=").count() == 1,
            "own default namespace kept, not duplicated: {c}"
        );
        // The standalone text parses on its own.
        parse(&a.standalone_text(src).unwrap()).unwrap();
    }

    #[test]
    fn malformed_inputs_are_errors() {
        for bad in
            ["<a>", "<a></b>", "<a/><b/>", "<!DOCTYPE a><a/>", "<p:a/>", "<a>&foo;</a>", "text", "<a x='1' x='2'/>"]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    fn limits() -> XmlLimits {
        XmlLimits {
            max_depth: 16,
            max_elements: 100,
            max_attributes: 4,
            max_namespace_declarations_per_element: 4,
            max_namespace_declarations: 8,
            max_attribute_size: 1024,
        }
    }

    fn refused(src: &str, why: &str) {
        match parse_with(src, &limits()) {
            Ok(_) => panic!("accepted: {why}"),
            Err(e) => assert!(e.0.contains(why), "{why}: {e}"),
        }
    }

    #[test]
    fn issue_11_class_2_each_limit_is_enforced_at_its_bound() {
        let nest = |n: usize| format!("{}{}", "<a>".repeat(n), "</a>".repeat(n));
        parse_with(&nest(16), &limits()).unwrap();
        refused(&nest(17), "deeper than 16");
        parse_with(&format!("<r>{}</r>", "<b/>".repeat(99)), &limits()).unwrap();
        refused(&format!("<r>{}</r>", "<b/>".repeat(100)), "more than 100 elements");
        parse_with(&format!("<r>{}</r>", "<b x='1'/>".repeat(49)), &limits()).unwrap();
        refused(&format!("<r>{}</r>", "<b x='1'/>".repeat(50)), "more than 100 elements and attributes");
        parse_with("<a w='1' x='2' y='3' z='4'/>", &limits()).unwrap();
        refused("<a v='0' w='1' x='2' y='3' z='4'/>", "more than 4 attributes");
        parse_with("<a xmlns:a='u:a' xmlns:b='u:b' xmlns:c='u:c' xmlns='u:d'/>", &limits()).unwrap();
        refused("<a xmlns:a='u:a' xmlns:b='u:b' xmlns:c='u:c' xmlns:d='u:d' xmlns='u:e'/>", "declares more than 4");
        let per_child =
            |n: usize| format!("<r>{}</r>", (0..n).map(|i| format!("<p:c xmlns:p='u:{i}'/>")).collect::<String>());
        parse_with(&per_child(8), &limits()).unwrap();
        refused(&per_child(9), "declares more than 8 namespaces");
        parse_with(&format!("<a x='{}'/>", "v".repeat(1024)), &limits()).unwrap();
        refused(&format!("<a x='{}'/>", "v".repeat(1025)), "exceeds 1024 bytes");
    }

    #[test]
    fn redeclaring_a_binding_in_scope_is_free() {
        // Clients that repeat xmlns on every list entry are not counted per entry.
        let src = format!("<r xmlns='u:x'>{}</r>", "<e xmlns='u:x'/>".repeat(50));
        parse_with(&src, &limits()).unwrap();
    }

    #[test]
    fn deep_trees_clone_and_drop_without_recursion() {
        let big = XmlLimits { max_depth: 4096, max_elements: 1_000_000, ..XmlLimits::default() };
        let n = 4096;
        let src = format!("{}{}", "<a>".repeat(n), "</a>".repeat(n));
        let root = parse_with(&src, &big).unwrap();
        // A hand-built tree far deeper than any message may be still clones and drops.
        let mut deep = root.clone();
        for _ in 0..200 {
            let mut outer = deep.shallow();
            outer.children.push(deep);
            deep = outer;
        }
        let mut tower = parse("<x/>").unwrap();
        for _ in 0..200_000 {
            let mut outer = parse("<x/>").unwrap();
            outer.children.push(tower);
            tower = outer;
        }
        let copy = tower.clone();
        drop(tower);
        drop(copy);
        drop(deep);
    }

    #[test]
    fn many_namespaces_on_rpc_are_refused_quickly() {
        // The issue's attack: 50 000 declarations on <rpc>, 2 000 children.
        let decls: String = (0..50_000).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
        let src = format!("<rpc{decls}>{}</rpc>", "<get/>".repeat(2000));
        let e = parse(&src).unwrap_err();
        assert!(e.0.contains("namespace"), "{e}");
    }

    #[test]
    fn children_text_declares_only_what_each_child_uses() {
        let decls: String = (0..60).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
        let src =
            format!("<rpc xmlns='urn:base'{decls}><config>{}<p7:b>p9:id</p7:b></config></rpc>", "<p1:a/>".repeat(2000));
        let root = parse(&src).unwrap();
        let text = root.children[0].children_text(&src).unwrap();
        assert_eq!(text.matches("xmlns:p1=").count(), 2000);
        assert_eq!(text.matches("xmlns=\"urn:base\"").count(), 2001);
        let last = &text[text.rfind("<p7:b").unwrap()..];
        assert!(last.contains("xmlns:p7=\"urn:x:7\"") && last.contains("xmlns:p9=\"urn:x:9\""), "{last}");
        assert!(!text.contains("xmlns:p2="), "unused prefixes are not declared");
        for c in [&text[..text.find("/>").unwrap() + 2], last] {
            parse(c).unwrap();
        }
    }

    #[test]
    fn default_limits_pass_a_large_ordinary_message() {
        let entries: String = (0..100_000)
            .map(|i| format!("<sci><csci-id>10.0.{}.{}:80</csci-id><cs-id>cs{}</cs-id></sci>", i / 256, i % 256, i % 7))
            .collect();
        let src = format!("<rpc xmlns='urn:ietf:params:xml:ns:netconf:base:1.0' message-id='1'><edit-config><target><running/></target><config><scis xmlns='urn:x'>{entries}</scis></config></edit-config></rpc>");
        parse(&src).unwrap();
    }
}

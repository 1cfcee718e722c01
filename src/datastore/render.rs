//! Typed reads of operational state (DESIGN decision 2): a state provider that owns typed
//! data renders the selected part of it straight into XML or RFC 7951 JSON text, with the
//! reader's NACM read rules applied per node, so a read costs what it selects, not what
//! exists. No libyang tree is built.
//!
//! [`read_typed`] serves a read when it can answer exactly what the libyang path would:
//! the selection is exact (see [`super::select`]), every target lies inside a subtree one
//! typed provider serves whole (state only, no configuration below it), NACM decides by
//! schema path alone, and the options are ones the writer implements. Otherwise it
//! returns `None` and the caller takes the libyang path (running plus every provider's
//! tree, NACM pruning, then the filter), with providers asked only for what the selection
//! covers ([`super::Datastores::read_covering`]). Both paths give the same data; the tests
//! in `tests/typed_read.rs` compare them on randomised states, filters and rules.

use std::fmt::Write as _;

use super::select::{Sel, Selection};
use super::Datastores;
use crate::error::RpcError;
use crate::nacm::ReadAccess;

/// The encoding of a typed read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Xml,
    Json,
}

/// A leaf value, typed as its YANG type prints.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// A string that may need escaping (string, enumeration, bits, date-and-time).
    Str(&'a str),
    /// An unsigned integer of 32 bits or less (a JSON number).
    U32(u64),
    /// A 64-bit integer (RFC 7951 section 6.1: a JSON string).
    U64(u64),
    Bool(bool),
    /// An identityref: defining module, its namespace, identity name.
    Ident(&'static str, &'static str, &'static str),
    /// A yang:date-and-time, written in UTC with milliseconds.
    Time(chrono::DateTime<chrono::Utc>),
}

/// Appends a date-and-time (RFC 3339, UTC, milliseconds, as `tree::yang_time` writes it)
/// without chrono's formatter (two or three per metric-cache entry add up).
pub fn push_time(out: &mut String, t: chrono::DateTime<chrono::Utc>) {
    use chrono::{Datelike, Timelike};
    let (d, tm) = (t.date_naive(), t.time());
    let nanos = tm.nanosecond();
    if !(0..=9999).contains(&d.year()) || nanos >= 1_000_000_000 {
        // Outside the four-digit years, or a leap second: the general formatter.
        out.push_str(&super::tree::yang_time(t));
        return;
    }
    let mut b = *b"0000-00-00T00:00:00.000Z";
    let mut two = |at: usize, v: u32| {
        b[at] = b'0' + (v / 10) as u8;
        b[at + 1] = b'0' + (v % 10) as u8;
    };
    let y = d.year() as u32;
    two(0, y / 100);
    two(2, y % 100);
    two(5, d.month());
    two(8, d.day());
    two(11, tm.hour());
    two(14, tm.minute());
    two(17, tm.second());
    let ms = nanos / 1_000_000;
    b[20] = b'0' + (ms / 100) as u8;
    b[21] = b'0' + (ms / 10 % 10) as u8;
    b[22] = b'0' + (ms % 10) as u8;
    out.push_str(std::str::from_utf8(&b).unwrap_or_default());
}

/// String equality, by address first (names and namespaces are constants).
fn same(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

fn push_int(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// Appends XML character data, escaped.
fn push_xml_text(out: &mut String, s: &str) {
    out.push_str(&crate::text::xml(s));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Container,
    List,
    Entry,
}

struct Frame {
    kind: Kind,
    module: &'static str,
    ns: &'static str,
    name: &'static str,
    written: bool,
    /// A member (JSON) or element was written inside.
    filled: bool,
    /// Below max-depth: nothing inside is written, but this node is when something would be.
    cut: bool,
}

/// Writes data nodes as XML or JSON, opening containers and list entries only when
/// something is written inside them (an empty non-presence container is not printed).
pub struct Writer {
    out: String,
    format: Format,
    frames: Vec<Frame>,
    /// Levels not printed (a RESTCONF data resource prints its target, not its ancestors).
    skip: usize,
    max_depth: Option<usize>,
    top_filled: bool,
    /// max-depth cut something.
    cut_something: bool,
}

impl Writer {
    pub fn new(format: Format, skip: usize, max_depth: Option<usize>, capacity: usize) -> Writer {
        Writer {
            out: String::with_capacity(capacity),
            format,
            frames: Vec::new(),
            skip,
            max_depth,
            top_filled: false,
            cut_something: false,
        }
    }

    /// What was written: XML elements, or the JSON members of the top object (without
    /// the braces).
    pub fn finish(self) -> String {
        self.out
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Room for `bytes` more output (a renderer that knows its size saves the copies of a
    /// growing buffer).
    pub fn reserve(&mut self, bytes: usize) {
        self.out.reserve(bytes);
    }

    /// The data-tree depth of the next node (list frames are not nodes).
    fn depth(&self) -> usize {
        self.frames.iter().filter(|f| f.kind != Kind::List).count() + 1
    }

    pub fn begin_container(&mut self, module: &'static str, ns: &'static str, name: &'static str) {
        let cut = self.max_depth.is_some_and(|m| self.depth() == m);
        self.frames.push(Frame { kind: Kind::Container, module, ns, name, written: false, filled: false, cut });
    }

    pub fn begin_list(&mut self, module: &'static str, ns: &'static str, name: &'static str) {
        self.frames.push(Frame { kind: Kind::List, module, ns, name, written: false, filled: false, cut: false });
    }

    /// An entry of the list begun last.
    pub fn begin_entry(&mut self) {
        let (module, ns, name) = match self.frames.last() {
            Some(f) => (f.module, f.ns, f.name),
            None => ("", "", ""),
        };
        let cut = self.max_depth.is_some_and(|m| self.depth() == m);
        self.frames.push(Frame { kind: Kind::Entry, module, ns, name, written: false, filled: false, cut });
    }

    pub fn end(&mut self) {
        let Some(f) = self.frames.pop() else { return };
        if !f.written {
            return;
        }
        let visible = self.frames.len() >= self.skip;
        if !visible {
            return;
        }
        match (self.format, f.kind) {
            (Format::Xml, Kind::List) => {}
            (Format::Xml, _) => {
                self.out.push_str("</");
                self.out.push_str(f.name);
                self.out.push('>');
            }
            (Format::Json, Kind::List) => self.out.push(']'),
            (Format::Json, _) => self.out.push('}'),
        }
    }

    /// The namespace (XML) or module (JSON) of the nearest printed element or object
    /// above frame `i` (None at the top).
    fn parent_of(&self, i: usize) -> Option<&Frame> {
        self.frames[..i].iter().enumerate().rev().find(|(j, f)| *j >= self.skip && f.kind != Kind::List).map(|(_, f)| f)
    }

    /// JSON: the comma before a member or entry of the object/array at frame `i - 1`.
    fn json_separator(&mut self, i: usize) {
        let filled = if i == self.skip {
            std::mem::replace(&mut self.top_filled, true)
        } else {
            std::mem::replace(&mut self.frames[i - 1].filled, true)
        };
        if filled {
            self.out.push(',');
        }
    }

    fn json_name(&mut self, i: usize, module: &'static str, name: &'static str) {
        let qualified = self.parent_of(i).is_none_or(|p| !same(p.module, module));
        self.out.push('"');
        if qualified {
            self.out.push_str(module);
            self.out.push(':');
        }
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    /// Writes the frames of `frames[..n]` not written yet, outermost first.
    fn flush_to(&mut self, n: usize) {
        let start = match self.frames[..n].iter().position(|f| !f.written) {
            Some(s) => s,
            None => return,
        };
        for i in start..n {
            self.frames[i].written = true;
            if i < self.skip {
                continue;
            }
            let (kind, module, ns, name) = {
                let f = &self.frames[i];
                (f.kind, f.module, f.ns, f.name)
            };
            match self.format {
                Format::Xml => {
                    if kind == Kind::List {
                        continue;
                    }
                    let own_ns = self.parent_of(i).is_none_or(|p| !same(p.ns, ns));
                    self.out.push('<');
                    self.out.push_str(name);
                    if own_ns {
                        self.out.push_str(" xmlns=\"");
                        self.out.push_str(ns);
                        self.out.push('"');
                    }
                    self.out.push('>');
                }
                Format::Json => match kind {
                    Kind::Container => {
                        self.json_separator(i);
                        self.json_name(i, module, name);
                        self.out.push('{');
                    }
                    Kind::List => {
                        self.json_separator(i);
                        self.json_name(i, module, name);
                        self.out.push('[');
                    }
                    Kind::Entry => {
                        self.json_separator(i);
                        self.out.push('{');
                    }
                },
            }
        }
    }

    /// A leaf. `key`: a list key, written whatever max-depth says (get-data keeps keys).
    pub fn leaf(&mut self, module: &'static str, ns: &'static str, name: &'static str, value: Value<'_>, key: bool) {
        if let Some(c) = self.frames.iter().position(|f| f.cut) {
            // Below max-depth nothing is printed but the nodes down to the cut (kept even
            // when emptied), and the keys of an entry at the cut.
            let key_of_cut_entry = key && c + 1 == self.frames.len() && self.frames[c].kind == Kind::Entry;
            self.cut_something = true;
            if !key_of_cut_entry {
                self.flush_to(c + 1);
                return;
            }
        }
        self.flush_to(self.frames.len());
        let i = self.frames.len();
        if i < self.skip {
            return;
        }
        match self.format {
            Format::Xml => {
                let own_ns = self.parent_of(i).is_none_or(|p| !same(p.ns, ns));
                let out = &mut self.out;
                out.push('<');
                out.push_str(name);
                if own_ns {
                    out.push_str(" xmlns=\"");
                    out.push_str(ns);
                    out.push('"');
                }
                match value {
                    Value::Ident(m, ins, id) => {
                        let _ = write!(out, " xmlns:{m}=\"{ins}\">{m}:{id}");
                    }
                    Value::Str(s) => {
                        out.push('>');
                        push_xml_text(out, s);
                    }
                    Value::U32(n) | Value::U64(n) => {
                        out.push('>');
                        push_int(out, n);
                    }
                    Value::Bool(b) => {
                        out.push('>');
                        out.push_str(if b { "true" } else { "false" });
                    }
                    Value::Time(t) => {
                        out.push('>');
                        push_time(out, t);
                    }
                }
                out.push_str("</");
                out.push_str(name);
                out.push('>');
            }
            Format::Json => {
                self.json_separator(i);
                self.json_name(i, module, name);
                let out = &mut self.out;
                match value {
                    Value::Ident(m, _, id) => {
                        let _ = write!(out, "\"{m}:{id}\"");
                    }
                    Value::Str(s) => json_string(out, s),
                    Value::U32(n) => push_int(out, n),
                    Value::U64(n) => {
                        out.push('"');
                        push_int(out, n);
                        out.push('"');
                    }
                    Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
                    Value::Time(t) => {
                        out.push('"');
                        push_time(out, t);
                        out.push('"');
                    }
                }
            }
        }
    }
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A provider that renders its state from typed data.
pub trait TypedState: Send + Sync {
    /// The state subtrees it serves whole, as (module, name) steps from the top: a read is
    /// typed only when each of its targets starts with one of them. Nothing else may
    /// render data inside these subtrees.
    fn subtrees(&self) -> &'static [&'static [(&'static str, &'static str)]];

    /// Writes what `sel` (at the top of the datastore) selects of those subtrees, with
    /// every node `access` denies left out. Err(None) when this data cannot be rendered
    /// exactly for this reader after all (the caller falls back).
    fn render(&self, sel: &Sel<'_>, access: &ReadAccess<'_>, w: &mut Writer) -> Result<(), Option<RpcError>>;
}

/// Options of a typed read.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub format: Format,
    /// Ancestor levels left out (RESTCONF data resources), 0 for a datastore.
    pub skip: usize,
    /// get-data max-depth.
    pub max_depth: Option<usize>,
    pub with_defaults: crate::mgmt::with_defaults::WithDefaults,
}

/// Whether no leaf below the schema node at `steps` has a default value (then every
/// with-defaults mode prints typed state as it is: nothing in it is a default).
fn without_defaults(steps: &[(&str, &str)]) -> bool {
    static SEEN: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());
    let path: String = steps.iter().map(|(m, n)| format!("/{m}:{n}")).collect();
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = seen.iter().find(|(p, _)| *p == path) {
        return *v;
    }
    let v = crate::yang::context().find_path(&path).is_ok_and(|n| n.traverse().all(|d| !d.has_default()));
    seen.push((path, v));
    v
}

/// Serves a read of operational state from typed data: Some(text) (XML elements, or the
/// JSON members of the top object), or None when the libyang path must answer it.
pub fn read_typed(
    datastores: &Datastores,
    sel: &Selection,
    access: &ReadAccess<'_>,
    opts: Options,
) -> Result<Option<String>, RpcError> {
    if !sel.exact || sel.is_all() || sel.targets.is_empty() {
        return Ok(None);
    }
    let providers = datastores.providers.read().unwrap_or_else(|e| e.into_inner()).clone();
    let mut chosen = None;
    for t in &sel.targets {
        let found = providers.iter().find_map(|p| {
            let typed = p.typed()?;
            typed
                .subtrees()
                .iter()
                .any(|sub| sub.len() <= t.len() && sub.iter().zip(t).all(|((m, n), s)| s.module == *m && s.name == *n))
                .then_some(p)
        });
        match (found, chosen) {
            (None, _) => return Ok(None),
            (Some(p), None) => chosen = Some(p),
            (Some(p), Some(c)) if std::sync::Arc::ptr_eq(p, c) => {}
            _ => return Ok(None),
        }
    }
    let Some(provider) = chosen.and_then(|p| p.typed()) else { return Ok(None) };
    if opts.with_defaults != crate::mgmt::with_defaults::WithDefaults::Explicit
        && !provider.subtrees().iter().all(|s| without_defaults(s))
    {
        return Ok(None);
    }
    let trie = sel.tree();
    let mut w = Writer::new(opts.format, opts.skip, opts.max_depth, 4096);
    match provider.render(&Sel::root(&trie), access, &mut w) {
        // libyang marks a container max-depth emptied as a default node and prints it or
        // not by the with-defaults mode: such reads are left to libyang.
        Ok(()) if w.cut_something => Ok(None),
        Ok(()) => Ok(Some(w.finish())),
        Err(None) => Ok(None),
        Err(Some(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "urn:cats-sma:yang:cats-sma";

    fn sample(format: Format, skip: usize, max_depth: Option<usize>) -> String {
        let mut w = Writer::new(format, skip, max_depth, 0);
        w.begin_container("cats-sma", NS, "cats-sma");
        w.begin_container("cats-sma", NS, "metric-cache");
        w.begin_list("cats-sma", NS, "entry");
        for id in ["a", "b\"<"] {
            w.begin_entry();
            w.leaf("cats-sma", NS, "csci-id", Value::Str(id), true);
            w.leaf("cats-sma", NS, "gas", Value::U32(4), false);
            w.end();
        }
        w.end();
        w.end();
        w.begin_container("cats-sma", NS, "statistics");
        w.end();
        w.end();
        w.finish()
    }

    #[test]
    fn issue14_writer_prints_xml_and_rfc7951_json() {
        assert_eq!(
            sample(Format::Xml, 0, None),
            "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache><entry><csci-id>a</csci-id><gas>4</gas>\
             </entry><entry><csci-id>b&quot;&lt;</csci-id><gas>4</gas></entry></metric-cache></cats-sma>"
        );
        assert_eq!(
            sample(Format::Json, 0, None),
            "\"cats-sma:cats-sma\":{\"metric-cache\":{\"entry\":[{\"csci-id\":\"a\",\"gas\":4},\
             {\"csci-id\":\"b\\\"<\",\"gas\":4}]}}"
        );
        assert_eq!(
            sample(Format::Json, 2, None),
            "\"cats-sma:entry\":[{\"csci-id\":\"a\",\"gas\":4},{\"csci-id\":\"b\\\"<\",\"gas\":4}]"
        );
        assert_eq!(
            sample(Format::Xml, 0, Some(2)),
            "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache></metric-cache></cats-sma>"
        );
        assert_eq!(
            sample(Format::Xml, 0, Some(3)),
            "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache><entry><csci-id>a</csci-id></entry>\
             <entry><csci-id>b&quot;&lt;</csci-id></entry></metric-cache></cats-sma>"
        );
    }
}

//! What a read selects, as data: the target paths of a subtree filter, an XPath filter or a
//! RESTCONF data resource, each a list of steps (module, name, list-key equalities).
//!
//! A [`Selection`] serves two purposes. State providers use it to render only what is
//! selected (a provider whose subtree no target touches is not asked at all, and the
//! engine renders one metric-cache entry, not 100 000); that needs a selection that covers
//! at least what the filter selects. Typed renderers ([`super::render`]) answer a read
//! from typed data without libyang; that needs a selection equal to the filter. So every
//! selection says whether it is `exact`: a filter this grammar cannot express exactly (a
//! predicate on a non-key leaf, a wildcard, `//`, functions, attribute matches, …) gives
//! the nearest covering selection (each target cut at the first step it cannot express)
//! with `exact == false`, and such a read goes the libyang way, filter and all.

use yang2::data::DataTree;

use super::{Datastore, Datastores};
use crate::error::RpcError;
use crate::xml::Element;

/// One step of a target path. `keys` are equalities on list keys only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub module: String,
    pub name: String,
    pub keys: Vec<(String, String)>,
}

/// The target paths of a read; each selects the node it ends at with its whole subtree
/// (and its ancestors with their keys). No targets selects nothing; one empty target
/// selects everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub targets: Vec<Vec<Step>>,
    /// The targets select exactly what the filter does (else they cover it).
    pub exact: bool,
}

impl Selection {
    /// Everything (no filter).
    pub fn all() -> Selection {
        Selection { targets: vec![Vec::new()], exact: true }
    }

    fn covering_all() -> Selection {
        Selection { targets: vec![Vec::new()], exact: false }
    }

    /// Whether the selection covers the whole datastore.
    pub fn is_all(&self) -> bool {
        self.targets.iter().any(|t| t.is_empty())
    }

    /// Whether some target is at or below, or above, the top-level node `module:name`.
    pub fn touches_top(&self, module: &str, name: &str) -> bool {
        self.targets.iter().any(|t| t.first().is_none_or(|s| s.module == module && s.name == name))
    }

    /// Whether some target touches the top-level nodes of `module`.
    pub fn touches_module(&self, module: &str) -> bool {
        self.targets.iter().any(|t| t.first().is_none_or(|s| s.module == module))
    }

    /// The targets as one XPath union of instance paths (None: everything).
    pub fn xpath(&self) -> Option<String> {
        if self.is_all() {
            return None;
        }
        let mut out = String::new();
        for t in &self.targets {
            if !out.is_empty() {
                out.push_str(" | ");
            }
            for s in t {
                out.push('/');
                out.push_str(&s.module);
                out.push(':');
                out.push_str(&s.name);
                for (k, v) in &s.keys {
                    out.push('[');
                    out.push_str(k);
                    out.push('=');
                    out.push_str(&super::tree::quote(v));
                    out.push(']');
                }
            }
        }
        Some(out)
    }

    /// The trie of the targets, for renderers.
    pub fn tree(&self) -> SelNode {
        let mut root = SelNode::default();
        for t in &self.targets {
            root.insert(t);
        }
        root
    }

    /// An XPath filter (module-name prefixes, as `mgmt::filter::xpath::to_json_prefixes`
    /// writes them): a union of absolute location paths of child steps with key
    /// equalities is exact; anything else is covered.
    pub fn from_xpath(expr: &str) -> Selection {
        let mut targets = Vec::new();
        let mut exact = true;
        for part in split_top(expr, '|') {
            let part = part.trim();
            if part == "/" {
                targets.push(Vec::new());
                continue;
            }
            match path_steps(part) {
                Some((steps, whole)) => {
                    exact &= whole;
                    if steps.is_empty() {
                        return Selection::covering_all();
                    }
                    targets.push(steps);
                }
                None => return Selection::covering_all(),
            }
        }
        Selection { targets, exact }
    }

    /// An instance path (RESTCONF targets: keys only), as [`Selection::from_xpath`].
    pub fn from_instance_path(path: &str) -> Selection {
        Selection::from_xpath(path)
    }

    /// The children of a subtree `<filter>` element (RFC 6241 section 6). An empty filter
    /// selects nothing.
    pub fn from_subtree(filter: &Element) -> Selection {
        let mut sel = Selection { targets: Vec::new(), exact: true };
        for f in &filter.children {
            if f.ns.as_deref().is_none_or(str::is_empty) {
                // No namespace matches any module: covered by everything.
                return Selection::covering_all();
            }
            // A namespace no module has selects nothing (6.2.1).
            if let Some(module) = module_of_ns(f.ns.as_deref()) {
                subtree_node(f, &module, &mut Vec::new(), &mut sel);
            }
        }
        sel
    }
}

impl Datastores {
    /// A copy of what a datastore holds inside `sel` (at least; with ancestors): like
    /// [`Datastores::read`] of the whole datastore, filtered afterwards by the reader, but
    /// only the selected part of running is copied and each state provider is asked only
    /// for what the selection covers (one whose subtree no target touches renders
    /// nothing), so a small read costs what it selects.
    pub fn read_covering(&self, ds: Datastore, sel: &Selection) -> Result<DataTree<'static>, RpcError> {
        let Some(xpath) = sel.xpath() else { return self.read(ds, None) };
        if sel.targets.is_empty() {
            return Ok(DataTree::new(self.ctx));
        }
        let config = if ds == Datastore::Operational { Datastore::Running } else { ds };
        let part = match self.with_tree(config, |t| super::select(self.ctx, t, Some(&xpath)))? {
            Ok(t) => t,
            // A target libyang cannot evaluate as a path: the whole datastore covers it.
            Err(_) => return self.read(ds, None),
        };
        if ds != Datastore::Operational {
            return Ok(part);
        }
        let mut tree = part;
        self.render_state_into(&mut tree, sel, Some(&xpath))?;
        Ok(tree)
    }

    /// The operational state `sel` selects, without any configuration: what every state
    /// provider renders for it (each skips what the selection does not reach), and the YANG
    /// library when selected.
    pub fn read_state(&self, sel: &Selection) -> Result<DataTree<'static>, RpcError> {
        let mut tree = DataTree::new(self.ctx);
        self.render_state_into(&mut tree, sel, sel.xpath().as_deref())?;
        Ok(tree)
    }

    /// [`Datastores::read_state`] rendered into `tree` (a copy of configuration the caller
    /// owns), merged with what is there.
    pub fn read_state_into(&self, tree: &mut DataTree<'static>, sel: &Selection) -> Result<(), RpcError> {
        self.render_state_into(tree, sel, sel.xpath().as_deref())
    }

    fn render_state_into(
        &self,
        tree: &mut DataTree<'static>,
        sel: &Selection,
        xpath: Option<&str>,
    ) -> Result<(), RpcError> {
        let providers = self.providers.read().unwrap_or_else(|e| e.into_inner()).clone();
        for p in providers {
            // A provider whose top-level nodes the selection does not reach has nothing for it.
            if p.scope().is_some_and(|scope| !scope.iter().any(|(m, n)| sel.touches_top(m, n))) {
                continue;
            }
            p.render_selected(tree, sel, xpath)?;
        }
        if sel.touches_module("ietf-yang-library") {
            super::tree::merge_moving(tree, yang_library_cached(self.ctx)?)?;
        }
        Ok(())
    }
}

impl Datastores {
    /// The operational state inside the top-level node `module:name`, as XML child elements
    /// of it, when every provider with state there gives it as text (see
    /// [`super::StateProvider::children_text`]); `Some("")` when none has any. None: some
    /// provider may render there and has no text for it (or the YANG library, which is
    /// rendered by libyang), so the caller renders through the providers.
    pub fn state_text(&self, module: &str, name: &str) -> Option<String> {
        if module == "ietf-yang-library" {
            return None;
        }
        let providers = self.providers.read().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        for p in providers.iter() {
            match p.scope() {
                None => return None,
                Some(scope) if scope.iter().any(|(m, n)| *m == module && *n == name) => {
                    if !p.children_text((module, name), &mut out) {
                        return None;
                    }
                }
                Some(_) => {}
            }
        }
        Some(out)
    }
}

/// The YANG library data (RFC 8525): built once per module set and copied per read.
pub(crate) fn yang_library_cached(ctx: &'static yang2::context::Context) -> Result<DataTree<'static>, RpcError> {
    static CACHE: std::sync::Mutex<Option<(u16, DataTree<'static>)>> = std::sync::Mutex::new(None);
    let id = ctx.get_module_set_id();
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((cached, tree)) = cache.as_ref() {
        if *cached == id {
            return tree.duplicate().map_err(|e| RpcError::from_libyang(&e));
        }
    }
    let lib = crate::yang::yang_library(ctx)?;
    let copy = lib.duplicate().map_err(|e| RpcError::from_libyang(&e))?;
    *cache = Some((id, lib));
    Ok(copy)
}

/// A node of the selection trie: `whole` when a target ends here (the subtree is
/// selected), else the children some target continues into.
#[derive(Clone, Debug, Default)]
pub struct SelNode {
    pub whole: bool,
    pub children: Vec<(Step, SelNode)>,
}

impl SelNode {
    fn insert(&mut self, steps: &[Step]) {
        if self.whole {
            return;
        }
        let Some((first, rest)) = steps.split_first() else {
            self.whole = true;
            self.children.clear();
            return;
        };
        let i = match self.children.iter().position(|(s, _)| s == first) {
            Some(i) => i,
            None => {
                self.children.push((first.clone(), SelNode::default()));
                self.children.len() - 1
            }
        };
        self.children[i].1.insert(rest);
    }
}

/// Where a renderer is in the selection: everything below is selected, or the trie nodes
/// (several, when targets differ in their key predicates) still to match.
#[derive(Clone, Debug)]
pub enum Sel<'a> {
    All,
    Some(Vec<&'a SelNode>),
}

impl<'a> Sel<'a> {
    pub fn root(node: &'a SelNode) -> Sel<'a> {
        if node.whole {
            Sel::All
        } else {
            Sel::Some(vec![node])
        }
    }

    /// The selection below the child `module:name` (a container or leaf), if any.
    pub fn child(&self, module: &str, name: &str) -> Option<Sel<'a>> {
        self.entry(module, name, &[])
    }

    /// The selection below the list entry `module:name` with `keys`, if any.
    pub fn entry(&self, module: &str, name: &str, keys: &[(&str, &str)]) -> Option<Sel<'a>> {
        let nodes = match self {
            Sel::All => return Some(Sel::All),
            Sel::Some(n) => n,
        };
        let mut next = Vec::new();
        for n in nodes {
            for (s, c) in &n.children {
                if s.module == module
                    && s.name == name
                    && s.keys.iter().all(|(k, v)| keys.iter().any(|(dk, dv)| dk == k && dv == v))
                {
                    if c.whole {
                        return Some(Sel::All);
                    }
                    next.push(c);
                }
            }
        }
        (!next.is_empty()).then_some(Sel::Some(next))
    }

    /// The key values of the entries of list `module:name` the selection can reach when
    /// every target into it names its first key (`key`); None when some target takes
    /// entries by other means (all of them, or by another key), so the list is scanned.
    pub fn wanted_keys(&self, module: &str, name: &str, key: &str) -> Option<Vec<&'a str>> {
        let Sel::Some(nodes) = self else { return None };
        let mut out = Vec::new();
        for n in nodes {
            for (s, _) in &n.children {
                if s.module == module && s.name == name {
                    let v = s.keys.iter().find(|(k, _)| k == key)?;
                    out.push(v.1.as_str());
                }
            }
        }
        Some(out)
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Sel::All)
    }

    /// Whether some target names entries of list `module:name` by a key.
    pub fn keyed(&self, module: &str, name: &str) -> bool {
        let Sel::Some(nodes) = self else { return false };
        nodes.iter().any(|n| n.children.iter().any(|(s, _)| s.module == module && s.name == name && !s.keys.is_empty()))
    }
}

/// The module with namespace `ns`.
fn module_of_ns(ns: Option<&str>) -> Option<String> {
    let ns = ns.filter(|n| !n.is_empty())?;
    crate::yang::context().get_module_latest_ns(ns).map(|m| m.name().to_owned())
}

fn schema_path(steps: &[Step]) -> String {
    let mut p = String::new();
    for s in steps {
        p.push('/');
        p.push_str(&s.module);
        p.push(':');
        p.push_str(&s.name);
    }
    p
}

/// What a selection needs to know of the schema node at a path.
#[derive(Clone, Debug)]
struct SchemaFacts {
    container_or_list: bool,
    keys: std::sync::Arc<[String]>,
}

/// Paths at most this long are remembered, at most this many of them (about 2 MiB). Only
/// paths the schema has are remembered: their number is the schema's, so names a client
/// makes up cannot crowd them out (an unknown name is looked up each time, as before).
const SCHEMA_MEMO_PATH_MAX: usize = 256;
const SCHEMA_MEMO_ENTRIES: usize = 4096;

/// The schema node at `steps` (None when the path names nothing in the schema). Looked up
/// once per path and remembered: the YANG context never changes once built, and a libyang
/// path lookup per filter element was a tenth of a small `<get>`'s server time.
fn schema_facts(steps: &[Step]) -> Option<SchemaFacts> {
    static MEMO: std::sync::Mutex<Option<std::collections::HashMap<String, Option<SchemaFacts>>>> =
        std::sync::Mutex::new(None);
    let path = schema_path(steps);
    let lock = || MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = lock().as_ref().and_then(|m| m.get(&path)) {
        return found.clone();
    }
    let facts = crate::yang::context().find_path(&path).ok().map(|n| SchemaFacts {
        container_or_list: matches!(
            n.kind(),
            yang2::schema::SchemaNodeKind::Container | yang2::schema::SchemaNodeKind::List
        ),
        keys: n.list_keys().map(|k| k.name().to_owned()).collect(),
    });
    if facts.is_some() && path.len() <= SCHEMA_MEMO_PATH_MAX {
        let mut memo = lock();
        let memo = memo.get_or_insert_with(Default::default);
        if memo.len() >= SCHEMA_MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(path, facts.clone());
    }
    facts
}

/// One element of a subtree filter under the path `at` (its parent's steps).
fn subtree_node(f: &Element, module: &str, at: &mut Vec<Step>, sel: &mut Selection) {
    // An attribute match (6.2.2) depends on metadata: covered by the parent.
    let attrs = f.attrs.iter().any(|a| a.ns.as_deref() != Some(crate::mgmt::ns::NS_BASE));
    let step = Step { module: module.to_owned(), name: f.name.clone(), keys: Vec::new() };
    let cover_parent = |at: &Vec<Step>, sel: &mut Selection| {
        sel.exact = false;
        sel.targets.push(at.clone());
    };
    if attrs {
        return cover_parent(at, sel);
    }
    at.push(step);
    let Some(schema) = schema_facts(at) else {
        // Names nothing in the schema: selects nothing (no data can have it).
        at.pop();
        return;
    };
    if f.children.is_empty() {
        if !f.trimmed().is_empty() {
            // A content match at this level depends on the value: covered by the parent.
            at.pop();
            return cover_parent(at, sel);
        }
        sel.targets.push(at.clone());
        at.pop();
        return;
    }
    if !schema.container_or_list {
        at.pop();
        return cover_parent(at, sel);
    }
    let keys = schema.keys;
    let mut matches = Vec::new();
    let mut others = Vec::new();
    for c in &f.children {
        let content = c.children.is_empty() && !c.trimmed().is_empty();
        if content {
            matches.push(c);
        } else {
            others.push(c);
        }
    }
    for m in &matches {
        let same_module =
            m.ns.as_deref()
                .filter(|n| !n.is_empty())
                .is_none_or(|ns| module_of_ns(Some(ns)).as_deref() == Some(module));
        let key = keys.contains(&m.name);
        let attrs = m.attrs.iter().any(|a| a.ns.as_deref() != Some(crate::mgmt::ns::NS_BASE));
        let dup = at.last().is_some_and(|s| s.keys.iter().any(|(k, _)| *k == m.name));
        // A value holding both quote kinds has no XPath literal: the path could not be
        // evaluated (and a read falling back to everything would ask every provider).
        let unquotable = m.trimmed().contains('\'') && m.trimmed().contains('"');
        if !key || !same_module || attrs || dup || unquotable {
            // A content match on a non-key leaf selects by value: covered by this node.
            sel.exact = false;
            sel.targets.push(at.clone());
            at.pop();
            return;
        }
        if let Some(last) = at.last_mut() {
            last.keys.push((m.name.clone(), m.trimmed().to_owned()));
        }
    }
    if others.is_empty() {
        sel.targets.push(at.clone());
        at.pop();
        return;
    }
    if !matches.is_empty() {
        // An entry picked by key whose other children select nothing is still reported
        // (with its keys, subtree.rs): data-dependent, so covered by the whole entry.
        sel.exact = false;
        sel.targets.push(at.clone());
        at.pop();
        return;
    }
    for c in others {
        match c.ns.as_deref().filter(|n| !n.is_empty()) {
            None => subtree_node(c, module, at, sel),
            Some(ns) => {
                if let Some(cm) = module_of_ns(Some(ns)) {
                    subtree_node(c, &cm, at, sel);
                }
            }
        }
    }
    at.pop();
}

/// Splits at `sep` outside brackets, parentheses and quotes.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0usize);
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth -= 1,
            (None, c) if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses an absolute location path into steps: (steps, exact). Steps are cut at the
/// first one that cannot be expressed (exact = false then); None when even the first
/// step cannot (the whole datastore covers it).
fn path_steps(p: &str) -> Option<(Vec<Step>, bool)> {
    let p = p.trim();
    if !p.starts_with('/') || p.starts_with("//") {
        return None;
    }
    let mut steps: Vec<Step> = Vec::new();
    let parts = split_top(&p[1..], '/');
    for part in parts {
        let part = part.trim();
        let (name, preds) = match part.find('[') {
            Some(b) => (part[..b].trim(), &part[b..]),
            None => (part, ""),
        };
        let (module, local) = match name.split_once(':') {
            Some((m, l)) => (m.trim().to_owned(), l.trim()),
            None => match steps.last() {
                Some(s) => (s.module.clone(), name),
                None => return None,
            },
        };
        let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c));
        if part.is_empty() || !plain(local) || !plain(&module) || local == "." || local == ".." {
            // Cut here: sound only when the rest of the path only goes down from these
            // steps (names, `*`, `//`); an axis, `..`, a predicate or a function may read
            // anything (a parent, a sibling, an absolute path), so it covers everything.
            // `part` is a slice of `p` (split_top and trim slice, never copy).
            let rest = &p[(part.as_ptr() as usize).saturating_sub(p.as_ptr() as usize).min(p.len())..];
            if steps.is_empty() || rest.contains(['[', '(']) || rest.contains("..") || rest.contains("::") {
                return None;
            }
            return Some((steps, false));
        }
        steps.push(Step { module, name: local.to_owned(), keys: Vec::new() });
        // Not in the schema: libyang refuses the expression; let it say so.
        let schema = schema_facts(&steps)?;
        if !preds.is_empty() {
            let keys = schema.keys;
            match key_preds(preds, &keys) {
                Some(k) => {
                    if let Some(last) = steps.last_mut() {
                        last.keys = k;
                    }
                }
                // A predicate on other children of the entry (no path out of it: no
                // `..`, axis, function or `/`) is covered by the list's parent; any other
                // may read anywhere, so everything covers it.
                None => {
                    let local = !preds.contains("..") && !preds.contains("::") && !preds.contains(['(', '/']);
                    steps.pop();
                    return if steps.is_empty() || !local { None } else { Some((steps, false)) };
                }
            }
        }
    }
    Some((steps, true))
}

/// `[k='v'][k2="w"]` on list keys `keys` (each at most once), else None.
fn key_preds(s: &str, keys: &[String]) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let r = rest.strip_prefix('[')?;
        let (k, after) = r.split_once('=')?;
        let k = k.trim();
        let k = k.rsplit(':').next().unwrap_or(k);
        let after = after.trim_start();
        let q = after.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let end = after[1..].find(q)? + 1;
        let v = &after[1..end];
        let tail = after[end + 1..].trim_start().strip_prefix(']')?;
        if !keys.iter().any(|x| x == k) || out.iter().any(|(x, _)| x == k) {
            return None;
        }
        out.push((k.to_owned(), v.to_owned()));
        rest = tail.trim_start();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(m: &str, n: &str, keys: &[(&str, &str)]) -> Step {
        Step {
            module: m.into(),
            name: n.into(),
            keys: keys.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn issue14_xpath_key_paths_are_exact_and_others_covered() {
        let s = Selection::from_xpath("/cats-sma:cats-sma/metric-cache/entry[csci-id='a:1']");
        assert!(s.exact);
        assert_eq!(
            s.targets,
            vec![vec![
                step("cats-sma", "cats-sma", &[]),
                step("cats-sma", "metric-cache", &[]),
                step("cats-sma", "entry", &[("csci-id", "a:1")])
            ]]
        );
        let s = Selection::from_xpath("/cats-sma:cats-sma/metric-cache/entry[gas>5]");
        assert!(!s.exact);
        assert_eq!(s.targets[0].len(), 2);
        let s = Selection::from_xpath("//entry");
        assert!(!s.exact && s.is_all());
        let s = Selection::from_xpath("/cats-sma:cats-sma/statistics | /cats-sma:cats-sma/services/service/cs-id");
        assert!(s.exact);
        assert_eq!(s.targets.len(), 2);
        let s = Selection::from_xpath("/cats-sma:cats-sma/*");
        assert!(!s.exact);
        assert_eq!(s.targets, vec![vec![step("cats-sma", "cats-sma", &[])]]);
        let s = Selection::from_xpath("/ietf-netconf-acm:nacm/groups//name");
        assert!(!s.exact);
        assert_eq!(s.targets[0].len(), 2);
        // Whatever may read outside the steps before it is covered by everything: axes
        // that go up or sideways, `..`, predicates with paths or functions.
        for x in [
            "/ietf-netconf-acm:nacm/groups/parent::*",
            "/ietf-netconf-acm:nacm/groups/following-sibling::*",
            "/ietf-netconf-acm:nacm/groups/..",
            "/ietf-netconf-acm:nacm/groups/*/../..",
            "/ietf-netconf-acm:nacm/groups/group[user-name = /ietf-netconf-acm:nacm/rule-list/group]",
            "/ietf-netconf-acm:nacm/groups/group[count(user-name) > 1]",
            "/ietf-netconf-acm:nacm/groups/group[../../enable-nacm = 'true']",
            "/ietf-netconf-acm:nacm/groups/*[name='a']",
        ] {
            assert!(Selection::from_xpath(x).is_all(), "{x}");
        }
    }

    #[test]
    fn covering_reads_reach_what_subtree_filters_may_report() {
        let parse = |x: &str| crate::xml::parse(x).unwrap();
        // A key value with both quote kinds has no XPath literal: covered by the whole
        // list, so the covering path stays evaluable.
        let f = parse(
            "<filter><nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"><groups><group>\
             <name>a'b\"c</name></group></groups></nacm></filter>",
        );
        let s = Selection::from_subtree(&f);
        assert_eq!(
            s.targets,
            vec![vec![
                step("ietf-netconf-acm", "nacm", &[]),
                step("ietf-netconf-acm", "groups", &[]),
                step("ietf-netconf-acm", "group", &[])
            ]]
        );
        assert!(s.xpath().is_some_and(|x| !x.contains('[')));
        // An entry picked by key with children that may select nothing is reported with its
        // keys: the whole entry is covered.
        let f = parse(
            "<filter><nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"><groups><group>\
             <name>g</name><user-name/></group></groups></nacm></filter>",
        );
        let s = Selection::from_subtree(&f);
        assert!(!s.exact);
        assert_eq!(
            s.targets,
            vec![vec![
                step("ietf-netconf-acm", "nacm", &[]),
                step("ietf-netconf-acm", "groups", &[]),
                step("ietf-netconf-acm", "group", &[("name", "g")])
            ]]
        );
    }

    #[test]
    fn issue14_subtree_keys_are_exact_and_value_matches_covered() {
        let parse = |x: &str| crate::xml::parse(x).unwrap();
        let f = parse(
            "<filter><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache><entry>\
             <csci-id>x</csci-id></entry></metric-cache><statistics/></cats-sma></filter>",
        );
        let s = Selection::from_subtree(&f);
        assert!(s.exact);
        assert_eq!(s.targets.len(), 2);
        assert_eq!(s.targets[0][2], step("cats-sma", "entry", &[("csci-id", "x")]));
        let f = parse(
            "<filter><cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache><entry>\
             <gas>5</gas></entry></metric-cache></cats-sma></filter>",
        );
        let s = Selection::from_subtree(&f);
        assert!(!s.exact);
        assert_eq!(s.targets[0].len(), 3);
        let tree = s.tree();
        let sel = Sel::root(&tree);
        let e = sel.child("cats-sma", "cats-sma").unwrap().child("cats-sma", "metric-cache").unwrap();
        assert!(e.entry("cats-sma", "entry", &[("csci-id", "q")]).unwrap().is_all());
    }
}

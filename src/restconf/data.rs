//! Datastore and data resources (RFC 8040 sections 3.3.1, 3.5, 4.3-4.7) on the unified
//! `{+restconf}/data` view and on the RFC 8527 NMDA datastores (`{+restconf}/ds/<id>`).
//!
//! Reads go through [`Datastores::read`] and the NACM read filter, exactly as get-data;
//! edits are turned into an ordinary edit tree carrying `ietf-netconf:operation` metadata
//! and handed to [`Datastores::edit`] (or `copy` for a whole-datastore PUT), so the same
//! validation, NACM write checks, consumers (the engine) and errors apply as for NETCONF.

use crate::yang::PrintText as _;
use hyper::header::HeaderValue;
use hyper::Method;
use yang2::data::{Data, DataNodeRef, DataPrinterFlags, DataTree};
use yang2::schema::SchemaNodeKind;

use super::error::Failure;
use super::media::{self, BodyKind, Encoding};
use super::path::Target;
use super::query::{Content, Fields, Insert, Params};
use super::{get_reply, no_content, Caller, Reply, Req, Restconf};
use crate::datastore::{Datastore, EditOptions, Source};
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::with_defaults::WithDefaults;

/// Which datastore a URI names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// `{+restconf}/data`: reads see operational (config and state), edits go to running
    /// (RFC 8527 section 3.1).
    Unified,
    /// `{+restconf}/ds/ietf-datastores:<name>`.
    Nmda(Datastore),
}

impl Store {
    fn uri_prefix(self) -> String {
        match self {
            Store::Unified => "/restconf/data".into(),
            Store::Nmda(ds) => format!("/restconf/ds/{}", ds.identity()),
        }
    }

    /// The datastore edits go to, or 405 for the read-only ones.
    fn edit_target(self) -> Result<Datastore, Failure> {
        match self {
            Store::Unified => Ok(Datastore::Running),
            Store::Nmda(ds @ (Datastore::Running | Datastore::Candidate | Datastore::Startup)) => Ok(ds),
            Store::Nmda(ds) => {
                Err(Failure::method(self.allow(), format!("{} is read-only (RFC 8527 section 3.2)", ds.identity())))
            }
        }
    }

    fn allow(self) -> &'static str {
        match self {
            Store::Nmda(Datastore::Intended | Datastore::Operational) => "GET, HEAD, OPTIONS",
            _ => "GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE",
        }
    }

    /// Whether ETag / Last-Modified describe this datastore (running and its views).
    fn has_validators(self) -> bool {
        matches!(self, Store::Unified | Store::Nmda(Datastore::Running | Datastore::Intended))
    }
}

fn ly(e: yang2::Error) -> RpcError {
    RpcError::from_libyang(&e)
}

pub async fn handle(rc: &Restconf, caller: &Caller, req: &Req, store: Store, raw: &str) -> Result<Reply, Failure> {
    let target = Target::parse(raw)?;
    let params = Params::parse(&req.method, &req.query, false)?;
    let m = req.method.clone();
    if m == Method::OPTIONS {
        let mut r = no_content(200);
        r.headers_mut().insert("allow", HeaderValue::from_static(store.allow()));
        r.headers_mut().insert("accept-patch", HeaderValue::from_static("application/yang-data+json, application/yang-data+xml, application/yang-patch+json, application/yang-patch+xml"));
        return Ok(r);
    }
    tokio::task::block_in_place(|| match m {
        Method::GET | Method::HEAD => get(rc, caller, req, store, &target, &params),
        Method::PUT => put(rc, caller, req, store, &target, &params),
        Method::POST => post(rc, caller, req, store, &target, &params),
        Method::PATCH => patch(rc, caller, req, store, &target),
        Method::DELETE => delete(rc, caller, req, store, &target),
        other => {
            let mut f = Failure::method(store.allow(), format!("{other} is not a RESTCONF method"));
            f.errors[0].message.push_str(&format!("; allowed: {}", store.allow()));
            Err(f)
        }
    })
}

// ----- validators (RFC 8040 section 3.4.1, RFC 7232) ------------------------------------

/// The strong entity-tag of a representation: the version of running and the encoding, so
/// the JSON and the XML representation of one state differ (RFC 8040 section 3.4.1.2, RFC
/// 7232 section 2.3.3).
fn etag(rc: &Restconf, enc: Encoding) -> String {
    etag_of(rc.core.datastores.running_version(), enc)
}

fn etag_of(version: u64, enc: Encoding) -> String {
    let suffix = match enc {
        Encoding::Json => "json",
        Encoding::Xml => "xml",
    };
    format!("\"{version}-{suffix}\"")
}

fn http_date(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn parse_http_date(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::NaiveDateTime::parse_from_str(s.trim(), "%a, %d %b %Y %H:%M:%S GMT").ok().map(|n| n.and_utc())
}

fn tag_matches(list: &str, current: &str) -> bool {
    list.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == current)
}

fn add_validators(rc: &Restconf, store: Store, enc: Encoding, r: &mut Reply) {
    if !store.has_validators() {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&etag(rc, enc)) {
        r.headers_mut().insert("etag", v);
    }
    if let Ok(v) = HeaderValue::from_str(&http_date(rc.last_modified.get())) {
        r.headers_mut().insert("last-modified", v);
    }
}

/// If-None-Match / If-Modified-Since on a read: Some(304) when the client's copy is current.
fn not_modified(rc: &Restconf, req: &Req, store: Store) -> Option<Reply> {
    if !store.has_validators() {
        return None;
    }
    let fresh = if let Some(inm) = req.header("if-none-match") {
        // Weak comparison (RFC 7232 3.2), against the representation this GET returns.
        tag_matches(inm, &etag(rc, req.accept))
    } else if let Some(ims) = req.header("if-modified-since").and_then(parse_http_date) {
        rc.last_modified.get() <= ims
    } else {
        false
    };
    fresh.then(|| {
        let mut r = no_content(304);
        add_validators(rc, store, req.accept, &mut r);
        r
    })
}

/// If-Match / If-Unmodified-Since on an edit: 412 when the client's copy is stale.
fn precondition(rc: &Restconf, req: &Req, store: Store) -> Result<(), Failure> {
    let failed = |what: &str| {
        Err(Failure::status(
            412,
            ErrorTag::OperationFailed,
            format!("precondition failed: {what} (the datastore changed)"),
        ))
    };
    if let Some(im) = req.header("if-match") {
        // Either representation's tag names the current state: an edit does not change
        // one representation without the other.
        let current = |enc| tag_matches(im, &etag(rc, enc));
        if !store.has_validators() || !(current(Encoding::Json) || current(Encoding::Xml)) {
            return failed("If-Match");
        }
    }
    if let Some(ius) = req.header("if-unmodified-since").and_then(parse_http_date) {
        if store.has_validators() && rc.last_modified.get() > ius {
            return failed("If-Unmodified-Since");
        }
    }
    Ok(())
}

// ----- GET / HEAD -------------------------------------------------------------------------

/// Subtrees whose configuration nodes also have instances only the operational state holds
/// (dynamic subscriptions are `subscriptions/subscription` entries, config true, never in
/// running): below them operational is not running even where the schema is all config.
const OPERATIONAL_INSTANCES: &[&str] = &["ietf-subscribed-notifications"];

/// Whether nothing below `target` is state (so operational equals running there).
fn config_only(target: &Target) -> bool {
    if target.steps.first().is_some_and(|s| OPERATIONAL_INSTANCES.contains(&s.module.as_str())) {
        return false;
    }
    match target.schema() {
        Some(s) => s.traverse().all(|n| n.is_config()),
        None => false,
    }
}

fn get(rc: &Restconf, caller: &Caller, req: &Req, store: Store, target: &Target, p: &Params) -> Result<Reply, Failure> {
    if let Some(r) = not_modified(rc, req, store) {
        return Ok(r);
    }
    let ds = match store {
        Store::Unified if p.content == Content::Config => Datastore::Running,
        // Operational is running plus rendered state; below a node that has no state it is
        // running itself, which is read without copying the whole tree.
        Store::Unified | Store::Nmda(Datastore::Operational) if config_only(target) => Datastore::Running,
        Store::Unified => Datastore::Operational,
        Store::Nmda(ds) => ds,
    };
    let xpath = if target.is_root() { None } else { Some(target.data_path()?) };
    if let Some(r) = typed_get(rc, caller, req, store, target, p, ds, xpath.as_deref())? {
        return Ok(r);
    }
    // NACM prunes the snapshot before the target, content, depth and fields look at it, so
    // none of them can tell apart data the caller may not read (issue 11 class 1).
    let mut tree = rc.core.nacm.read(&rc.core.datastores, &caller.user, ds, xpath.as_deref())?.into_tree();
    let mut doomed = Vec::new();
    if let Some(first) = tree.reference() {
        for top in first.inclusive_siblings() {
            content_filter(&top, p.content, &mut doomed);
        }
    }
    remove_all(&mut tree, doomed);
    // The target nodes (several for a whole list or leaf-list).
    let nodes: Vec<String> = match &xpath {
        None => tree.reference().map(|f| f.inclusive_siblings().map(|n| n.path()).collect()).unwrap_or_default(),
        Some(_) if tree.reference().is_none() => Vec::new(),
        Some(x) => tree.find_xpath(x).map_err(ly)?.map(|n| n.path()).collect(),
    };
    if xpath.is_some() && nodes.is_empty() {
        return Err(
            Failure::not_found(format!("no data at {}", target.uri())).with_path(xpath.as_deref().unwrap_or("/"))
        );
    }
    let fields = p.fields.as_deref().map(Fields::parse).transpose()?;
    if let Some(f) = &fields {
        let base: String = target.steps.iter().map(|s| format!("/{}:{}", s.module, s.name)).collect();
        f.check(&base, target.last().map(|s| s.module.as_str()))?;
    }
    let mut doomed = Vec::new();
    for n in &nodes {
        let node = tree.find_path(n).map_err(ly)?;
        if let Some(d) = p.depth {
            depth_prune(&node, 1, d, &mut doomed);
        }
        if let Some(f) = &fields {
            // fields is relative to the target; for the datastore the top-level nodes are
            // its first level.
            if target.is_root() {
                fields_prune(&node, f, &mut doomed);
            } else {
                for c in node.children() {
                    fields_prune(&c, f, &mut doomed);
                }
            }
        }
    }
    remove_all(&mut tree, doomed);
    let wd = p.with_defaults.unwrap_or(WithDefaults::Explicit);
    let keep_empty = p.depth.is_some() || p.fields.is_some();
    let body = if target.is_root() {
        print_root(&tree, req.accept, wd, keep_empty)?
    } else {
        let nodes: Vec<String> = nodes.into_iter().filter(|n| tree.find_path(n).is_ok()).collect();
        print_nodes(&tree, &nodes, req.accept, wd, keep_empty)?
    };
    let mut r = get_reply(req, req.accept, body);
    add_validators(rc, store, req.accept, &mut r);
    Ok(r)
}

/// A GET of operational state a typed provider serves (DESIGN decision 2): the target
/// rendered from typed data, or None for the libyang path (also when there is no data, so
/// that path says 404 as it does).
#[allow(clippy::too_many_arguments)]
fn typed_get(
    rc: &Restconf,
    caller: &Caller,
    req: &Req,
    store: Store,
    target: &Target,
    p: &Params,
    ds: Datastore,
    xpath: Option<&str>,
) -> Result<Option<Reply>, Failure> {
    use crate::datastore::render::{read_typed, Format, Options};
    let Some(xpath) = xpath else { return Ok(None) };
    if ds != Datastore::Operational || p.depth.is_some() || p.fields.is_some() || p.content == Content::Config {
        return Ok(None);
    }
    let Some(access) = rc.core.nacm.read_access(&caller.user) else { return Ok(None) };
    let sel = crate::datastore::select::Selection::from_instance_path(xpath);
    // The ancestors of the target are not printed: a container is one level, a list
    // entry two (the list and the entry).
    let n = target.steps.len();
    let skip = target.steps[..n.saturating_sub(1)].iter().map(|s| if s.keys.is_empty() { 1 } else { 2 }).sum();
    let format = match req.accept {
        Encoding::Json => Format::Json,
        Encoding::Xml => Format::Xml,
    };
    let wd = p.with_defaults.unwrap_or(WithDefaults::Explicit);
    let opts = Options { format, skip, max_depth: None, with_defaults: wd };
    let Some(text) = read_typed(&rc.core.datastores, &sel, &access, opts)? else { return Ok(None) };
    if text.is_empty() {
        return Ok(None);
    }
    let body = match format {
        Format::Json => format!("{{{text}}}"),
        Format::Xml => text,
    };
    let mut r = get_reply(req, req.accept, body);
    add_validators(rc, store, req.accept, &mut r);
    Ok(Some(r))
}

fn remove_all(tree: &mut DataTree<'static>, mut doomed: Vec<String>) {
    // Deepest first, so a parent never goes before its doomed children are found.
    doomed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in doomed {
        let _ = crate::datastore::tree::remove(tree, &p);
    }
}

fn has_state(n: &DataNodeRef<'_, '_>) -> bool {
    n.traverse().any(|d| !d.schema().is_config())
}

/// content=config drops state, content=nonconfig drops configuration without state below
/// (RFC 8040 section 4.8.1).
fn content_filter(n: &DataNodeRef<'_, '_>, content: Content, out: &mut Vec<String>) {
    let s = n.schema();
    if s.is_list_key() {
        return;
    }
    let drop = match content {
        Content::All => return,
        Content::Config => !s.is_config(),
        Content::Nonconfig => s.is_config() && !has_state(n),
    };
    if drop {
        out.push(n.path());
        return;
    }
    for c in n.children() {
        content_filter(&c, content, out);
    }
}

/// depth (RFC 8040 section 4.8.2): the target is level 1; list keys stay to identify entries.
fn depth_prune(n: &DataNodeRef<'_, '_>, level: usize, max: usize, out: &mut Vec<String>) {
    for c in n.children() {
        if c.schema().is_list_key() {
            continue;
        }
        if level + 1 > max {
            out.push(c.path());
        } else {
            depth_prune(&c, level + 1, max, out);
        }
    }
}

/// fields (RFC 8040 section 4.8.3).
fn fields_prune(n: &DataNodeRef<'_, '_>, f: &Fields, out: &mut Vec<String>) {
    let s = n.schema();
    if s.is_list_key() {
        return;
    }
    match f.child(s.module().name(), s.name()) {
        None => out.push(n.path()),
        Some(sub) if sub.children.is_empty() => {}
        Some(sub) => {
            for c in n.children() {
                fields_prune(&c, sub, out);
            }
        }
    }
}

fn printer_flags(wd: WithDefaults, keep_empty: bool) -> DataPrinterFlags {
    let mut f = DataPrinterFlags::SHRINK | wd.printer_flags();
    if keep_empty {
        f |= DataPrinterFlags::KEEP_EMPTY_CONT;
    }
    f
}

fn finish_xml(s: String, wd: WithDefaults) -> String {
    if wd == WithDefaults::ReportAllTagged {
        crate::mgmt::with_defaults::fix_default_attribute_ns(s)
    } else {
        s
    }
}

/// The datastore resource: `{"ietf-restconf:data": {...}}` / `<data xmlns=…restconf>`.
fn print_root(tree: &DataTree<'static>, enc: Encoding, wd: WithDefaults, keep_empty: bool) -> Result<String, Failure> {
    let printed = if tree.reference().is_some() {
        tree.print_text(enc.format(), printer_flags(wd, keep_empty) | DataPrinterFlags::WITH_SIBLINGS)
            .map_err(ly)?
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(match enc {
        Encoding::Json => {
            let inner = if printed.trim().is_empty() { "{}" } else { printed.trim() };
            format!("{{\"ietf-restconf:data\":{inner}}}")
        }
        Encoding::Xml => finish_xml(format!("<data xmlns=\"{}\">{printed}</data>", super::error::NS_RESTCONF), wd),
    })
}

/// A data resource: the target node itself (all instances for a whole list / leaf-list).
fn print_nodes(
    tree: &DataTree<'static>,
    paths: &[String],
    enc: Encoding,
    wd: WithDefaults,
    keep_empty: bool,
) -> Result<String, Failure> {
    let mut parts = Vec::with_capacity(paths.len());
    for p in paths {
        let node = tree.find_path(p).map_err(ly)?;
        let printed = node.print_text(enc.format(), printer_flags(wd, keep_empty)).map_err(ly)?.unwrap_or_default();
        let t = printed.trim();
        if t.is_empty() || t == "{}" {
            // A container holding only defaults the mode hides: still the resource, empty.
            let s = node.schema();
            let m = s.module();
            parts.push(match enc {
                Encoding::Json => format!("{{\"{}:{}\":{{}}}}", m.name(), s.name()),
                Encoding::Xml => format!("<{} xmlns=\"{}\"/>", s.name(), m.namespace()),
            });
        } else {
            parts.push(printed);
        }
    }
    Ok(match enc {
        Encoding::Xml => finish_xml(parts.concat(), wd),
        Encoding::Json if parts.len() == 1 => parts.pop().unwrap_or_default(),
        Encoding::Json => {
            // Several instances of one list: one member with all the entries.
            let mut merged = serde_json::Map::new();
            for part in parts {
                let v: serde_json::Value = serde_json::from_str(&part)
                    .map_err(|e| RpcError::application(ErrorTag::OperationFailed, format!("encoding: {e}")))?;
                if let serde_json::Value::Object(o) = v {
                    for (k, v) in o {
                        match (merged.get_mut(&k), v) {
                            (Some(serde_json::Value::Array(a)), serde_json::Value::Array(b)) => a.extend(b),
                            (_, v) => {
                                merged.insert(k, v);
                            }
                        }
                    }
                }
            }
            serde_json::Value::Object(merged).to_string()
        }
    })
}

// ----- edits ------------------------------------------------------------------------------

/// The encoding of a data body; a YANG Patch media type is for PATCH only.
fn data_body(req: &Req) -> Result<Encoding, Failure> {
    match media::content_type(req.header("content-type"))? {
        BodyKind::Data(e) => Ok(e),
        BodyKind::Patch(_) => {
            Err(Failure::status(415, ErrorTag::InvalidValue, "a YANG Patch body is only accepted with PATCH"))
        }
    }
}

/// Checks that a body is well-formed JSON / XML before libyang sees it, so syntax errors are
/// malformed-message and not a libyang parse message.
/// Both also hold the body to the message limits, nesting first: libyang's XML and JSON
/// parsers recurse once per level.
pub fn check_syntax(body: &[u8], enc: Encoding) -> Result<(), Failure> {
    let bad = |m: String| Failure::bad(ErrorTag::MalformedMessage, m);
    let limits = crate::config::message_limits::get();
    match enc {
        Encoding::Json => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map_err(|e| bad(format!("the body is not JSON: {e}")))?;
            json_within(body, limits).map_err(bad)
        }
        Encoding::Xml => {
            let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8".into()))?;
            crate::xml::parse_with(text, limits)
                .map(|_| ())
                .map_err(|e| bad(format!("the XML body is refused: {}", e.0)))
        }
    }
}

/// Holds well-formed JSON to the nesting and size limits of a message (an object member or
/// an array counts as an element), in one pass without recursion.
fn json_within(body: &[u8], limits: &crate::config::message_limits::MessageLimits) -> Result<(), String> {
    let (mut depth, mut elements, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                elements += 1;
                if depth > limits.max_depth {
                    return Err(format!("the body nests deeper than {} levels", limits.max_depth));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' => elements += 1,
            _ => continue,
        }
        if elements > limits.max_elements {
            return Err(format!("the body has more than {} members", limits.max_elements));
        }
    }
    Ok(())
}

/// A libyang error about the content of a request body is the client's fault.
fn body_error(mut e: RpcError) -> Failure {
    if e.tag == ErrorTag::OperationFailed {
        e.tag = ErrorTag::InvalidValue;
    }
    e.into()
}

/// An edit tree: the ancestors of `parent` (created from the path) with the body parsed
/// below them. Returns the tree and the paths of the nodes the body holds.
pub fn parse_body_under(
    rc: &Restconf,
    parent: &Target,
    body: &[u8],
    enc: Encoding,
) -> Result<(DataTree<'static>, Vec<String>), Failure> {
    check_syntax(body, enc)?;
    if parent.is_root() {
        let tree = rc.core.datastores.parse_edit(body, enc.format()).map_err(body_error)?;
        let paths = tree.reference().map(|f| f.inclusive_siblings().map(|n| n.path()).collect()).unwrap_or_default();
        return Ok((tree, paths));
    }
    let ctx = crate::yang::context();
    let mut tree = DataTree::new(ctx);
    let ppath = parent.data_path()?;
    tree.new_path(&ppath, None, false).map_err(ly)?;
    let paths = super::yangdata::parse_under(&mut tree, &ppath, body, enc.format()).map_err(body_error)?;
    Ok((tree, paths))
}

/// The body of a PUT / PATCH: exactly the target resource, keys as in the URI.
fn parse_target_body(
    rc: &Restconf,
    target: &Target,
    body: &[u8],
    enc: Encoding,
) -> Result<(DataTree<'static>, String), Failure> {
    let (tree, paths) = parse_body_under(rc, &target.parent(), body, enc)?;
    let want = target.data_path()?;
    let bad = |m: String| Failure::bad(ErrorTag::InvalidValue, m).with_path(&want);
    if paths.len() != 1 {
        return Err(bad(format!(
            "the body must hold exactly one instance of the target resource, not {}",
            paths.len()
        )));
    }
    let found = tree.find_path(&want).map(|n| n.path()).ok();
    if found.as_deref() != Some(paths[0].as_str()) {
        return Err(bad(format!(
            "the body holds {} but the URI names {} (a key value in the body differs from the URI?)",
            paths[0], want
        )));
    }
    Ok((tree, paths[0].clone()))
}

fn exists(rc: &Restconf, ds: Datastore, path: &str) -> Result<bool, Failure> {
    Ok(rc.core.datastores.with_tree(ds, |t| t.find_path(path).is_ok())?)
}

/// Whether the resource exists (a non-presence container always exists, RFC 7950 7.5.1).
fn resource_exists(rc: &Restconf, ds: Datastore, target: &Target) -> Result<bool, Failure> {
    if target.is_root() {
        return Ok(true);
    }
    // The deepest step that is an instance of its own: a list entry, leaf, leaf-list entry
    // or presence container.
    let mut upto = 0;
    for (i, s) in target.steps.iter().enumerate() {
        let t = Target { steps: target.steps[..=i].to_vec() };
        let counts = match s.kind {
            SchemaNodeKind::Container => t.schema().is_some_and(|sc| sc.is_np_container_presence()),
            _ => true,
        };
        if counts {
            upto = i + 1;
        }
    }
    if upto == 0 {
        return Ok(true);
    }
    let t = Target { steps: target.steps[..upto].to_vec() };
    exists(rc, ds, &t.data_path()?)
}

trait Presence {
    fn is_np_container_presence(&self) -> bool;
}

impl Presence for yang2::schema::SchemaNode<'_> {
    /// Whether a container has presence meaning (RFC 7950 7.5.1).
    fn is_np_container_presence(&self) -> bool {
        // SAFETY: a container schema node is a lysc_node_container; LYS_PRESENCE is a flag
        // of the common node header, read without any mutation.
        unsafe { (*self.as_raw()).flags & yang2::ffi::LYS_PRESENCE as u16 != 0 }
    }
}

/// The RFC 8040 section 1.4 rule: with :candidate and :writable-running, a RESTCONF edit of
/// running is refused while a NETCONF session holds the candidate lock.
fn candidate_free(rc: &Restconf, caller: &Caller, ds: Datastore) -> Result<(), Failure> {
    if ds != Datastore::Running {
        return Ok(());
    }
    match rc.core.datastores.lock_holder(Datastore::Candidate) {
        Some(holder) if holder != caller.session => Err(RpcError::protocol(
            ErrorTag::InUse,
            format!("the candidate is locked by session {holder}; RESTCONF edits wait for it (RFC 8040 section 1.4)"),
        )
        .with_session_id(holder)
        .into()),
        _ => Ok(()),
    }
}

/// insert / point (RFC 8040 sections 4.8.5 and 4.8.6) as the YANG insert metadata.
fn add_insert(tree: &DataTree<'static>, node: &str, p: &Params, store: Store) -> Result<(), Failure> {
    let Some(insert) = p.insert else { return Ok(()) };
    let found = tree.find_path(node).map_err(ly)?;
    let schema = found.schema();
    if !schema.is_user_ordered() {
        return Err(Failure::bad(
            ErrorTag::InvalidValue,
            "insert applies to ordered-by user lists and leaf-lists only",
        ));
    }
    super::yangdata::add_meta(tree, node, "yang:insert", insert.as_str())?;
    if matches!(insert, Insert::Before | Insert::After) {
        let point = p.point.as_deref().unwrap_or("");
        let raw = point.strip_prefix(&store.uri_prefix()).filter(|r| r.starts_with('/')).unwrap_or(point);
        let anchor = Target::parse(raw)?;
        let last = anchor.last().filter(|s| s.name == schema.name() && !s.keys.is_empty()).ok_or_else(|| {
            Failure::bad(ErrorTag::InvalidValue, format!("point \"{point}\" is not an instance of {}", schema.name()))
        })?;
        if schema.kind() == SchemaNodeKind::List {
            let pred: String = last.keys.iter().map(|(k, v)| format!("[{k}='{v}']")).collect();
            super::yangdata::add_meta(tree, node, "yang:key", &pred)?;
        } else {
            super::yangdata::add_meta(tree, node, "yang:value", &last.keys[0].1)?;
        }
    }
    Ok(())
}

/// Applies an edit tree parsed for this request (handed over: what it creates is moved).
fn run_edit(rc: &Restconf, caller: &Caller, ds: Datastore, tree: DataTree<'static>) -> Result<(), Failure> {
    rc.core.datastores.edit_owned(caller.session, ds, tree, EditOptions::default()).map(|_| ()).map_err(Failure::from)
}

/// The body of a whole-datastore PUT: the `ietf-restconf:data` wrapper's content.
fn unwrap_datastore_body(body: &[u8], enc: Encoding) -> Result<Vec<u8>, Failure> {
    check_syntax(body, enc)?;
    match enc {
        Encoding::Json => {
            let v: serde_json::Value = serde_json::from_slice(body)
                .map_err(|e| Failure::bad(ErrorTag::MalformedMessage, format!("the body is not JSON: {e}")))?;
            match v.get("ietf-restconf:data") {
                Some(inner) => Ok(inner.to_string().into_bytes()),
                None => Ok(body.to_vec()),
            }
        }
        Encoding::Xml => {
            let text = std::str::from_utf8(body).unwrap_or_default();
            let el = crate::xml::parse_with(text, crate::config::message_limits::get())
                .map_err(|e| Failure::bad(ErrorTag::MalformedMessage, format!("the XML body is refused: {}", e.0)))?;
            if el.name == "data" && el.ns.as_deref() == Some(super::error::NS_RESTCONF) {
                el.children_text(text).map(String::into_bytes).map_err(|e| Failure::status(413, ErrorTag::TooBig, e.0))
            } else {
                Ok(body.to_vec())
            }
        }
    }
}

fn put(rc: &Restconf, caller: &Caller, req: &Req, store: Store, target: &Target, p: &Params) -> Result<Reply, Failure> {
    let ds = store.edit_target()?;
    let enc = data_body(req)?;
    precondition(rc, req, store)?;
    candidate_free(rc, caller, ds)?;
    if target.is_root() {
        // RFC 8040 4.5: PUT on the datastore replaces its whole content.
        let inner = unwrap_datastore_body(&req.body, enc)?;
        let text = if inner.iter().all(|b| b.is_ascii_whitespace()) || inner == b"{}" { Vec::new() } else { inner };
        let tree = if text.is_empty() {
            DataTree::new(crate::yang::context())
        } else {
            rc.core.datastores.parse_config(&text, enc.format()).map_err(body_error)?
        };
        rc.core.datastores.copy(caller.session, Source::Config(&tree), ds)?;
        return Ok(edited(rc, req, store, 204));
    }
    if !target.is_single_instance() {
        return Err(Failure::bad(ErrorTag::InvalidValue, "PUT needs the key values of every list in the URI"));
    }
    let (tree, node) = parse_target_body(rc, target, &req.body, enc)?;
    super::yangdata::add_meta(&tree, &node, "ietf-netconf:operation", "replace")?;
    add_insert(&tree, &node, p, store)?;
    let existed = exists(rc, ds, &node)?;
    run_edit(rc, caller, ds, tree)?;
    Ok(edited(rc, req, store, if existed { 204 } else { 201 }))
}

/// The reply to an edit, with the new entity-tag of the representation the client accepts.
fn edited(rc: &Restconf, req: &Req, store: Store, status: u16) -> Reply {
    let mut r = no_content(status);
    add_validators(rc, store, req.accept, &mut r);
    r
}

fn post(
    rc: &Restconf,
    caller: &Caller,
    req: &Req,
    store: Store,
    target: &Target,
    p: &Params,
) -> Result<Reply, Failure> {
    let ds = store.edit_target()?;
    let enc = data_body(req)?;
    precondition(rc, req, store)?;
    candidate_free(rc, caller, ds)?;
    if let Some(s) = target.last() {
        if matches!(s.kind, SchemaNodeKind::Leaf | SchemaNodeKind::LeafList) {
            return Err(Failure::method(
                "GET, HEAD, OPTIONS, PUT, PATCH, DELETE",
                "POST creates a child resource: a leaf has none",
            ));
        }
        if s.kind == SchemaNodeKind::List && s.keys.is_empty() {
            return Err(Failure::bad(ErrorTag::InvalidValue, "POST of a list entry goes to the list's parent"));
        }
    }
    if !resource_exists(rc, ds, target)? {
        return Err(Failure::not_found(format!("the parent resource {} does not exist", target.uri())));
    }
    let (tree, paths) = parse_body_under(rc, target, &req.body, enc)?;
    if paths.len() != 1 {
        return Err(Failure::bad(
            ErrorTag::InvalidValue,
            format!("a POST body must hold exactly one child resource, not {}", paths.len()),
        ));
    }
    let node = &paths[0];
    super::yangdata::add_meta(&tree, node, "ietf-netconf:operation", "create")?;
    add_insert(&tree, node, p, store)?;
    let created = target.child_of_node(&tree.find_path(node).map_err(ly)?);
    run_edit(rc, caller, ds, tree)?;
    let mut r = edited(rc, req, store, 201);
    if let Ok(v) = HeaderValue::from_str(&format!("{}{}", store.uri_prefix(), created.uri())) {
        r.headers_mut().insert("location", v);
    }
    Ok(r)
}

fn patch(rc: &Restconf, caller: &Caller, req: &Req, store: Store, target: &Target) -> Result<Reply, Failure> {
    let ds = store.edit_target()?;
    let kind = media::content_type(req.header("content-type"))?;
    precondition(rc, req, store)?;
    candidate_free(rc, caller, ds)?;
    let enc = match kind {
        BodyKind::Patch(enc) => return super::yang_patch::apply(rc, caller, req, store, ds, target, enc),
        BodyKind::Data(enc) => enc,
    };
    if target.is_root() {
        // A plain patch of the datastore merges its content (RFC 8040 4.6.1).
        let inner = unwrap_datastore_body(&req.body, enc)?;
        let (tree, _) = parse_body_under(rc, target, &inner, enc)?;
        run_edit(rc, caller, ds, tree)?;
        return Ok(edited(rc, req, store, 204));
    }
    if !target.is_single_instance() {
        return Err(Failure::bad(ErrorTag::InvalidValue, "PATCH needs the key values of every list in the URI"));
    }
    // RFC 8040 4.6.1: a plain patch never creates the target resource.
    if !resource_exists(rc, ds, target)? {
        return Err(Failure::not_found(format!("{} does not exist (PATCH does not create it)", target.uri()))
            .with_path(&target.data_path()?));
    }
    let (tree, node) = parse_target_body(rc, target, &req.body, enc)?;
    super::yangdata::add_meta(&tree, &node, "ietf-netconf:operation", "merge")?;
    run_edit(rc, caller, ds, tree)?;
    Ok(edited(rc, req, store, 204))
}

/// An edit tree deleting `target` (used by DELETE and YANG Patch delete/remove).
pub fn deletion_tree(rc: &Restconf, ds: Datastore, target: &Target, op: &str) -> Result<DataTree<'static>, Failure> {
    let path = target.data_path()?;
    let mut tree = DataTree::new(crate::yang::context());
    let value = match target.last().map(|s| s.kind) {
        // A leaf is created with its current value (any value would do for delete, but it
        // must be valid for the type).
        Some(SchemaNodeKind::Leaf) => {
            let v = rc.core.datastores.with_tree(ds, |t| t.find_path(&path).ok().and_then(|n| n.value_canonical()))?;
            match v {
                Some(v) => Some(v),
                None if op == "remove" => return Ok(tree),
                None => {
                    return Err(RpcError::application(ErrorTag::DataMissing, format!("{path} does not exist"))
                        .with_path(path)
                        .into())
                }
            }
        }
        _ => None,
    };
    tree.new_path(&path, value.as_deref(), false).map_err(ly)?;
    super::yangdata::add_meta(&tree, &path, "ietf-netconf:operation", op)?;
    Ok(tree)
}

fn delete(rc: &Restconf, caller: &Caller, req: &Req, store: Store, target: &Target) -> Result<Reply, Failure> {
    let ds = store.edit_target()?;
    if target.is_root() {
        return Err(Failure::method(
            "GET, HEAD, OPTIONS, POST, PUT, PATCH",
            "a datastore cannot be deleted with DELETE",
        ));
    }
    if !target.is_single_instance() {
        return Err(Failure::bad(ErrorTag::InvalidValue, "DELETE needs the key values of every list in the URI"));
    }
    precondition(rc, req, store)?;
    candidate_free(rc, caller, ds)?;
    let tree = deletion_tree(rc, ds, target, "delete")?;
    run_edit(rc, caller, ds, tree)?;
    Ok(edited(rc, req, store, 204))
}

//! What a subordinate C-SMA pushes to its coordinator (seed 004, Scalability), as typed
//! changes: one NETCONF `<notification>` (RFC 5277's envelope, as RFC 8640 carries RFC 8639
//! and RFC 8641 notifications) of the coordinator's on-change subscription to the
//! subordinate's `metric-cache` and `services`.
//!
//! The subordinate is a peer, not a part of this agent: it may be another implementation
//! (its own namespace prefixes, whitespace between elements, edits at any level RFC 8072
//! allows) or a compromised agent. So the message is read once, streaming, with quick-xml's
//! namespace-resolving reader, and nothing is built but the typed result: input size,
//! element depth, item count, text length and the namespace bindings in scope are bounded,
//! identifiers and numbers are checked against their YANG types before they are kept,
//! DTDs are refused, and nothing recurses. What the decoder does not know — other
//! modules' leaves, other notifications, other parts of the datastore — it passes over
//! rather than refuses, as a YANG client must for a server newer than itself.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use quick_xml::events::{BytesRef, BytesStart, Event as Xml};
use quick_xml::name::{Namespace, QName, ResolveResult};
use quick_xml::reader::NsReader;

use crate::engine::report::{check_id, IdKind};
use crate::mgmt::events::NS_NOTIFICATION;
use crate::push::{NS_SN, NS_YP};
use crate::restconf::yang_patch::NS_YANG_PATCH;

/// The `namespace` of yang/cats-sma.yang.
const NS_CATS: &str = "urn:cats-sma:yang:cats-sma";
/// Its module name: RESTCONF targets (RFC 8040 section 3.5.3) name modules, where XML
/// instance-identifiers name namespace prefixes.
const MODULE: &str = "cats-sma";

/// The deepest nesting accepted. Our own deepest message has 10 levels (notification,
/// push-change-update, datastore-changes, yang-patch, edit, value, cats-sma,
/// metric-cache, entry, leaf); the rest is room for other servers, and a hostile nest
/// is refused long before it costs anything.
const MAX_DEPTH: usize = 32;
/// The longest text kept of one element: a csci-id is at most 255 characters (1020
/// bytes), and a target carries one percent-encoded (three bytes per byte) plus its path.
const MAX_TEXT: usize = 4096;
/// Namespace bindings in scope at once: quick-xml resolves a prefix by scanning them, so
/// this bounds the work per element (a handful are in scope in any real message).
const MAX_BINDINGS: usize = 64;
/// The longest notification or identity name kept (they are logged).
const MAX_NAME: usize = 128;
/// Steps of a target looked at: ours are at most 4 deep (cats-sma, metric-cache, entry,
/// leaf), so a fifth step says the node is none of ours without reading further.
const MAX_STEPS: usize = 4;

/// The leaves of `metric-cache/entry` typed here; the others (flags, discovery,
/// authentication, times of state changes) do not feed the coordinator and are passed over.
/// (Statics, so that slices of them are `'static` like the names a [`Role`] keeps.)
static SCI_LEAVES: [&str; 11] = [
    "csci-id",
    "cs-id",
    "gas",
    "computing-time",
    "health",
    "cost",
    "reputation",
    "security-label",
    "timestamp",
    "sequence-number",
    "state",
];
/// The leaves of `services/service` typed here.
static SERVICE_LEAVES: [&str; 9] = [
    "cs-id",
    "site-gas",
    "computing-time",
    "health",
    "sci-count",
    "healthy-sci-count",
    "cost",
    "reputation",
    "security-label",
];
/// `csmat:health-status` (yang/cats-sma-types.yang).
const HEALTH: [&str; 3] = ["healthy", "degraded", "unhealthy"];
/// `csmat:sci-state`.
const SCI_STATE: [&str; 4] = ["active", "healthy", "stale", "failed"];
/// `csmat:computing-time`'s range: the subordinate validated it, a value beyond it did not
/// come from a sound one.
const MAX_COMPUTING_TIME: u64 = 3_600_000;
/// `csmat:reputation` and `csmat:security-label`.
const MAX_SCORE: u64 = 10;

/// Bounds the caller sets per subordinate: what one notification may cost before it is
/// refused (a push-update lists the subordinate's whole cache, so the caller knows how
/// large that may legitimately be).
pub struct Limits {
    /// The whole message, in bytes.
    pub max_bytes: usize,
    /// Entries, services and edits together (the items that allocate).
    pub max_items: usize,
}

/// One SCI's metric-cache entry as the subordinate shows it (leaf names of
/// /cats-sma/metric-cache/entry in yang/cats-sma.yang).
///
/// `None`: the message does not carry the leaf. After a create or replace of the entry (all
/// our own agent sends) that means the subordinate does not have it; after a merge, or an
/// edit of one leaf, that it is unchanged — the view cannot say which, so a consumer
/// needing every leaf refuses such a view rather than guessing.
#[derive(Clone, Debug, PartialEq)]
pub struct SciView {
    /// The list key, checked as a `csmat:csci-id`.
    pub csci_id: String,
    /// Checked as a `csmat:cs-id`.
    pub cs_id: Option<String>,
    pub gas: Option<u32>,
    /// Within `csmat:computing-time`'s range (0..=3600000 ms).
    pub computing_time: Option<u32>,
    /// One of `csmat:health-status`'s enum names.
    pub health: Option<String>,
    pub cost: Option<u32>,
    /// 0..=10.
    pub reputation: Option<u8>,
    /// 0..=10.
    pub security_label: Option<u8>,
    pub timestamp: Option<DateTime<Utc>>,
    /// `sequence-number`.
    pub sequence: Option<u64>,
    /// One of `csmat:sci-state`'s enum names.
    pub state: Option<String>,
}

/// One service's site aggregate (/cats-sma/services/service); `None` as in [`SciView`].
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceView {
    /// The list key, checked as a `csmat:cs-id`.
    pub cs_id: String,
    pub site_gas: Option<u32>,
    pub computing_time: Option<u32>,
    pub health: Option<String>,
    pub sci_count: Option<u32>,
    pub healthy_sci_count: Option<u32>,
    pub cost: Option<u32>,
    pub reputation: Option<u8>,
    pub security_label: Option<u8>,
}

/// One change of a push-change-update, in the order of its edits (a later change of the
/// same object supersedes an earlier one).
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Created or replaced (a merge edit gives the leaves it carries).
    Sci(SciView),
    /// Delete/remove of one entry.
    SciGone(String),
    Service(ServiceView),
    ServiceGone(String),
    /// The whole metric-cache (or services) container was deleted/replaced: everything of
    /// that kind not listed after it in the same notification is gone.
    ClearScis,
    ClearServices,
}

/// One decoded notification.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// push-update: the complete contents. RFC 8641 section 3.7 makes a push-update the
    /// whole of what the subscription selects, and an empty non-presence container is not
    /// encoded at all, so a container absent from the contents and one present but empty
    /// say the same thing: nothing of that kind exists. Both give an empty list here; the
    /// subscriber, which knows what it selected, replaces exactly that.
    Snapshot { id: u32, scis: Vec<SciView>, services: Vec<ServiceView>, incomplete: bool },
    /// push-change-update. `incomplete` is the publisher's `incomplete-update` flag, and is
    /// also set when an edit changed something these types cannot express (a single leaf
    /// of an entry or service deleted): either way the subscriber's view is no longer
    /// known to be whole, and a resynchronisation is the way back.
    Changes { id: u32, changes: Vec<Change>, incomplete: bool },
    /// subscription-terminated / subscription-suspended (RFC 8639): the reason identity's
    /// local name (its prefix is the sender's XML prefix, meaningless here).
    Ended { id: u32, reason: String, suspended: bool },
    /// subscription-resumed.
    Resumed { id: u32 },
    /// Any other notification (replay-completed, subscription-modified, ...): its element's
    /// local name, checked to be a YANG identifier so it can be logged.
    Other(String),
}

/// Why a notification was refused: where (a byte offset) and what. The text repeats none of
/// the peer's values (they may be hostile), only quick-xml's description of a syntax
/// error, made printable and cut short, so it can go to a log line as it is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// Decodes one notification a subordinate pushed. An error means the message is malformed,
/// hostile or beyond `limits`: the coordinator's view of the subordinate is then unknown.
pub fn decode(xml: &[u8], limits: &Limits) -> Result<Event, DecodeError> {
    if xml.len() > limits.max_bytes {
        return Err(DecodeError(format!(
            "the notification is {} bytes long (at most {})",
            xml.len(),
            limits.max_bytes
        )));
    }
    let text = std::str::from_utf8(xml)
        .map_err(|e| DecodeError(format!("at byte {}: the notification is not UTF-8", e.valid_up_to())))?;
    if let Some(at) = forbidden_char(xml) {
        return Err(DecodeError(format!("at byte {at}: a character XML 1.0 does not allow")));
    }
    let mut reader = NsReader::from_str(text);
    reader.config_mut().check_end_names = true;
    reader.resolver_mut().set_max_namespace_bindings(MAX_BINDINGS);
    let mut d = Decoder::new(limits);
    loop {
        let ev = reader.read_event().map_err(|e| {
            DecodeError(format!(
                "at byte {}: not well-formed XML: {}",
                reader.error_position(),
                crate::text::printable(&e.to_string(), 160)
            ))
        })?;
        let done = matches!(ev, Xml::Eof);
        let step = match ev {
            Xml::Start(e) => d.start(&reader, &e),
            Xml::Empty(e) => d.start(&reader, &e).and_then(|_| d.end(&reader)),
            Xml::End(_) => d.end(&reader),
            Xml::Text(t) => d.text(&t.xml10_content()),
            Xml::CData(c) => d.text(&c.xml10_content()),
            Xml::GeneralRef(r) => d.reference(&r),
            // Entity declarations live only in a DTD; refusing the DTD refuses them all
            // (no expansion bombs, no external entities).
            Xml::DocType(_) => Err("a DOCTYPE (DTD, entity declarations) is not allowed".into()),
            Xml::Decl(_) | Xml::PI(_) | Xml::Comment(_) | Xml::Eof => Ok(()),
        };
        step.map_err(|e| DecodeError(format!("at byte {}: {e}", reader.buffer_position())))?;
        if done {
            break;
        }
    }
    d.finish().map_err(DecodeError)
}

/// The first character XML 1.0 does not allow (section 2.2: C0 controls other than tab,
/// LF and CR; U+FFFE, U+FFFF), raw. quick-xml does not look for them, and a message
/// holding one is not XML, whatever else it holds: refused whole, not where it is used.
fn forbidden_char(b: &[u8]) -> Option<usize> {
    b.iter().enumerate().find_map(|(i, &c)| {
        let control = c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r');
        let nonchar = c == 0xEF && b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF));
        (control || nonchar).then_some(i)
    })
}

/// Errors inside the decoder, given a position by [`decode`].
type R<T> = Result<T, String>;

/// The notification's content element, which decides what its children mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Update,
    Change,
    Ended { suspended: bool },
    Resumed,
    Other,
}

/// What an open element is, from its namespace, its name and its parent's role: the
/// grammar of the messages this decoder reads, one state per open element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Notification,
    /// Passed over with everything inside it (still read: well-formed, within depth).
    Skip,
    /// The content element of a notification of a kind we read.
    Content,
    Id,
    Reason,
    Incomplete,
    /// push-update's `datastore-contents`: top-level data nodes.
    Contents,
    Changes,
    Patch,
    Edit,
    Operation,
    Target,
    /// An edit's `value`: the target node itself, whatever it is.
    Value,
    Cats,
    MetricCache,
    Services,
    Entry,
    Service,
    /// A leaf of the entry or service being read.
    Leaf(&'static str),
    /// A leaf directly in a value (the target is that leaf).
    ValueLeaf(&'static str),
}

impl Role {
    /// Whether the element's text is its value (it then may not hold elements).
    fn is_leaf(self) -> bool {
        matches!(
            self,
            Role::Id
                | Role::Reason
                | Role::Incomplete
                | Role::Operation
                | Role::Target
                | Role::Leaf(_)
                | Role::ValueLeaf(_)
        )
    }
}

/// RFC 8072 section 2.5's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Delete,
    Insert,
    Merge,
    Move,
    Replace,
    Remove,
}

/// The node an edit's target names, as far as the coordinator cares.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    /// `/`: the datastore itself (RFC 8072: the target resource).
    Root,
    Cats,
    MetricCache,
    Services,
    Entry(String),
    Service(String),
    EntryLeaf(String, &'static str),
    ServiceLeaf(String, &'static str),
    /// Anything else: another module's data, another part of cats-sma, a leaf not typed
    /// here. Such edits change nothing the coordinator holds.
    Foreign,
}

/// Which kinds of node a value holds at its top (bits), for checking it against the target.
const TOP_CATS: u8 = 1;
const TOP_CACHE: u8 = 2;
const TOP_SERVICES: u8 = 4;
const TOP_ENTRY: u8 = 8;
const TOP_SERVICE: u8 = 16;
const TOP_LEAF: u8 = 32;

/// The data read from `datastore-contents` or one edit's `value`.
#[derive(Default)]
struct Data {
    tops: u8,
    top_count: usize,
    scis: Vec<SciView>,
    services: Vec<ServiceView>,
    leaves: Vec<(&'static str, String)>,
}

#[derive(Default)]
struct EditParts {
    op: Option<Op>,
    target: Option<Node>,
    value: Option<Data>,
}

struct Decoder<'l> {
    limits: &'l Limits,
    stack: Vec<Role>,
    root_done: bool,
    /// The text of the open leaf.
    text: String,
    items: usize,
    kind: Option<Kind>,
    other: String,
    id: Option<u32>,
    reason: Option<String>,
    incomplete: bool,
    /// The data being read (`datastore-contents` or the open edit's value).
    region: Data,
    contents_seen: bool,
    contents: Option<Data>,
    changes_seen: bool,
    patch_seen: bool,
    changes: Vec<Change>,
    edit: EditParts,
    sci: SciView,
    service: ServiceView,
}

fn blank_sci() -> SciView {
    SciView {
        csci_id: String::new(),
        cs_id: None,
        gas: None,
        computing_time: None,
        health: None,
        cost: None,
        reputation: None,
        security_label: None,
        timestamp: None,
        sequence: None,
        state: None,
    }
}

fn blank_service() -> ServiceView {
    ServiceView {
        cs_id: String::new(),
        site_gas: None,
        computing_time: None,
        health: None,
        sci_count: None,
        healthy_sci_count: None,
        cost: None,
        reputation: None,
        security_label: None,
    }
}

impl<'l> Decoder<'l> {
    fn new(limits: &'l Limits) -> Self {
        Decoder {
            limits,
            stack: Vec::new(),
            root_done: false,
            text: String::new(),
            items: 0,
            kind: None,
            other: String::new(),
            id: None,
            reason: None,
            incomplete: false,
            region: Data::default(),
            contents_seen: false,
            contents: None,
            changes_seen: false,
            patch_seen: false,
            changes: Vec::new(),
            edit: EditParts::default(),
            sci: blank_sci(),
            service: blank_service(),
        }
    }

    fn start(&mut self, reader: &NsReader<&[u8]>, e: &BytesStart<'_>) -> R<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(format!("elements nest deeper than {MAX_DEPTH} levels"));
        }
        let (ns, local) = reader.resolver().resolve_element(e.name());
        let ns = match ns {
            ResolveResult::Bound(Namespace(n)) => Some(n),
            ResolveResult::Unbound => None,
            ResolveResult::Unknown(_) => return Err("an element's namespace prefix is not declared".into()),
        };
        let role = self.role_of(ns, local.into_inner())?;
        match role {
            Role::Entry => self.sci = blank_sci(),
            Role::Service => self.service = blank_service(),
            Role::Edit => self.edit = EditParts::default(),
            r if r.is_leaf() => self.text.clear(),
            _ => {}
        }
        self.stack.push(role);
        Ok(())
    }

    /// The role of a new element under the innermost open one.
    fn role_of(&mut self, ns: Option<&str>, local: &str) -> R<Role> {
        let cats = ns == Some(NS_CATS);
        let yp = ns == Some(NS_YP);
        // yang-patch's nodes are ietf-yang-push's where it `uses` the grouping (RFC 8641,
        // and our encoder), ietf-yang-patch's in some implementations.
        let patch = yp || ns == Some(NS_YANG_PATCH);
        let Some(&parent) = self.stack.last() else {
            if self.root_done {
                return Err("content after the notification".into());
            }
            if ns == Some(NS_NOTIFICATION) && local == "notification" {
                return Ok(Role::Notification);
            }
            return Err("the message is not a NETCONF notification (RFC 5277)".into());
        };
        Ok(match parent {
            Role::Notification => {
                if (ns == Some(NS_NOTIFICATION) && local == "eventTime") || self.kind.is_some() {
                    return Ok(Role::Skip);
                }
                let kind = match (ns, local) {
                    (Some(NS_YP), "push-update") => Kind::Update,
                    (Some(NS_YP), "push-change-update") => Kind::Change,
                    (Some(NS_SN), "subscription-terminated") => Kind::Ended { suspended: false },
                    (Some(NS_SN), "subscription-suspended") => Kind::Ended { suspended: true },
                    (Some(NS_SN), "subscription-resumed") => Kind::Resumed,
                    _ => Kind::Other,
                };
                self.kind = Some(kind);
                if kind == Kind::Other {
                    self.other = identifier(local).ok_or("the notification's name is not a YANG identifier")?.into();
                    Role::Skip
                } else {
                    Role::Content
                }
            }
            Role::Content => {
                let push = matches!(self.kind, Some(Kind::Update | Kind::Change));
                let own = if push { yp } else { ns == Some(NS_SN) };
                match local {
                    "id" if own => Role::Id,
                    "reason" if own && matches!(self.kind, Some(Kind::Ended { .. })) => Role::Reason,
                    "incomplete-update" if own && push => Role::Incomplete,
                    "datastore-contents" if own && self.kind == Some(Kind::Update) => {
                        if std::mem::replace(&mut self.contents_seen, true) {
                            return Err("a push-update with two datastore-contents".into());
                        }
                        self.region = Data::default();
                        Role::Contents
                    }
                    "datastore-changes" if own && self.kind == Some(Kind::Change) => {
                        if std::mem::replace(&mut self.changes_seen, true) {
                            return Err("a push-change-update with two datastore-changes".into());
                        }
                        Role::Changes
                    }
                    _ => Role::Skip,
                }
            }
            Role::Contents if cats && local == "cats-sma" => Role::Cats,
            Role::Changes if patch && local == "yang-patch" => {
                if std::mem::replace(&mut self.patch_seen, true) {
                    return Err("a push-change-update with two yang-patch".into());
                }
                Role::Patch
            }
            Role::Patch if patch && local == "edit" => Role::Edit,
            Role::Edit if patch => match local {
                "operation" => Role::Operation,
                "target" => Role::Target,
                "value" => {
                    if self.edit.value.is_some() {
                        return Err("an edit with two values".into());
                    }
                    self.region = Data::default();
                    Role::Value
                }
                _ => Role::Skip,
            },
            Role::Value if cats => {
                let (role, top) = match local {
                    "cats-sma" => (Role::Cats, TOP_CATS),
                    "metric-cache" => (Role::MetricCache, TOP_CACHE),
                    "services" => (Role::Services, TOP_SERVICES),
                    "entry" => (Role::Entry, TOP_ENTRY),
                    "service" => (Role::Service, TOP_SERVICE),
                    _ => match known(&SCI_LEAVES, local).or_else(|| known(&SERVICE_LEAVES, local)) {
                        Some(name) => (Role::ValueLeaf(name), TOP_LEAF),
                        None => return Ok(Role::Skip),
                    },
                };
                self.region.tops |= top;
                self.region.top_count += 1;
                role
            }
            Role::Cats if cats && local == "metric-cache" => Role::MetricCache,
            Role::Cats if cats && local == "services" => Role::Services,
            Role::MetricCache if cats && local == "entry" => Role::Entry,
            Role::Services if cats && local == "service" => Role::Service,
            Role::Entry if cats => known(&SCI_LEAVES, local).map_or(Role::Skip, Role::Leaf),
            Role::Service if cats => known(&SERVICE_LEAVES, local).map_or(Role::Skip, Role::Leaf),
            r if r.is_leaf() => return Err("an element inside a leaf".into()),
            _ => Role::Skip,
        })
    }

    fn end(&mut self, reader: &NsReader<&[u8]>) -> R<()> {
        let role = self.stack.pop().ok_or("an end tag without its start")?;
        match role {
            Role::Notification => self.root_done = true,
            Role::Id => put(&mut self.id, "id", number("id", &self.text, u32::MAX.into())?)?,
            Role::Reason => put(&mut self.reason, "reason", identity(&self.text)?)?,
            Role::Incomplete => self.incomplete = true,
            Role::Contents => {
                let data = std::mem::take(&mut self.region);
                unique(&data)?;
                self.contents = Some(data);
            }
            Role::Operation => put(&mut self.edit.op, "operation", operation(&self.text)?)?,
            Role::Target => {
                let node = parse_target(&self.text, |qname| ours(reader, qname))?;
                put(&mut self.edit.target, "target", node)?;
            }
            Role::Value => {
                let data = std::mem::take(&mut self.region);
                unique(&data)?;
                self.edit.value = Some(data);
            }
            Role::Edit => {
                self.count()?;
                let edit = std::mem::take(&mut self.edit);
                self.apply(edit)?;
            }
            Role::Entry => {
                if self.sci.csci_id.is_empty() {
                    return Err("a metric-cache entry without its key, csci-id".into());
                }
                self.count()?;
                let v = std::mem::replace(&mut self.sci, blank_sci());
                self.region.scis.push(v);
            }
            Role::Service => {
                if self.service.cs_id.is_empty() {
                    return Err("a service without its key, cs-id".into());
                }
                self.count()?;
                let v = std::mem::replace(&mut self.service, blank_service());
                self.region.services.push(v);
            }
            Role::Leaf(name) => match self.stack.last() {
                Some(Role::Entry) => sci_leaf(&mut self.sci, name, &self.text)?,
                Some(Role::Service) => service_leaf(&mut self.service, name, &self.text)?,
                _ => {}
            },
            Role::ValueLeaf(name) => {
                self.count()?;
                self.region.leaves.push((name, self.text.clone()));
            }
            Role::Skip
            | Role::Content
            | Role::Changes
            | Role::Patch
            | Role::Cats
            | Role::MetricCache
            | Role::Services => {}
        }
        Ok(())
    }

    fn text(&mut self, s: &str) -> R<()> {
        match self.stack.last() {
            None if s.trim_matches(is_xml_space).is_empty() => Ok(()),
            None => Err("text outside the notification".into()),
            Some(r) if r.is_leaf() => {
                if self.text.len() + s.len() > MAX_TEXT {
                    return Err(format!("a leaf's text is longer than {MAX_TEXT} bytes"));
                }
                self.text.push_str(s);
                Ok(())
            }
            // Whitespace between elements, or mixed content nothing here reads.
            Some(_) => Ok(()),
        }
    }

    /// A character or predefined entity reference; any other entity would need a DTD.
    fn reference(&mut self, r: &BytesRef<'_>) -> R<()> {
        // The message parser's rules: character references to XML 1.0 characters and the
        // five predefined entities.
        let c = crate::xml::resolve_reference(r).map_err(|e| e.0)?;
        let mut buf = [0u8; 4];
        self.text(c.encode_utf8(&mut buf))
    }

    /// One more entry, service or edit: the items bound is what keeps memory in
    /// proportion to what the caller allows, whatever the message's shape.
    fn count(&mut self) -> R<()> {
        self.items += 1;
        if self.items > self.limits.max_items {
            return Err(format!("more than {} entries, services and edits", self.limits.max_items));
        }
        Ok(())
    }

    /// An edit as changes. The value must hold the target node itself (RFC 8072 section
    /// 2.3): a value that holds something else is a lie about the target, refused rather
    /// than half-applied.
    fn apply(&mut self, e: EditParts) -> R<()> {
        let op = e.op.ok_or("an edit without an operation")?;
        let node = e.target.ok_or("an edit without a target")?;
        // A move reorders a list; ours are keyed and system-ordered, their contents stay.
        if node == Node::Foreign || op == Op::Move {
            return Ok(());
        }
        let replaces = matches!(op, Op::Create | Op::Insert | Op::Replace);
        if matches!(op, Op::Delete | Op::Remove) {
            match node {
                Node::Root | Node::Cats => self.changes.extend([Change::ClearScis, Change::ClearServices]),
                Node::MetricCache => self.changes.push(Change::ClearScis),
                Node::Services => self.changes.push(Change::ClearServices),
                Node::Entry(k) => self.changes.push(Change::SciGone(k)),
                Node::Service(k) => self.changes.push(Change::ServiceGone(k)),
                Node::EntryLeaf(_, "csci-id") | Node::ServiceLeaf(_, "cs-id") => {
                    return Err("an edit deletes a list key".into())
                }
                // A leaf gone from an entry: a view cannot say "absent" (None is "not
                // carried"), so the subscriber is told its view is no longer whole.
                Node::EntryLeaf(..) | Node::ServiceLeaf(..) => self.incomplete = true,
                Node::Foreign => {}
            }
            return Ok(());
        }
        let mut v = e.value.ok_or("a create, insert, merge or replace edit without a value")?;
        let only = |v: &Data, allowed: u8| {
            if v.tops & !allowed != 0 {
                Err("an edit's value does not hold its target node".to_owned())
            } else {
                Ok(())
            }
        };
        match node {
            Node::Root | Node::Cats => {
                only(&v, TOP_CATS)?;
                if replaces {
                    self.changes.extend([Change::ClearScis, Change::ClearServices]);
                }
                self.changes.extend(v.scis.into_iter().map(Change::Sci));
                self.changes.extend(v.services.into_iter().map(Change::Service));
            }
            Node::MetricCache => {
                only(&v, TOP_CACHE)?;
                if replaces {
                    self.changes.push(Change::ClearScis);
                }
                self.changes.extend(v.scis.into_iter().map(Change::Sci));
            }
            Node::Services => {
                only(&v, TOP_SERVICES)?;
                if replaces {
                    self.changes.push(Change::ClearServices);
                }
                self.changes.extend(v.services.into_iter().map(Change::Service));
            }
            Node::Entry(k) => {
                let s = match v.scis.pop() {
                    Some(s) if v.tops == TOP_ENTRY && v.top_count == 1 && v.scis.is_empty() => s,
                    _ => return Err("an entry edit's value is not one entry".into()),
                };
                if s.csci_id != k {
                    return Err("an entry edit's value is another entry than its target".into());
                }
                self.changes.push(Change::Sci(s));
            }
            Node::Service(k) => {
                let s = match v.services.pop() {
                    Some(s) if v.tops == TOP_SERVICE && v.top_count == 1 && v.services.is_empty() => s,
                    _ => return Err("a service edit's value is not one service".into()),
                };
                if s.cs_id != k {
                    return Err("a service edit's value is another service than its target".into());
                }
                self.changes.push(Change::Service(s));
            }
            Node::EntryLeaf(k, leaf) => {
                let text = one_leaf(&v, leaf)?;
                let mut s = blank_sci();
                sci_leaf(&mut s, leaf, text)?;
                if s.csci_id.is_empty() {
                    s.csci_id = k;
                } else if s.csci_id != k {
                    return Err("an edit changes a list key".into());
                }
                self.changes.push(Change::Sci(s));
            }
            Node::ServiceLeaf(k, leaf) => {
                let text = one_leaf(&v, leaf)?;
                let mut s = blank_service();
                service_leaf(&mut s, leaf, text)?;
                if s.cs_id.is_empty() {
                    s.cs_id = k;
                } else if s.cs_id != k {
                    return Err("an edit changes a list key".into());
                }
                self.changes.push(Change::Service(s));
            }
            Node::Foreign => {}
        }
        Ok(())
    }

    fn finish(mut self) -> R<Event> {
        if !self.stack.is_empty() {
            return Err("the message ends inside an element".into());
        }
        if !self.root_done {
            return Err("the message holds no notification".into());
        }
        let kind = self.kind.ok_or("a notification without content")?;
        let id = self.id.ok_or("the notification does not give its subscription id");
        Ok(match kind {
            Kind::Update => {
                let data = self.contents.take().unwrap_or_default();
                Event::Snapshot { id: id?, scis: data.scis, services: data.services, incomplete: self.incomplete }
            }
            Kind::Change => Event::Changes { id: id?, changes: self.changes, incomplete: self.incomplete },
            Kind::Ended { suspended } => Event::Ended {
                id: id?,
                reason: self.reason.ok_or("a subscription state notification without its reason")?,
                suspended,
            },
            Kind::Resumed => Event::Resumed { id: id? },
            Kind::Other => Event::Other(self.other),
        })
    }
}

/// The text of the one leaf a leaf edit's value must hold.
fn one_leaf<'d>(v: &'d Data, leaf: &str) -> R<&'d str> {
    match v.leaves.as_slice() {
        [(name, text)] if *name == leaf && v.tops == TOP_LEAF && v.top_count == 1 => Ok(text.as_str()),
        _ => Err("a leaf edit's value is not that one leaf".into()),
    }
}

/// A list's keys are unique (RFC 7950 section 7.8.2); a message that repeats one is
/// inconsistent, and which of the two to believe is a guess.
fn unique(d: &Data) -> R<()> {
    let mut seen = HashSet::with_capacity(d.scis.len());
    if !d.scis.iter().all(|s| seen.insert(s.csci_id.as_str())) {
        return Err("two metric-cache entries with the same csci-id".into());
    }
    let mut seen = HashSet::with_capacity(d.services.len());
    if !d.services.iter().all(|s| seen.insert(s.cs_id.as_str())) {
        return Err("two services with the same cs-id".into());
    }
    Ok(())
}

/// Whether a prefixed step of a target (`p:name`) is in cats-sma: `p` is the module name
/// (RESTCONF) or an XML prefix bound to its namespace where the target is (an
/// instance-identifier's prefixes are resolved in the element's scope).
fn ours(reader: &NsReader<&[u8]>, qname: &str) -> bool {
    qname.split_once(':').is_some_and(|(p, _)| p == MODULE)
        || matches!(
            reader.resolver().resolve_element(QName(qname)).0,
            ResolveResult::Bound(Namespace(n)) if n == NS_CATS
        )
}

fn put<T>(slot: &mut Option<T>, name: &str, v: T) -> R<()> {
    if slot.is_some() {
        return Err(format!("{name} is given twice"));
    }
    *slot = Some(v);
    Ok(())
}

fn known(names: &[&'static str], local: &str) -> Option<&'static str> {
    names.iter().copied().find(|n| *n == local)
}

fn is_xml_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Values of types without spaces are read with the XML whitespace around them removed,
/// as libyang does; strings (identifiers) are read exactly.
fn trim(s: &str) -> &str {
    s.trim_matches(is_xml_space)
}

/// A YANG identifier (RFC 7950 section 6.2), bounded: what may be logged of a peer's names.
fn identifier(s: &str) -> Option<&str> {
    let mut bytes = s.bytes();
    let first = bytes.next()?;
    let ok = s.len() <= MAX_NAME
        && (first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    ok.then_some(s)
}

/// An identityref's local name (`prefix:name` or `name`).
fn identity(text: &str) -> R<String> {
    let t = trim(text);
    let local = match t.split_once(':') {
        Some((prefix, local)) => {
            identifier(prefix).ok_or("the reason is not an identity")?;
            local
        }
        None => t,
    };
    Ok(identifier(local).ok_or("the reason is not an identity")?.to_owned())
}

fn operation(text: &str) -> R<Op> {
    Ok(match trim(text) {
        "create" => Op::Create,
        "delete" => Op::Delete,
        "insert" => Op::Insert,
        "merge" => Op::Merge,
        "move" => Op::Move,
        "replace" => Op::Replace,
        "remove" => Op::Remove,
        _ => return Err("an edit's operation is none of RFC 8072's".into()),
    })
}

/// An unsigned YANG integer (optional `+`, decimal digits) no larger than `max`.
fn number<T: TryFrom<u64>>(name: &str, text: &str, max: u64) -> R<T> {
    let t = trim(text);
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{name} is not an unsigned integer"));
    }
    let significant = digits.trim_start_matches('0');
    let value = match significant.len() {
        0 => Some(0),
        // u64::MAX has 20 digits: more cannot fit, whatever they are.
        1..=20 => significant.parse::<u64>().ok(),
        _ => None,
    };
    match value {
        Some(v) if v <= max => T::try_from(v).map_err(|_| format!("{name} is out of range (at most {max})")),
        _ => Err(format!("{name} is out of range (at most {max})")),
    }
}

fn enumeration(name: &str, text: &str, values: &[&str]) -> R<String> {
    let t = trim(text);
    values
        .iter()
        .find(|v| **v == t)
        .map(|v| (*v).to_owned())
        .ok_or_else(|| format!("{name} is not one of its enumeration's names"))
}

/// `yang:date-and-time` (RFC 3339), bounded before chrono sees it.
fn date_and_time(name: &str, text: &str) -> R<DateTime<Utc>> {
    let t = trim(text);
    if t.len() > 64 {
        return Err(format!("{name} is not a date-and-time"));
    }
    DateTime::parse_from_rfc3339(t).map(|d| d.with_timezone(&Utc)).map_err(|_| format!("{name} is not a date-and-time"))
}

fn id(kind: IdKind, text: &str) -> R<String> {
    check_id(kind, text)?;
    Ok(text.to_owned())
}

/// One leaf of a metric-cache entry, typed. A leaf given twice is refused: an entry's
/// leaves are unique, and which value to believe would be a guess.
fn sci_leaf(v: &mut SciView, name: &str, text: &str) -> R<()> {
    match name {
        "csci-id" => {
            if !v.csci_id.is_empty() {
                return Err("csci-id is given twice".into());
            }
            v.csci_id = id(IdKind::CsciId, text)?;
            Ok(())
        }
        "cs-id" => put(&mut v.cs_id, name, id(IdKind::CsId, text)?),
        "gas" => put(&mut v.gas, name, number(name, text, u32::MAX.into())?),
        "computing-time" => put(&mut v.computing_time, name, number(name, text, MAX_COMPUTING_TIME)?),
        "health" => put(&mut v.health, name, enumeration(name, text, &HEALTH)?),
        "cost" => put(&mut v.cost, name, number(name, text, u32::MAX.into())?),
        "reputation" => put(&mut v.reputation, name, number(name, text, MAX_SCORE)?),
        "security-label" => put(&mut v.security_label, name, number(name, text, MAX_SCORE)?),
        "timestamp" => put(&mut v.timestamp, name, date_and_time(name, text)?),
        "sequence-number" => put(&mut v.sequence, name, number(name, text, u64::MAX)?),
        "state" => put(&mut v.state, name, enumeration(name, text, &SCI_STATE)?),
        _ => Ok(()),
    }
}

/// One leaf of a service, typed; as [`sci_leaf`].
fn service_leaf(v: &mut ServiceView, name: &str, text: &str) -> R<()> {
    match name {
        "cs-id" => {
            if !v.cs_id.is_empty() {
                return Err("cs-id is given twice".into());
            }
            v.cs_id = id(IdKind::CsId, text)?;
            Ok(())
        }
        "site-gas" => put(&mut v.site_gas, name, number(name, text, u32::MAX.into())?),
        "computing-time" => put(&mut v.computing_time, name, number(name, text, MAX_COMPUTING_TIME)?),
        "health" => put(&mut v.health, name, enumeration(name, text, &HEALTH)?),
        "sci-count" => put(&mut v.sci_count, name, number(name, text, u32::MAX.into())?),
        "healthy-sci-count" => put(&mut v.healthy_sci_count, name, number(name, text, u32::MAX.into())?),
        "cost" => put(&mut v.cost, name, number(name, text, u32::MAX.into())?),
        "reputation" => put(&mut v.reputation, name, number(name, text, MAX_SCORE)?),
        "security-label" => put(&mut v.security_label, name, number(name, text, MAX_SCORE)?),
        _ => Ok(()),
    }
}

/// One step of a target: `prefix:name` (or `name`) and its keys, if any.
#[derive(Debug)]
struct Step<'a> {
    qname: &'a str,
    /// How many keys the step gives, and the last one (ours have a single key).
    keys: usize,
    key_name: Option<&'a str>,
    key: Option<String>,
    /// A `[n]` predicate (keyless lists and leaf-lists only; never ours).
    positional: bool,
}

/// `path[s..e]` without a panic (the indexes are at ASCII delimiters, so always
/// character boundaries; this only spares the proof).
fn cut(path: &str, s: usize, e: usize) -> R<&str> {
    path.get(s..e).ok_or_else(|| "an edit's target is malformed".to_owned())
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The steps of an absolute target, RESTCONF form (`/m:list=k1,k2`, keys
/// percent-encoded, RFC 8040 section 3.5.3) or instance-identifier form
/// (`/p:list[p:key='v']`, RFC 7950 section 9.13), up to [`MAX_STEPS`] (the bool: more
/// follow). One pass over the text.
fn steps(path: &str) -> R<(Vec<Step<'_>>, bool)> {
    let b = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if out.len() == MAX_STEPS {
            return Ok((out, true));
        }
        if b[i] != b'/' {
            return Err("an edit's target is malformed".into());
        }
        i += 1;
        let s = i;
        while i < b.len() && !matches!(b[i], b'/' | b'=' | b'[') {
            i += 1;
        }
        let qname = cut(path, s, i)?;
        if qname.is_empty() {
            return Err("an edit's target has an empty step".into());
        }
        let mut step = Step { qname, keys: 0, key_name: None, key: None, positional: false };
        if b.get(i) == Some(&b'=') {
            i += 1;
            let s = i;
            while i < b.len() && b[i] != b'/' {
                i += 1;
            }
            for part in cut(path, s, i)?.split(',') {
                let value = percent_encoding::percent_decode_str(part)
                    .decode_utf8()
                    .map_err(|_| "a key in an edit's target is not UTF-8 once percent-decoded")?;
                step.keys += 1;
                step.key = Some(value.into_owned());
            }
        } else {
            while b.get(i) == Some(&b'[') {
                i = skip_space(b, i + 1);
                let s = i;
                while i < b.len() && !matches!(b[i], b'=' | b']') {
                    i += 1;
                }
                let name = cut(path, s, i)?.trim_end_matches(is_xml_space);
                match b.get(i) {
                    Some(b']') if !name.is_empty() && name.bytes().all(|c| c.is_ascii_digit()) => {
                        step.positional = true;
                        i += 1;
                        continue;
                    }
                    Some(b'=') if !name.is_empty() => {}
                    _ => return Err("an edit's target has a malformed predicate".into()),
                }
                i = skip_space(b, i + 1);
                let quote = match b.get(i) {
                    Some(&q) if q == b'\'' || q == b'"' => q,
                    _ => return Err("a key value in an edit's target is not quoted".into()),
                };
                i += 1;
                let s = i;
                while i < b.len() && b[i] != quote {
                    i += 1;
                }
                if i >= b.len() {
                    return Err("a key value in an edit's target is not closed".into());
                }
                let value = cut(path, s, i)?.to_owned();
                i = skip_space(b, i + 1);
                if b.get(i) != Some(&b']') {
                    return Err("a predicate in an edit's target is not closed".into());
                }
                i += 1;
                step.keys += 1;
                step.key_name = Some(name);
                step.key = Some(value);
            }
        }
        out.push(step);
    }
    Ok((out, false))
}

fn local_name(qname: &str) -> &str {
    qname.split_once(':').map_or(qname, |(_, l)| l)
}

fn no_key(s: &Step<'_>) -> R<()> {
    if s.keys > 0 || s.positional {
        return Err("an edit's target gives a key to a node of cats-sma that is not a list".into());
    }
    Ok(())
}

/// The key of a step of one of our lists: exactly one, named as the list's key, of the
/// key's type.
fn key(s: &Step<'_>, kind: IdKind) -> R<String> {
    if s.positional || s.keys != 1 {
        return Err(format!("an edit's target must give one key, {}, for its list entry", kind.name()));
    }
    if s.key_name.is_some_and(|n| local_name(n) != kind.name()) {
        return Err(format!("an edit's target names another leaf than {} as its key", kind.name()));
    }
    let v = s.key.clone().unwrap_or_default();
    check_id(kind, &v)?;
    Ok(v)
}

/// The node an edit's target names. `ours` says whether a prefixed step (`p:name`) is in
/// cats-sma. A step without a prefix is in its parent's module (RFC 8040 section 3.5.3).
fn parse_target(text: &str, ours: impl Fn(&str) -> bool) -> R<Node> {
    let path = trim(text);
    if path == "/" {
        return Ok(Node::Root);
    }
    if !path.starts_with('/') {
        return Err("an edit's target is not an absolute path".into());
    }
    let (steps, deeper) = steps(path)?;
    let mut in_ours = false;
    for (n, s) in steps.iter().enumerate() {
        if s.qname.contains(':') {
            in_ours = ours(s.qname);
        } else if n == 0 {
            return Err("an edit's target does not name its module".into());
        }
        if !in_ours {
            // Another module's node (or one augmented into ours): nothing the coordinator holds.
            return Ok(Node::Foreign);
        }
    }
    if deeper {
        return Ok(Node::Foreign);
    }
    let name = |n: usize| steps.get(n).map(|s| local_name(s.qname));
    let Some(top) = steps.first().filter(|s| local_name(s.qname) == "cats-sma") else {
        return Ok(Node::Foreign);
    };
    no_key(top)?;
    let (list, kind, leaves, container) = match name(1) {
        None => return Ok(Node::Cats),
        Some("metric-cache") => ("entry", IdKind::CsciId, &SCI_LEAVES[..], Node::MetricCache),
        Some("services") => ("service", IdKind::CsId, &SERVICE_LEAVES[..], Node::Services),
        Some(_) => return Ok(Node::Foreign),
    };
    if let Some(s) = steps.get(1) {
        no_key(s)?;
    }
    let entry = match steps.get(2) {
        None => return Ok(container),
        Some(s) if local_name(s.qname) == list => s,
        Some(_) => return Ok(Node::Foreign),
    };
    let k = key(entry, kind)?;
    let Some(leaf_step) = steps.get(3) else {
        return Ok(if kind == IdKind::CsciId { Node::Entry(k) } else { Node::Service(k) });
    };
    no_key(leaf_step)?;
    Ok(match known(leaves, local_name(leaf_step.qname)) {
        Some(leaf) if kind == IdKind::CsciId => Node::EntryLeaf(k, leaf),
        Some(leaf) => Node::ServiceLeaf(k, leaf),
        None => Node::Foreign,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::encode::{self, Edit};
    use crate::push::params::EditOp;

    const NS_POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";
    const T: &str = "2026-01-02T03:04:05.678Z";

    fn limits() -> Limits {
        Limits { max_bytes: 1 << 20, max_items: 1000 }
    }

    fn ok(xml: &str) -> Event {
        match decode(xml.as_bytes(), &limits()) {
            Ok(e) => e,
            Err(e) => panic!("{e}: {xml}"),
        }
    }

    fn refused(xml: &str) -> String {
        match decode(xml.as_bytes(), &limits()) {
            Ok(e) => panic!("accepted as {e:?}: {xml}"),
            Err(e) => e.0,
        }
    }

    fn time() -> DateTime<Utc> {
        T.parse().unwrap()
    }

    /// An entry as `DatastoreView::direct_edit` writes it (leaves of `changes::sci_leaves`).
    fn entry_xml(id: &str, gas: u32) -> String {
        format!(
            "<entry xmlns=\"{NS_CATS}\"><csci-id>{}</csci-id><cs-id>AR1</cs-id><gas>{gas}</gas>\
             <computing-time>5</computing-time><health>healthy</health><cost>120</cost>\
             <reputation>4</reputation><security-label>6</security-label><timestamp>{T}</timestamp>\
             <sequence-number>42</sequence-number><discovered-by>pods</discovered-by>\
             <discovery-proof>jwt</discovery-proof><discovered-at>{T}</discovered-at><state>healthy</state>\
             <flags>smoothed gas-zeroed</flags><last-state-change>{T}</last-state-change></entry>",
            crate::text::xml(id)
        )
    }

    fn entry(id: &str, gas: u32) -> SciView {
        SciView {
            csci_id: id.into(),
            cs_id: Some("AR1".into()),
            gas: Some(gas),
            computing_time: Some(5),
            health: Some("healthy".into()),
            cost: Some(120),
            reputation: Some(4),
            security_label: Some(6),
            timestamp: Some(time()),
            sequence: Some(42),
            state: Some("healthy".into()),
        }
    }

    /// A service as `direct_edit` writes it (leaves of `changes::service_leaves`).
    fn service_xml(cs: &str, gas: u32) -> String {
        format!(
            "<service xmlns=\"{NS_CATS}\"><cs-id>{cs}</cs-id><site-gas>{gas}</site-gas>\
             <computing-time>5</computing-time><computing-time-function>mean</computing-time-function>\
             <health>degraded</health><sci-count>2</sci-count><healthy-sci-count>1</healthy-sci-count>\
             <reputation>3</reputation>\
             <reported-gas xmlns=\"{NS_POLICY}\">9</reported-gas>\
             <reported-computing-time xmlns=\"{NS_POLICY}\">5</reported-computing-time></service>"
        )
    }

    fn service(cs: &str, gas: u32) -> ServiceView {
        ServiceView {
            cs_id: cs.into(),
            site_gas: Some(gas),
            computing_time: Some(5),
            health: Some("degraded".into()),
            sci_count: Some(2),
            healthy_sci_count: Some(1),
            cost: None,
            reputation: Some(3),
            security_label: None,
        }
    }

    /// The target `direct_edit` writes.
    fn target(list: &str, key: &str) -> String {
        let mut t = format!("/cats-sma:cats-sma/{list}=");
        encode::percent_encode(key, &mut t);
        t
    }

    /// A push-change-update as `encode::push_change_update` writes it, around hand-written
    /// edits (for the operations our encoder never sends).
    fn change(edits: &str) -> String {
        encode::notification(&format!(
            "<push-change-update xmlns=\"{NS_YP}\"><id>7</id><datastore-changes><yang-patch>\
             <patch-id>1</patch-id>{edits}</yang-patch></datastore-changes></push-change-update>"
        ))
    }

    fn edit(op: &str, target: &str, value: Option<&str>) -> String {
        format!(
            "<edit><edit-id>e</edit-id><operation>{op}</operation><target>{}</target>{}</edit>",
            crate::text::xml(target),
            value.map(|v| format!("<value>{v}</value>")).unwrap_or_default()
        )
    }

    fn changes(xml: &str) -> (Vec<Change>, bool) {
        match ok(xml) {
            Event::Changes { id: 7, changes, incomplete } => (changes, incomplete),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rfc8641_3_7_push_update_snapshot_of_entries_and_services() {
        let contents = format!(
            "<cats-sma xmlns=\"{NS_CATS}\"><metric-cache>{}{}</metric-cache><services>{}</services></cats-sma>",
            entry_xml("192.0.2.10:8080", 400).replace(&format!(" xmlns=\"{NS_CATS}\""), ""),
            entry_xml("b\"<&", 7).replace(&format!(" xmlns=\"{NS_CATS}\""), ""),
            service_xml("AR1", 407).replace(&format!(" xmlns=\"{NS_CATS}\""), ""),
        );
        assert_eq!(
            ok(&encode::push_update(3, &contents, false)),
            Event::Snapshot {
                id: 3,
                scis: vec![entry("192.0.2.10:8080", 400), entry("b\"<&", 7)],
                services: vec![service("AR1", 407)],
                incomplete: false,
            }
        );
        // Only the metric cache selected (the coordinator's own filter), and incomplete.
        let contents =
            format!("<cats-sma xmlns=\"{NS_CATS}\"><metric-cache>{}</metric-cache></cats-sma>", entry_xml("a", 1));
        assert_eq!(
            ok(&encode::push_update(3, &contents, true)),
            Event::Snapshot { id: 3, scis: vec![entry("a", 1)], services: vec![], incomplete: true }
        );
        // Nothing selected exists: no contents at all, or empty containers, say the same.
        let empty = Event::Snapshot { id: 3, scis: vec![], services: vec![], incomplete: false };
        assert_eq!(ok(&encode::push_update(3, "", false)), empty);
        let contents = format!("<cats-sma xmlns=\"{NS_CATS}\"><metric-cache></metric-cache><services/></cats-sma>");
        assert_eq!(ok(&encode::push_update(3, &contents, false)), empty);
        // Other modules' top-level data and other parts of cats-sma are passed over.
        let contents = format!(
            "<other xmlns=\"urn:example:other\"><entry><csci-id>x</csci-id></entry></other>\
             <cats-sma xmlns=\"{NS_CATS}\"><statistics><reports-received>5</reports-received></statistics></cats-sma>"
        );
        assert_eq!(ok(&encode::push_update(3, &contents, false)), empty);
    }

    #[test]
    fn rfc8641_3_7_push_update_as_libyang_prints_it() {
        use crate::datastore::tree::set;
        use crate::yang::PrintText as _;
        use yang2::data::{DataFormat, DataPrinterFlags, DataTree};
        let mut tree = DataTree::new(crate::yang::context());
        let e = "/cats-sma:cats-sma/metric-cache/entry[csci-id='192.0.2.10:8080']";
        for (leaf, v) in [
            ("cs-id", "AR1"),
            ("gas", "400"),
            ("computing-time", "5"),
            ("health", "healthy"),
            ("cost", "120"),
            ("reputation", "4"),
            ("security-label", "6"),
            ("timestamp", T),
            ("sequence-number", "18446744073709551615"),
            ("state", "stale"),
            ("flags", "smoothed"),
        ] {
            set(&mut tree, &format!("{e}/{leaf}"), Some(v)).unwrap();
        }
        let s = "/cats-sma:cats-sma/services/service[cs-id='AR1']";
        for (leaf, v) in [
            ("site-gas", "400"),
            ("computing-time", "5"),
            ("computing-time-function", "mean"),
            ("health", "degraded"),
            ("sci-count", "2"),
            ("healthy-sci-count", "1"),
            ("reputation", "3"),
            ("cats-sma-policy:reported-gas", "9"),
        ] {
            set(&mut tree, &format!("{s}/{leaf}"), Some(v)).unwrap();
        }
        let flags = DataPrinterFlags::SHRINK | DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::WD_EXPLICIT;
        let contents = tree.print_text(DataFormat::XML, flags).unwrap().unwrap();
        let mut sci = entry("192.0.2.10:8080", 400);
        sci.sequence = Some(u64::MAX);
        sci.state = Some("stale".into());
        let svc = service("AR1", 400);
        assert_eq!(
            ok(&encode::push_update(9, &contents, false)),
            Event::Snapshot { id: 9, scis: vec![sci], services: vec![svc], incomplete: false },
            "{contents}"
        );
    }

    #[test]
    fn rfc8641_3_7_push_change_update_replace_and_delete() {
        let edits = [
            Edit {
                target: target("metric-cache/entry", "192.0.2.10:8080"),
                op: EditOp::Replace,
                value: Some(entry_xml("192.0.2.10:8080", 400)),
            },
            Edit { target: target("metric-cache/entry", "a,b/c"), op: EditOp::Delete, value: None },
            Edit { target: target("services/service", "AR1"), op: EditOp::Replace, value: Some(service_xml("AR1", 9)) },
            Edit { target: target("services/service", "AR2"), op: EditOp::Delete, value: None },
            Edit { target: target("metric-cache/entry", "n"), op: EditOp::Create, value: Some(entry_xml("n", 1)) },
        ];
        assert_eq!(
            ok(&encode::push_change_update(7, 12, &edits, false)),
            Event::Changes {
                id: 7,
                changes: vec![
                    Change::Sci(entry("192.0.2.10:8080", 400)),
                    Change::SciGone("a,b/c".into()),
                    Change::Service(service("AR1", 9)),
                    Change::ServiceGone("AR2".into()),
                    Change::Sci(entry("n", 1)),
                ],
                incomplete: false,
            }
        );
        let (c, incomplete) = changes(&encode::push_change_update(7, 13, &edits[1..2], true));
        assert_eq!((c, incomplete), (vec![Change::SciGone("a,b/c".into())], true));
        // The libyang path form of the same target (`view::engine_edit` via restconf_path).
        let t = encode::restconf_path("/cats-sma:cats-sma/metric-cache/entry[csci-id='188.3.67.3:67']");
        let (c, _) = changes(&change(&edit("remove", &t, None)));
        assert_eq!(c, vec![Change::SciGone("188.3.67.3:67".into())]);
    }

    #[test]
    fn rfc8072_2_3_container_targets_clear_and_list() {
        let ns = format!(" xmlns=\"{NS_CATS}\"");
        let cache = format!("<metric-cache{ns}>{}{}</metric-cache>", entry_xml("a", 1), entry_xml("b", 2));
        let (c, _) = changes(&change(&edit("replace", "/cats-sma:cats-sma/metric-cache", Some(&cache))));
        assert_eq!(c, vec![Change::ClearScis, Change::Sci(entry("a", 1)), Change::Sci(entry("b", 2))]);
        let (c, _) = changes(&change(&edit("merge", "/cats-sma:cats-sma/metric-cache", Some(&cache))));
        assert_eq!(c, vec![Change::Sci(entry("a", 1)), Change::Sci(entry("b", 2))]);
        let (c, _) = changes(&change(&edit("delete", "/cats-sma:cats-sma/services", None)));
        assert_eq!(c, vec![Change::ClearServices]);
        let whole = format!("<cats-sma{ns}><services>{}</services><metric-cache/></cats-sma>", service_xml("S", 3));
        let (c, _) = changes(&change(&edit("replace", "/cats-sma:cats-sma", Some(&whole))));
        assert_eq!(c, vec![Change::ClearScis, Change::ClearServices, Change::Service(service("S", 3))]);
        let (c, _) = changes(&change(&edit("merge", "/cats-sma:cats-sma", Some(&whole))));
        assert_eq!(c, vec![Change::Service(service("S", 3))]);
        let (c, _) = changes(&change(&edit("create", "/", Some(&whole))));
        assert_eq!(c, vec![Change::ClearScis, Change::ClearServices, Change::Service(service("S", 3))]);
        let (c, _) = changes(&change(&edit("remove", "/cats-sma:cats-sma", None)));
        assert_eq!(c, vec![Change::ClearScis, Change::ClearServices]);
        // An empty replacement clears.
        let (c, _) = changes(&change(&edit("replace", "/cats-sma:cats-sma/services", Some(""))));
        assert_eq!(c, vec![Change::ClearServices]);
        // A value that is not the target node is refused.
        refused(&change(&edit("replace", "/cats-sma:cats-sma/services", Some(&cache))));
        refused(&change(&edit("replace", &target("metric-cache/entry", "a"), Some(&cache))));
        refused(&change(&edit("replace", &target("metric-cache/entry", "b"), Some(&entry_xml("a", 1)))));
        let two = format!("{}{}", entry_xml("a", 1), entry_xml("b", 2));
        refused(&change(&edit("replace", &target("metric-cache/entry", "a"), Some(&two))));
        refused(&change(&edit("replace", &target("metric-cache/entry", "a"), None)));
    }

    #[test]
    fn rfc8072_2_5_leaf_edits_moves_and_foreign_targets() {
        let gas = format!("<gas xmlns=\"{NS_CATS}\">5</gas>");
        let (c, incomplete) =
            changes(&change(&edit("merge", &format!("{}/gas", target("metric-cache/entry", "x")), Some(&gas))));
        let mut v = blank_sci();
        v.csci_id = "x".into();
        v.gas = Some(5);
        assert_eq!((c, incomplete), (vec![Change::Sci(v)], false));
        let site = format!("<site-gas xmlns=\"{NS_CATS}\">6</site-gas>");
        let (c, _) =
            changes(&change(&edit("replace", &format!("{}/site-gas", target("services/service", "S")), Some(&site))));
        let mut s = blank_service();
        s.cs_id = "S".into();
        s.site_gas = Some(6);
        assert_eq!(c, vec![Change::Service(s)]);
        // A leaf deleted cannot be shown in a view: the update is no longer whole.
        let (c, incomplete) =
            changes(&change(&edit("delete", &format!("{}/cost", target("metric-cache/entry", "x")), None)));
        assert_eq!((c, incomplete), (vec![], true));
        refused(&change(&edit("delete", &format!("{}/csci-id", target("metric-cache/entry", "x")), None)));
        // The leaf in the value must be the target's.
        refused(&change(&edit("merge", &format!("{}/cost", target("metric-cache/entry", "x")), Some(&gas))));
        // Moves, leaves not typed here, other modules and other parts of cats-sma: nothing.
        let (c, incomplete) = changes(&change(
            &[
                edit("move", &target("metric-cache/entry", "x"), None),
                edit("replace", &format!("{}/flags", target("metric-cache/entry", "x")), Some("<flags/>")),
                edit("delete", "/cats-sma:cats-sma/statistics", None),
                edit("replace", "/cats-ip-metrics:ip-metrics/application=1", Some("<application/>")),
                edit("delete", "/cats-sma:cats-sma/cats-ip-metrics:ip-metrics", None),
            ]
            .concat(),
        ));
        assert_eq!((c, incomplete), (vec![], false));
    }

    #[test]
    fn rfc8072_target_key_predicate_forms() {
        let ours = |q: &str| q.starts_with("cats-sma:") || q.starts_with("csma:");
        let t = |s: &str| parse_target(s, ours);
        assert_eq!(
            t("/cats-sma:cats-sma/metric-cache/entry=192.0.2.10%3A8080"),
            Ok(Node::Entry("192.0.2.10:8080".into()))
        );
        assert_eq!(
            t("/csma:cats-sma/csma:metric-cache/csma:entry[csma:csci-id='a/b]c=\"d']"),
            Ok(Node::Entry("a/b]c=\"d".into()))
        );
        assert_eq!(
            t("/csma:cats-sma/csma:metric-cache/csma:entry[ csci-id = \"o'k\" ]"),
            Ok(Node::Entry("o'k".into()))
        );
        assert_eq!(
            t("/cats-sma:cats-sma/services/service=AR%2C1/site-gas"),
            Ok(Node::ServiceLeaf("AR,1".into(), "site-gas"))
        );
        assert_eq!(
            t("/csma:cats-sma/csma:services/csma:service[csma:cs-id='S']/csma:health"),
            Ok(Node::ServiceLeaf("S".into(), "health"))
        );
        assert_eq!(
            t("/cats-sma:cats-sma/metric-cache/entry=x/sequence-number"),
            Ok(Node::EntryLeaf("x".into(), "sequence-number"))
        );
        assert_eq!(t(" / "), Ok(Node::Root));
        assert_eq!(t("\n/cats-sma:cats-sma\n"), Ok(Node::Cats));
        assert_eq!(t("/cats-sma:cats-sma/metric-cache"), Ok(Node::MetricCache));
        assert_eq!(t("/csma:cats-sma/csma:services"), Ok(Node::Services));
        for foreign in [
            "/cats-sma:cats-sma/metric-cache/entry=x/flags",
            "/cats-sma:cats-sma/metric-cache/entry=x/gas/deeper",
            "/cats-sma:cats-sma/statistics",
            "/cats-sma:cats-sma/metric-cache/other",
            "/cats-ip-metrics:ip-metrics",
            "/cats-sma:cats-sma/cats-ip-metrics:ip-metrics/application=1",
            "/other:list[1]/x",
            "/other:c/l[k='v'][j=\"w\"]",
        ] {
            assert_eq!(t(foreign), Ok(Node::Foreign), "{foreign}");
        }
        let long = format!("/cats-sma:cats-sma/metric-cache/entry={}", "x".repeat(256));
        for bad in [
            "",
            "cats-sma:cats-sma",
            "/cats-sma/metric-cache",
            "/cats-sma:cats-sma//metric-cache",
            "/cats-sma:cats-sma/",
            "/cats-sma:cats-sma=x",
            "/cats-sma:cats-sma/metric-cache[1]",
            "/cats-sma:cats-sma/metric-cache/entry",
            "/cats-sma:cats-sma/metric-cache/entry=a,b",
            "/cats-sma:cats-sma/metric-cache/entry=",
            "/cats-sma:cats-sma/metric-cache/entry[1]",
            "/cats-sma:cats-sma/metric-cache/entry=x/gas=1",
            "/csma:cats-sma/csma:metric-cache/csma:entry[csma:csci-id='x",
            "/csma:cats-sma/csma:metric-cache/csma:entry[csma:csci-id='x'",
            "/csma:cats-sma/csma:metric-cache/csma:entry[csma:csci-id=x]",
            "/csma:cats-sma/csma:metric-cache/csma:entry[csma:cs-id='x']",
            "/csma:cats-sma/csma:metric-cache/csma:entry[='x']",
            "/cats-sma:cats-sma/metric-cache/entry=%FF",
            "/cats-sma:cats-sma/metric-cache/entry=%E2%80%AE",
            long.as_str(),
        ] {
            assert!(t(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc8641_foreign_prefixes_and_whitespace() {
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <!-- pushed by another implementation -->\n\
             <n:notification xmlns:n=\"{NS_NOTIFICATION}\" xmlns:c=\"{NS_CATS}\">\n\
               <n:eventTime>2026-01-02T03:04:05Z</n:eventTime>\n\
               <yp:push-change-update xmlns:yp=\"{NS_YP}\">\n\
                 <yp:id> 12 </yp:id>\n\
                 <yp:datastore-changes>\n\
                   <p:yang-patch xmlns:p=\"{NS_YANG_PATCH}\">\n\
                     <p:patch-id>p-1</p:patch-id>\n\
                     <p:edit>\n\
                       <p:edit-id>1</p:edit-id>\n\
                       <p:operation>replace</p:operation>\n\
                       <p:target xmlns:k=\"{NS_CATS}\">/k:cats-sma/k:metric-cache/k:entry[k:csci-id = \"a&amp;b's\"]</p:target>\n\
                       <p:value>\n\
                         <k:entry xmlns:k=\"{NS_CATS}\">\n\
                           <k:csci-id>a&amp;b&#39;s</k:csci-id>\n\
                           <k:gas> 12 </k:gas>\n\
                           <k:health><![CDATA[degraded]]></k:health>\n\
                           <x:gas xmlns:x=\"urn:example:other\">99</x:gas>\n\
                           <k:state>stale</k:state>\n\
                         </k:entry>\n\
                       </p:value>\n\
                     </p:edit>\n\
                     <p:edit>\n\
                       <p:value><services xmlns=\"{NS_CATS}\"> <service> <cs-id>AR9</cs-id> <site-gas>3</site-gas> </service> </services></p:value>\n\
                       <p:operation>merge</p:operation>\n\
                       <p:target>/cats-sma:cats-sma/services</p:target>\n\
                     </p:edit>\n\
                     <p:edit><p:operation>delete</p:operation>\
                       <p:target>/c:cats-sma/c:services/c:service[c:cs-id='AR2']</p:target></p:edit>\n\
                     <p:edit><p:operation>delete</p:operation>\
                       <p:target xmlns:c=\"urn:example:other\">/c:cats-sma</p:target></p:edit>\n\
                   </p:yang-patch>\n\
                 </yp:datastore-changes>\n\
               </yp:push-change-update>\n\
             </n:notification>\n"
        );
        let mut sci = blank_sci();
        sci.csci_id = "a&b's".into();
        sci.gas = Some(12);
        sci.health = Some("degraded".into());
        sci.state = Some("stale".into());
        let mut svc = blank_service();
        svc.cs_id = "AR9".into();
        svc.site_gas = Some(3);
        assert_eq!(
            ok(&xml),
            Event::Changes {
                id: 12,
                changes: vec![Change::Sci(sci), Change::Service(svc), Change::ServiceGone("AR2".into())],
                incomplete: false,
            }
        );
        // A push-update with prefixes throughout.
        let xml = format!(
            "<n:notification xmlns:n=\"{NS_NOTIFICATION}\">\r\n <n:eventTime>{T}</n:eventTime>\r\n\
             <y:push-update xmlns:y=\"{NS_YP}\"><y:id>1</y:id>\r\n<y:datastore-contents>\r\n\
             <m:cats-sma xmlns:m=\"{NS_CATS}\">\r\n <m:metric-cache>\r\n  <m:entry><m:csci-id>q</m:csci-id>\
             <m:sequence-number>+0007</m:sequence-number></m:entry>\r\n </m:metric-cache>\r\n</m:cats-sma>\r\n\
             </y:datastore-contents><y:incomplete-update></y:incomplete-update></y:push-update></n:notification>"
        );
        let mut sci = blank_sci();
        sci.csci_id = "q".into();
        sci.sequence = Some(7);
        assert_eq!(ok(&xml), Event::Snapshot { id: 1, scis: vec![sci], services: vec![], incomplete: true });
    }

    #[test]
    fn rfc8639_subscription_terminated() {
        assert_eq!(
            ok(&encode::state_with_reason("subscription-terminated", 7, "no-such-subscription")),
            Event::Ended { id: 7, reason: "no-such-subscription".into(), suspended: false }
        );
        assert_eq!(
            ok(&encode::state_with_reason("subscription-suspended", 8, "insufficient-resources")),
            Event::Ended { id: 8, reason: "insufficient-resources".into(), suspended: true }
        );
        assert_eq!(ok(&encode::state("subscription-resumed", 9)), Event::Resumed { id: 9 });
        // Notifications the coordinator does not act on are not errors.
        assert_eq!(ok(&encode::state("replay-completed", 7)), Event::Other("replay-completed".into()));
        let modified = encode::notification(&format!(
            "<subscription-modified xmlns=\"{NS_SN}\"><id>7</id><stream-xpath-filter>/x</stream-xpath-filter>\
             <extra><deep/></extra></subscription-modified>"
        ));
        assert_eq!(ok(&modified), Event::Other("subscription-modified".into()));
        let vendor = encode::notification("<link-up xmlns=\"urn:example:vendor\"><if>eth0</if></link-up>");
        assert_eq!(ok(&vendor), Event::Other("link-up".into()));
        // A reason without a prefix; the terminated notification without an id or reason.
        let bare = encode::notification(&format!(
            "<subscription-terminated xmlns=\"{NS_SN}\"><id>7</id><reason>filter-unavailable</reason></subscription-terminated>"
        ));
        assert_eq!(ok(&bare), Event::Ended { id: 7, reason: "filter-unavailable".into(), suspended: false });
        refused(&encode::notification(&format!(
            "<subscription-terminated xmlns=\"{NS_SN}\"><id>7</id></subscription-terminated>"
        )));
        refused(&encode::notification(&format!(
            "<subscription-terminated xmlns=\"{NS_SN}\"><reason>sn:x</reason></subscription-terminated>"
        )));
        refused(&encode::notification(&format!(
            "<subscription-terminated xmlns=\"{NS_SN}\"><id>7</id><reason>sn:x y</reason></subscription-terminated>"
        )));
    }

    #[test]
    fn hostile_depth_size_and_ranges_refused() {
        let snapshot = |entry: &str| {
            encode::push_update(
                1,
                &format!("<cats-sma xmlns=\"{NS_CATS}\"><metric-cache>{entry}</metric-cache></cats-sma>"),
                false,
            )
        };
        let one = |leaf: &str| snapshot(&format!("<entry><csci-id>x</csci-id>{leaf}</entry>"));
        // Size, before anything is read.
        let msg = snapshot(&entry_xml("a", 1));
        let small = Limits { max_bytes: msg.len() - 1, max_items: 10 };
        assert!(decode(msg.as_bytes(), &small).unwrap_err().0.contains("bytes long"));
        // Items.
        let three = snapshot(&[entry_xml("a", 1), entry_xml("b", 1), entry_xml("c", 1)].concat());
        let few = Limits { max_bytes: 1 << 20, max_items: 2 };
        assert!(decode(three.as_bytes(), &few).unwrap_err().0.contains("more than 2"));
        let edits = change(&edit("move", "/", None).repeat(3));
        assert!(decode(edits.as_bytes(), &few).is_err());
        // Depth.
        let deep = encode::notification(&format!("{}{}", "<a>".repeat(40), "</a>".repeat(40)));
        assert!(refused(&deep).contains("deeper"));
        // Ranges and types.
        for leaf in [
            "<gas>4294967296</gas>",
            "<gas>-1</gas>",
            "<gas>1e3</gas>",
            "<gas></gas>",
            "<gas/>",
            "<computing-time>3600001</computing-time>",
            "<reputation>11</reputation>",
            "<security-label>256</security-label>",
            "<sequence-number>18446744073709551616</sequence-number>",
            "<sequence-number>000000000000000000000000018446744073709551616</sequence-number>",
            "<health>sick</health>",
            "<health>HEALTHY</health>",
            "<state>zombie</state>",
            "<timestamp>yesterday</timestamp>",
            "<timestamp>2026-13-01T00:00:00Z</timestamp>",
            "<cs-id></cs-id>",
            "<cs-id>a\u{202e}b</cs-id>",
            "<gas>1</gas><gas>2</gas>",
            "<csci-id>y</csci-id>",
            "<gas><b/>1</gas>",
        ] {
            assert!(decode(one(leaf).as_bytes(), &limits()).is_err(), "{leaf}");
        }
        assert_eq!(ok(&one("<gas>4294967295</gas><computing-time>3600000</computing-time>")), {
            let mut v = blank_sci();
            v.csci_id = "x".into();
            v.gas = Some(u32::MAX);
            v.computing_time = Some(3_600_000);
            Event::Snapshot { id: 1, scis: vec![v], services: vec![], incomplete: false }
        });
        // Identifiers.
        let long_id = "x".repeat(256);
        for id in ["", "a&#x202E;b", "a&#10;b", long_id.as_str()] {
            assert!(
                decode(snapshot(&format!("<entry><csci-id>{id}</csci-id></entry>")).as_bytes(), &limits()).is_err(),
                "{id}"
            );
        }
        assert!(decode(
            snapshot(&format!("<entry><csci-id>{}</csci-id></entry>", "x".repeat(255))).as_bytes(),
            &limits()
        )
        .is_ok());
        // Keys: missing, repeated.
        refused(&snapshot("<entry><gas>1</gas></entry>"));
        refused(&snapshot(&[entry_xml("a", 1), entry_xml("a", 2)].concat()));
        // DTDs and entities.
        let dtd = format!("<!DOCTYPE notification [<!ENTITY x \"boom\">]>{}", one("<cs-id>&x;</cs-id>"));
        refused(&dtd);
        refused(&one("<cs-id>&x;</cs-id>"));
        refused(&one("<cs-id>&#0;</cs-id>"));
        refused(&one("<cs-id>a & b</cs-id>"));
        // Characters XML forbids, raw, even where nothing reads them.
        refused(&one("<cs-id>a\u{1}b</cs-id>"));
        refused(&one("<discovered-by>\u{0}</discovered-by>"));
        refused(&one("<discovered-by>\u{FFFE}</discovered-by>"));
        // Not a notification, not well-formed, not alone, not UTF-8.
        refused("<rpc-reply xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><ok/></rpc-reply>");
        refused(&format!("<notification><eventTime>{T}</eventTime></notification>"));
        refused(&format!("<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{T}</eventTime></notification>"));
        refused(&format!("{msg}{msg}"));
        refused(&format!("{msg}trailing"));
        refused(&msg.replace("</entry>", "</entri>"));
        refused(&msg.replace("<metric-cache>", "<x:metric-cache>"));
        assert!(decode(b"<notification xmlns=\"\xff\"/>", &limits()).unwrap_err().0.contains("UTF-8"));
        refused(&encode::push_update(4_294_967_295, "", false).replace("4294967295", "4294967296"));
        refused(&encode::push_update(1, "", false).replace("<id>1</id>", ""));
        refused(&encode::push_update(1, "", false).replace("<id>1</id>", "<id>1</id><id>2</id>"));
        // Namespace declarations beyond the bound.
        let decls: String = (0..100).map(|i| format!(" xmlns:p{i}=\"urn:x:{i}\"")).collect();
        refused(&encode::push_update(1, &format!("<a{decls}/>"), false));
        // Every truncation of a valid message is refused, without a panic.
        let full = encode::push_change_update(
            7,
            1,
            &[Edit {
                target: target("metric-cache/entry", "é:1"),
                op: EditOp::Replace,
                value: Some(entry_xml("é:1", 2)),
            }],
            false,
        );
        assert!(decode(full.as_bytes(), &limits()).is_ok());
        for n in 0..full.len() {
            assert!(decode(&full.as_bytes()[..n], &limits()).is_err(), "{n}");
        }
    }
}

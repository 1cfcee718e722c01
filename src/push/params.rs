//! The parameters of establish-subscription and modify-subscription (RFC 8639 section
//! 2.4, RFC 8641 section 4.4), read from the RPC's XML and checked; every refusal carries
//! the RFC's error identity in error-app-tag (RFC 8640 section 2.4).

use chrono::{DateTime, Utc};

use super::{NS_SN, NS_YP};
use crate::datastore::Datastore;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::events::parse_time;
use crate::mgmt::filter::xpath::to_json_prefixes;
use crate::notif::Encoding;
use crate::xml::Element;

/// The event streams: NETCONF (every notification the agent raises) and cats-sma (the
/// engine's own: sci-state-change, metric-anomaly, ...).
pub const STREAMS: &[(&str, &str)] = &[
    ("NETCONF", "All notifications of this agent (RFC 5277 default stream)."),
    ("cats-sma", "The metric engine's notifications (module cats-sma)."),
];

/// The shortest period accepted, in centiseconds (a full operational read per period).
pub const MIN_PERIOD_CS: u32 = 10;

/// A filter of notifications (stream subscriptions) or of datastore nodes (selection).
#[derive(Clone, Debug)]
pub enum Filter {
    /// The `*-subtree-filter` element, whose children are the subtree filter (RFC 6241
    /// section 6), and its content as standalone XML text (for state and notices).
    Subtree(Element, String),
    /// An XPath with module-name prefixes.
    XPath(String),
}

impl Filter {
    /// Text for the operational state (`stream-xpath-filter` and the like).
    pub fn describe(&self) -> String {
        match self {
            Filter::Subtree(..) => "subtree".into(),
            Filter::XPath(x) => x.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    Periodic { period_cs: u32, anchor: Option<DateTime<Utc>> },
    OnChange { dampening_cs: u32, sync_on_start: bool, excluded: Vec<EditOp> },
}

/// YANG Patch edit operations an on-change subscription can exclude (RFC 8641
/// `change-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EditOp {
    Create,
    Delete,
    Insert,
    Move,
    Replace,
}

impl EditOp {
    pub fn yang(self) -> &'static str {
        match self {
            EditOp::Create => "create",
            EditOp::Delete => "delete",
            EditOp::Insert => "insert",
            EditOp::Move => "move",
            EditOp::Replace => "replace",
        }
    }
    fn parse(s: &str) -> Option<EditOp> {
        Some(match s {
            "create" => EditOp::Create,
            "delete" => EditOp::Delete,
            "insert" => EditOp::Insert,
            "move" => EditOp::Move,
            "replace" => EditOp::Replace,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub enum Target {
    Stream { stream: String, filter: Option<Filter>, replay_start: Option<DateTime<Utc>> },
    Datastore { datastore: Datastore, selection: Option<Filter>, trigger: Trigger },
}

/// An accepted establish-subscription (or a configured subscription's terms).
#[derive(Clone, Debug)]
pub struct Params {
    pub target: Target,
    pub stop_time: Option<DateTime<Utc>>,
    /// The `encoding` asked for (None: the transport's default).
    pub encoding: Option<Encoding>,
}

/// The configured filters (`/sn:filters`, RFC 8639 section 2.4.2 and RFC 8641 section
/// 4.4.1: a subscription may name a filter instead of carrying one).
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// stream-filter, by name.
    pub stream: std::collections::HashMap<String, Filter>,
    /// yp:selection-filter, by filter-id.
    pub selection: std::collections::HashMap<String, Filter>,
}

impl Filters {
    fn resolve(&self, el: &Element, stream: bool) -> Result<Filter, RpcError> {
        let name = el.trimmed();
        let found = if stream { self.stream.get(name) } else { self.selection.get(name) };
        found.cloned().ok_or_else(|| {
            let kind = if stream { "stream filter" } else { "selection filter" };
            error(ErrorTag::InvalidValue, &sn("filter-unavailable"), format!("no {kind} \"{name}\" is configured"))
                .with_bad_element(el.name.clone())
        })
    }

    /// Reads `/sn:filters` from its XML (`<filters>` element, as printed from running).
    pub fn parse(filters: &Element, src: &str) -> Result<Filters, RpcError> {
        let mut out = Filters::default();
        for f in &filters.children {
            let stream = in_ns(f, NS_SN, "stream-filter");
            if !stream && !in_ns(f, NS_YP, "selection-filter") {
                continue;
            }
            let key = if stream { "name" } else { "filter-id" };
            let mut name = None;
            let mut filter = None;
            for c in &f.children {
                if c.name == key {
                    name = Some(c.trimmed().to_owned());
                } else if c.name.ends_with("-subtree-filter") {
                    crate::mgmt::filter::check_subtree(c)?;
                    filter =
                        Some(Filter::Subtree(c.clone(), c.children_text(src).map_err(crate::mgmt::error::too_big)?));
                } else if c.name.ends_with("-xpath-filter") {
                    filter = Some(xpath(c, &c.name)?);
                }
            }
            if let (Some(n), Some(f)) = (name, filter) {
                if stream {
                    out.stream.insert(n, f);
                } else {
                    out.selection.insert(n, f);
                }
            }
        }
        Ok(out)
    }
}

/// What a modify-subscription asks to change.
#[derive(Clone, Debug, Default)]
pub struct Modify {
    pub id: u32,
    /// Some(None) removes the filter.
    pub filter: Option<Option<Filter>>,
    pub stop_time: Option<DateTime<Utc>>,
    pub period_cs: Option<u32>,
    pub anchor: Option<DateTime<Utc>>,
    pub dampening_cs: Option<u32>,
    /// Must name the subscription's datastore when given.
    pub datastore: Option<Datastore>,
}

/// An RFC 8639/8641 error: tag plus the identity as error-app-tag.
pub fn error(tag: ErrorTag, identity: &str, message: impl Into<String>) -> RpcError {
    RpcError::application(tag, message).with_app_tag(identity)
}

pub fn sn(identity: &str) -> String {
    format!("ietf-subscribed-notifications:{identity}")
}

pub fn yp(identity: &str) -> String {
    format!("ietf-yang-push:{identity}")
}

fn in_ns(el: &Element, ns: &str, name: &str) -> bool {
    el.name == name && el.ns.as_deref() == Some(ns)
}

fn bad(el: &Element) -> RpcError {
    RpcError::protocol(ErrorTag::UnknownElement, format!("<{}> is not a parameter this server supports here", el.name))
        .with_bad_element(el.name.clone())
}

fn invalid(name: &str, msg: impl Into<String>) -> RpcError {
    RpcError::protocol(ErrorTag::InvalidValue, msg).with_bad_element(name)
}

fn uint(el: &Element, name: &str) -> Result<u32, RpcError> {
    el.trimmed().parse::<u32>().map_err(|_| invalid(name, format!("{name} \"{}\" is not a uint32", el.trimmed())))
}

fn boolean(el: &Element, name: &str) -> Result<bool, RpcError> {
    match el.trimmed() {
        "true" => Ok(true),
        "false" => Ok(false),
        v => Err(invalid(name, format!("{name} \"{v}\" is not a boolean"))),
    }
}

/// An identityref value: `prefix:name` resolved in the element's scope to `module:name`.
fn identity(el: &Element) -> (Option<String>, String) {
    let v = el.trimmed();
    match v.split_once(':') {
        Some((p, n)) => {
            let module = el
                .scope
                .resolve(Some(p))
                .and_then(|ns| crate::yang::context().get_module_latest_ns(ns).map(|m| m.name().to_owned()))
                .or_else(|| Some(p.to_owned()));
            (module, n.to_owned())
        }
        None => (None, v.to_owned()),
    }
}

fn xpath(el: &Element, name: &str) -> Result<Filter, RpcError> {
    let x = to_json_prefixes(el.trimmed(), &el.scope).map_err(|mut e| {
        e.bad_element = Some(name.to_owned());
        e
    })?;
    // Too costly an expression is refused now, not at every push (issue 11 class 3).
    crate::mgmt::filter::check_xpath(&x).map_err(|e| e.with_bad_element(name))?;
    // Compile it once against the schema so a broken expression is refused now.
    if x.trim() != "/" {
        if let Err(e) = crate::yang::context().find_xpath(&x) {
            return Err(error(
                ErrorTag::InvalidValue,
                &sn("filter-unsupported"),
                format!("invalid XPath \"{x}\": {e}"),
            )
            .with_bad_element(name));
        }
    }
    Ok(Filter::XPath(x))
}

/// Reads establish-subscription's input; filters named by reference come from `filters`.
pub fn establish(op: &Element, src: &str, filters: &Filters) -> Result<Params, RpcError> {
    read_terms(op, src, filters, false)
}

/// The leaves of a configured subscription (RFC 8639 section 2.5) that are not terms of
/// what is sent: they are read by the configured-subscription runner itself. The others it
/// does not implement (configured-replay, source-address) are refused as unknown.
const CONFIGURED_ONLY: &[&str] = &["id", "transport", "purpose", "receivers"];

/// Reads the terms of a configured subscription from its `<subscription>` element.
pub fn configured(sub: &Element, src: &str, filters: &Filters) -> Result<Params, RpcError> {
    read_terms(sub, src, filters, true)
}

fn read_terms(op: &Element, src: &str, filters: &Filters, configured: bool) -> Result<Params, RpcError> {
    let mut encoding = None;
    let mut stream = None;
    let mut stream_filter = None;
    let mut replay_start = None;
    let mut datastore = None;
    let mut selection = None;
    let mut trigger = None;
    let mut stop_time = None;
    for c in &op.children {
        if configured && c.ns.as_deref() == Some(NS_SN) && CONFIGURED_ONLY.contains(&c.name.as_str()) {
            continue;
        }
        if in_ns(c, NS_SN, "stream") {
            stream = Some(c.trimmed().to_owned());
        } else if in_ns(c, NS_SN, "stream-subtree-filter") {
            crate::mgmt::filter::check_subtree(c)?;
            stream_filter =
                Some(Filter::Subtree(c.clone(), c.children_text(src).map_err(crate::mgmt::error::too_big)?));
        } else if in_ns(c, NS_SN, "stream-xpath-filter") {
            stream_filter = Some(xpath(c, "stream-xpath-filter")?);
        } else if in_ns(c, NS_SN, "stream-filter-name") {
            stream_filter = Some(filters.resolve(c, true)?);
        } else if in_ns(c, NS_SN, "replay-start-time") {
            replay_start = Some(parse_time(&c.text, "replay-start-time")?);
        } else if in_ns(c, NS_SN, "stop-time") {
            stop_time = Some(parse_time(&c.text, "stop-time")?);
        } else if in_ns(c, NS_SN, "encoding") {
            let (_, name) = identity(c);
            encoding = Some(Encoding::from_identity(&name).ok_or_else(|| {
                error(
                    ErrorTag::InvalidValue,
                    &sn("encoding-unsupported"),
                    format!("encoding {} is not supported; encode-xml and encode-json are", c.trimmed()),
                )
                .with_bad_element("encoding")
            })?);
        } else if in_ns(c, NS_YP, "datastore") {
            let (_, name) = identity(c);
            let ds = Datastore::from_identity(&name).ok_or_else(|| invalid("datastore", "unknown datastore"))?;
            if !matches!(ds, Datastore::Running | Datastore::Operational | Datastore::Intended) {
                return Err(error(
                    ErrorTag::InvalidValue,
                    &yp("datastore-not-subscribable"),
                    format!("{name} cannot be subscribed to; running, intended and operational can"),
                )
                .with_bad_element("datastore"));
            }
            datastore = Some(if ds == Datastore::Intended { Datastore::Running } else { ds });
        } else if in_ns(c, NS_YP, "datastore-subtree-filter") {
            crate::mgmt::filter::check_subtree(c)?;
            selection = Some(Filter::Subtree(c.clone(), c.children_text(src).map_err(crate::mgmt::error::too_big)?));
        } else if in_ns(c, NS_YP, "datastore-xpath-filter") {
            selection = Some(xpath(c, "datastore-xpath-filter")?);
        } else if in_ns(c, NS_YP, "selection-filter-ref") {
            selection = Some(filters.resolve(c, false)?);
        } else if in_ns(c, NS_YP, "periodic") {
            trigger = Some(periodic(c)?);
        } else if in_ns(c, NS_YP, "on-change") {
            trigger = Some(on_change(c)?);
        } else {
            return Err(bad(c));
        }
    }
    let target = match (stream, datastore) {
        (Some(_), Some(_)) => {
            return Err(invalid("datastore", "a subscription targets a stream or a datastore, not both"));
        }
        (None, None) => {
            return Err(RpcError::protocol(
                ErrorTag::MissingElement,
                "establish-subscription needs a stream or a datastore",
            )
            .with_bad_element("stream"))
        }
        (Some(stream), None) => {
            if selection.is_some() || trigger.is_some() {
                return Err(invalid("stream", "datastore parameters do not apply to a stream subscription"));
            }
            if !STREAMS.iter().any(|(n, _)| *n == stream) {
                return Err(error(
                    ErrorTag::InvalidValue,
                    &sn("stream-unavailable"),
                    format!("no stream \"{stream}\"; this server has NETCONF and cats-sma"),
                )
                .with_bad_element("stream"));
            }
            if let Some(start) = replay_start {
                if start > Utc::now() {
                    return Err(error(
                        ErrorTag::InvalidValue,
                        &sn("replay-unsupported"),
                        "replay-start-time is in the future",
                    )
                    .with_bad_element("replay-start-time"));
                }
                if stop_time.is_some_and(|s| s < start) {
                    return Err(invalid("stop-time", "stop-time is earlier than replay-start-time"));
                }
            }
            Target::Stream { stream, filter: stream_filter, replay_start }
        }
        (None, Some(datastore)) => {
            if stream_filter.is_some() || replay_start.is_some() {
                return Err(invalid("datastore", "stream parameters do not apply to a datastore subscription"));
            }
            let trigger = trigger.ok_or_else(|| {
                RpcError::protocol(ErrorTag::MissingElement, "a datastore subscription needs periodic or on-change")
                    .with_bad_element("update-trigger")
            })?;
            Target::Datastore { datastore, selection, trigger }
        }
    };
    if !configured
        && stop_time.is_some_and(|s| s <= Utc::now())
        && !matches!(target, Target::Stream { replay_start: Some(_), .. })
    {
        return Err(invalid("stop-time", "stop-time is in the past"));
    }
    Ok(Params { target, stop_time, encoding })
}

fn periodic(el: &Element) -> Result<Trigger, RpcError> {
    let mut period = None;
    let mut anchor = None;
    for c in &el.children {
        if in_ns(c, NS_YP, "period") {
            period = Some(check_period(uint(c, "period")?)?);
        } else if in_ns(c, NS_YP, "anchor-time") {
            anchor = Some(parse_time(&c.text, "anchor-time")?);
        } else {
            return Err(bad(c));
        }
    }
    let period_cs = period.ok_or_else(|| {
        RpcError::protocol(ErrorTag::MissingElement, "periodic needs a period").with_bad_element("period")
    })?;
    Ok(Trigger::Periodic { period_cs, anchor })
}

fn check_period(p: u32) -> Result<u32, RpcError> {
    if p < MIN_PERIOD_CS {
        return Err(error(
            ErrorTag::InvalidValue,
            &yp("period-unsupported"),
            format!("period {p} cs is shorter than the shortest supported, {MIN_PERIOD_CS} cs"),
        )
        .with_bad_element("period"));
    }
    Ok(p)
}

fn on_change(el: &Element) -> Result<Trigger, RpcError> {
    let mut dampening_cs = 0;
    let mut sync_on_start = true;
    let mut excluded = Vec::new();
    for c in &el.children {
        if in_ns(c, NS_YP, "dampening-period") {
            dampening_cs = uint(c, "dampening-period")?;
        } else if in_ns(c, NS_YP, "sync-on-start") {
            sync_on_start = boolean(c, "sync-on-start")?;
        } else if in_ns(c, NS_YP, "excluded-change") {
            let op = EditOp::parse(c.trimmed())
                .ok_or_else(|| invalid("excluded-change", format!("\"{}\" is not a change type", c.trimmed())))?;
            if !excluded.contains(&op) {
                excluded.push(op);
            }
        } else {
            return Err(bad(c));
        }
    }
    Ok(Trigger::OnChange { dampening_cs, sync_on_start, excluded })
}

/// Reads modify-subscription's input.
pub fn modify(op: &Element, src: &str, filters: &Filters) -> Result<Modify, RpcError> {
    let mut m = Modify::default();
    let mut id = None;
    for c in &op.children {
        if in_ns(c, NS_SN, "id") {
            id = Some(uint(c, "id")?);
        } else if in_ns(c, NS_SN, "stream-subtree-filter") || in_ns(c, NS_YP, "datastore-subtree-filter") {
            crate::mgmt::filter::check_subtree(c)?;
            m.filter =
                Some(Some(Filter::Subtree(c.clone(), c.children_text(src).map_err(crate::mgmt::error::too_big)?)));
        } else if in_ns(c, NS_SN, "stream-xpath-filter") || in_ns(c, NS_YP, "datastore-xpath-filter") {
            m.filter = Some(Some(xpath(c, &c.name)?));
        } else if in_ns(c, NS_SN, "stream-filter-name") {
            m.filter = Some(Some(filters.resolve(c, true)?));
        } else if in_ns(c, NS_YP, "selection-filter-ref") {
            m.filter = Some(Some(filters.resolve(c, false)?));
        } else if in_ns(c, NS_SN, "stop-time") {
            m.stop_time = Some(parse_time(&c.text, "stop-time")?);
        } else if in_ns(c, NS_YP, "datastore") {
            // Allowed by the schema as a case member; a subscription's datastore cannot
            // change (RFC 8641 section 4.4.2), so it must name the same one.
            let (_, name) = identity(c);
            m.datastore =
                Some(Datastore::from_identity(&name).ok_or_else(|| invalid("datastore", "unknown datastore"))?);
        } else if in_ns(c, NS_YP, "periodic") {
            for p in &c.children {
                if in_ns(p, NS_YP, "period") {
                    m.period_cs = Some(check_period(uint(p, "period")?)?);
                } else if in_ns(p, NS_YP, "anchor-time") {
                    m.anchor = Some(parse_time(&p.text, "anchor-time")?);
                } else {
                    return Err(bad(p));
                }
            }
        } else if in_ns(c, NS_YP, "on-change") {
            for p in &c.children {
                if in_ns(p, NS_YP, "dampening-period") {
                    m.dampening_cs = Some(uint(p, "dampening-period")?);
                } else {
                    return Err(bad(p));
                }
            }
        } else {
            return Err(bad(c));
        }
    }
    m.id = id.ok_or_else(|| {
        RpcError::protocol(ErrorTag::MissingElement, "modify-subscription needs an id").with_bad_element("id")
    })?;
    if m.stop_time.is_some_and(|s| s <= Utc::now()) {
        return Err(invalid("stop-time", "stop-time is in the past"));
    }
    Ok(m)
}

/// Reads the `id` of delete-, kill- and resync-subscription.
pub fn id(op: &Element, ns: &str) -> Result<u32, RpcError> {
    let mut id = None;
    for c in &op.children {
        if in_ns(c, ns, "id") {
            id = Some(uint(c, "id")?);
        } else {
            return Err(bad(c));
        }
    }
    id.ok_or_else(|| {
        RpcError::protocol(ErrorTag::MissingElement, format!("{} needs an id", op.name)).with_bad_element("id")
    })
}

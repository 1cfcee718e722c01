//! NETCONF event notifications (RFC 5277): the NETCONF stream with a bounded replay log,
//! create-subscription with filters, startTime/stopTime replay, and the RFC 6470 base
//! notifications the server raises itself (session start/end, config change, confirmed
//! commit).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use yang2::data::{DataFormat, DataOperation, DataTree};

use super::error::xml_path;
use super::filter::Filter;
use super::xml::escape_text;
use super::Server;
use crate::datastore::{Change, ChangeOp, ConfigConsumer, SessionId, Transaction};
use crate::error::{ErrorTag, RpcError};

pub const NS_NOTIFICATION: &str = "urn:ietf:params:xml:ns:netconf:notification:1.0";
pub const NS_BASE_NOTIFICATIONS: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-notifications";
pub const NETCONF_STREAM: &str = "NETCONF";
/// Events kept for replay.
pub const REPLAY_CAPACITY: usize = 10_000;
/// More edits than this in one commit are reported without the edit list (RFC 6470
/// makes it optional), so a bulk copy does not produce a megabyte notification.
const MAX_EDITS: usize = 1_000;

/// One event notification.
#[derive(Debug)]
pub struct Event {
    pub seq: u64,
    pub time: DateTime<Utc>,
    pub module: String,
    pub name: String,
    /// The notification content element (e.g. `<netconf-session-start xmlns=…>…`).
    pub body: String,
}

impl Event {
    /// The complete `<notification>` message.
    pub fn message(&self) -> String {
        format!(
            "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime>{}</notification>",
            self.time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            self.body
        )
    }
}

/// The NETCONF stream: a broadcast channel plus the replay log.
pub struct EventBus {
    log: Mutex<VecDeque<Arc<Event>>>,
    tx: broadcast::Sender<Arc<Event>>,
    seq: AtomicU64,
    pub created: DateTime<Utc>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            log: Mutex::new(VecDeque::new()),
            tx: broadcast::channel(4096).0,
            seq: AtomicU64::new(0),
            created: Utc::now(),
        }
    }
}

impl EventBus {
    pub fn publish(&self, module: &str, name: &str, body: String) {
        let ev = Arc::new(Event {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            time: Utc::now(),
            module: module.to_owned(),
            name: name.to_owned(),
            body,
        });
        {
            let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() == REPLAY_CAPACITY {
                log.pop_front();
            }
            log.push_back(ev.clone());
        }
        let _ = self.tx.send(ev);
    }

    /// Subscribes, returning the logged events from `start` on (for replay) and the live
    /// receiver; taken under the log lock so no event is missed or seen twice.
    pub fn subscribe(&self, start: Option<DateTime<Utc>>) -> (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>) {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.tx.subscribe();
        let replay = match start {
            Some(t) => log.iter().filter(|e| e.time >= t).cloned().collect(),
            None => Vec::new(),
        };
        (replay, rx)
    }

    /// The time of the oldest event still replayable (RFC 5277 replayLogCreationTime).
    pub fn oldest(&self) -> DateTime<Utc> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).front().map(|e| e.time).unwrap_or(self.created)
    }
}

/// What a create-subscription asked for.
pub struct SubscriptionSpec {
    pub start: Option<DateTime<Utc>>,
    pub stop: Option<DateTime<Utc>>,
    /// Subtree filter source text or a translated XPath.
    pub filter: Option<NotificationFilter>,
}

pub enum NotificationFilter {
    /// A `<filter>` element's standalone text (re-parsed per subscription).
    Subtree(String),
    XPath(String),
}

impl NotificationFilter {
    pub fn from_filter(f: &Filter<'_>, src: &str) -> NotificationFilter {
        match f {
            Filter::Subtree(el) => NotificationFilter::Subtree(el.standalone_text(src)),
            Filter::XPath(x) => NotificationFilter::XPath(x.clone()),
        }
    }

    /// Whether the notification matches (the filter selects something of the part of its
    /// content `user` may read: NACM prunes the content before the filter runs).
    pub fn matches(&self, ev: &Event, nacm: &crate::nacm::Nacm, user: &str) -> bool {
        let ctx = crate::yang::context();
        let mut text = ev.body.clone().into_bytes();
        text.push(0);
        let Ok(tree) = DataTree::parse_op_string(ctx, &text, DataFormat::XML, DataOperation::NotificationYang) else {
            return false;
        };
        let tree = nacm.readable(user, tree);
        match self {
            NotificationFilter::XPath(x) => super::filter::xpath::selects(x, &tree).unwrap_or(false),
            NotificationFilter::Subtree(f) => match super::xml::parse(f) {
                Ok(el) => super::filter::subtree::apply(&el, &tree).is_ok_and(|t| !t.is_empty()),
                Err(_) => false,
            },
        }
    }
}

/// Parses an RFC 5277 dateTime.
pub fn parse_time(s: &str, param: &str) -> Result<DateTime<Utc>, RpcError> {
    DateTime::parse_from_rfc3339(s.trim()).map(|t| t.with_timezone(&Utc)).map_err(|_| {
        RpcError::protocol(ErrorTag::BadElement, format!("{param} \"{}\" is not a date-and-time", s.trim()))
            .with_bad_element(param)
    })
}

/// `<replayComplete/>` / `<notificationComplete/>` (RFC 5277 section 2.2.1 and 2.2.2).
pub fn marker(name: &str) -> String {
    format!(
        "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime><{name} xmlns=\"urn:ietf:params:xml:ns:netmod:notification\"/></notification>",
        Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

// ----- RFC 6470 notifications -------------------------------------------------------------

fn changed_by(server: &Server, session: SessionId) -> String {
    if session == crate::datastore::SYSTEM_SESSION {
        return "<changed-by><server/></changed-by>".into();
    }
    let mut s = String::from("<changed-by>");
    if let Some(info) = server.session(session) {
        let _ = write!(s, "<username>{}</username>", escape_text(&info.username));
        let _ = write!(s, "<session-id>{session}</session-id>");
        if let Some(src) = info.source {
            let _ = write!(s, "<source-host>{}</source-host>", src.ip());
        }
    } else {
        // Not a NETCONF session: a RESTCONF request still has its user's NACM identity.
        let user = server.nacm.user_of(session).unwrap_or_else(|| "unknown".into());
        let _ = write!(s, "<username>{}</username><session-id>{session}</session-id>", escape_text(&user));
    }
    s.push_str("</changed-by>");
    s
}

fn session_info(username: &str, session: SessionId, source: Option<std::net::SocketAddr>) -> String {
    let mut s = format!("<username>{}</username><session-id>{session}</session-id>", escape_text(username));
    if let Some(src) = source {
        let _ = write!(s, "<source-host>{}</source-host>", src.ip());
    }
    s
}

pub fn session_start(server: &Server, username: &str, session: SessionId, source: Option<std::net::SocketAddr>) {
    let body = format!(
        "<netconf-session-start xmlns=\"{NS_BASE_NOTIFICATIONS}\">{}</netconf-session-start>",
        session_info(username, session, source)
    );
    server.events.publish("ietf-netconf-notifications", "netconf-session-start", body);
}

/// RFC 6470 termination-reason values.
pub fn session_end(
    server: &Server,
    username: &str,
    session: SessionId,
    source: Option<std::net::SocketAddr>,
    reason: &str,
    killed_by: Option<SessionId>,
) {
    let killed = killed_by.map(|k| format!("<killed-by>{k}</killed-by>")).unwrap_or_default();
    let body = format!(
        "<netconf-session-end xmlns=\"{NS_BASE_NOTIFICATIONS}\">{}{killed}<termination-reason>{reason}</termination-reason></netconf-session-end>",
        session_info(username, session, source)
    );
    server.events.publish("ietf-netconf-notifications", "netconf-session-end", body);
}

/// netconf-confirmed-commit (RFC 6470 section 2.4): start, cancel, timeout, extend, complete.
pub fn confirmed_commit(server: &Server, session: Option<SessionId>, event: &str, timeout: Option<u32>) {
    let who = match session.and_then(|s| server.session(s).map(|i| (s, i))) {
        Some((s, i)) => session_info(&i.username, s, i.source),
        None => String::new(),
    };
    let t = timeout.map(|t| format!("<timeout>{t}</timeout>")).unwrap_or_default();
    let body = format!(
        "<netconf-confirmed-commit xmlns=\"{NS_BASE_NOTIFICATIONS}\">{who}<confirm-event>{event}</confirm-event>{t}</netconf-confirmed-commit>"
    );
    server.events.publish("ietf-netconf-notifications", "netconf-confirmed-commit", body);
}

/// Publishes netconf-config-change after every change of running (RFC 6470 section 2.1).
pub struct ConfigChangeNotifier {
    pub server: Weak<Server>,
}

impl ConfigConsumer for ConfigChangeNotifier {
    fn name(&self) -> &str {
        "netconf-config-change"
    }
    fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
        Ok(())
    }
    fn apply(&self, tx: &Transaction<'_>) {
        let Some(server) = self.server.upgrade() else { return };
        let mut body = format!(
            "<netconf-config-change xmlns=\"{NS_BASE_NOTIFICATIONS}\">{}<datastore>running</datastore>",
            changed_by(&server, tx.session)
        );
        let roots = change_roots(tx.changes);
        if roots.len() <= MAX_EDITS {
            for c in roots {
                let (path, decls) = xml_path(&c.path);
                let op = match c.op {
                    ChangeOp::Create => "create",
                    ChangeOp::Delete => "delete",
                    ChangeOp::Modify | ChangeOp::Move => "replace",
                };
                let _ = write!(
                    body,
                    "<edit><target{decls}>{}</target><operation>{op}</operation></edit>",
                    escape_text(&path)
                );
            }
        }
        body.push_str("</netconf-config-change>");
        server.events.publish("ietf-netconf-notifications", "netconf-config-change", body);
    }
}

/// The changes not implied by another change in the list (a created or deleted subtree is
/// one edit, not one per descendant).
fn change_roots(changes: &[Change]) -> Vec<&Change> {
    let mut roots: Vec<&Change> = Vec::new();
    for c in changes {
        let covered = roots.iter().any(|r| {
            r.op == c.op
                && matches!(r.op, ChangeOp::Create | ChangeOp::Delete)
                && c.path.len() > r.path.len()
                && c.path.starts_with(&r.path)
                && c.path[r.path.len()..].starts_with('/')
        });
        if !covered && !c.is_key {
            roots.push(c);
        }
    }
    roots
}

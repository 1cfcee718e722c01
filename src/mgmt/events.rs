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
use super::Core;
use crate::datastore::{ChangeOp, ConfigConsumer, SessionId, Transaction};
use crate::error::{ErrorTag, RpcError};
use crate::text::xml as escape_text;

pub const NS_NOTIFICATION: &str = "urn:ietf:params:xml:ns:netconf:notification:1.0";
pub const NS_BASE_NOTIFICATIONS: &str = "urn:ietf:params:xml:ns:yang:ietf-netconf-notifications";
pub const NETCONF_STREAM: &str = "NETCONF";
/// Events of each class kept for replay, by default (`peer_limits.replay_events`).
pub const REPLAY_CAPACITY: usize = 10_000;
/// More edits than this in one commit are reported without the edit list (RFC 6470
/// makes it optional), so a bulk copy does not produce a megabyte notification.
const MAX_EDITS: usize = 1_000;

/// One event notification.
#[derive(Debug)]
pub struct Event {
    pub seq: u64,
    pub time: DateTime<Utc>,
    /// The module and name of the notification: the schema's, so static (no allocation
    /// per event kept in the replay log).
    pub module: &'static str,
    pub name: &'static str,
    /// The notification content element (e.g. `<netconf-session-start xmlns=…>…`), sized
    /// exactly: thousands of events stay in the replay log.
    pub body: Box<str>,
}

impl Event {
    /// The body followed by a NUL, as libyang's parser takes it (DESIGN, sharp edges).
    pub fn body_nul(&self) -> Vec<u8> {
        let mut text = Vec::with_capacity(self.body.len() + 1);
        text.extend_from_slice(self.body.as_bytes());
        text.push(0);
        text
    }

    /// The complete `<notification>` message.
    pub fn message(&self) -> String {
        format!(
            "<notification xmlns=\"{NS_NOTIFICATION}\"><eventTime>{}</eventTime>{}</notification>",
            self.time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            self.body
        )
    }
}

/// Which budget of the replay log an event is kept under. Peers can raise the events of
/// the agent's own module (auth-failure, metric-anomaly, sci-state-change, …) as fast as
/// they can send; the management events (RFC 6470: session start and end, config change,
/// confirmed commit) are raised by authenticated users. Each class has its own budget, so
/// no flood of the first pushes the second out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventClass {
    Management,
    Peer,
}

impl EventClass {
    pub fn of(module: &str) -> EventClass {
        if module == "ietf-netconf-notifications" {
            EventClass::Management
        } else {
            EventClass::Peer
        }
    }
}

/// What an event costs in the replay log: its text plus a fixed overhead.
fn cost(body_len: usize) -> usize {
    body_len + 96
}

/// Bytes of event text per block of the replay log.
const BLOCK: usize = 64 * 1024;

/// One event kept for replay: its text is a range of one of the ring's blocks.
#[derive(Debug)]
struct Kept {
    seq: u64,
    time: DateTime<Utc>,
    module: &'static str,
    name: &'static str,
    /// Which block (counted from the first the ring ever made) and where in it.
    block: u64,
    start: u32,
    len: u32,
}

/// One class's part of the replay log: bounded in events and in bytes, oldest out first.
///
/// The events' text is packed, in arrival order, into blocks of [`BLOCK`] bytes that are
/// freed whole once their last event has left the log. Kept as one small allocation each,
/// events published between large transient allocations (an event per login, between
/// 100 000-entry edits) landed in heap pages that the edits' data had freed, and each kept
/// such a page resident after the heap was trimmed: RSS grew with the log's event count by
/// pages, not bytes (issue 22's soak).
#[derive(Debug)]
struct Ring {
    events: VecDeque<Kept>,
    blocks: VecDeque<Vec<u8>>,
    /// The number of the first block in `blocks`.
    first_block: u64,
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
    /// Events too large for the budget on their own (delivered live, never replayable).
    oversized: u64,
}

impl Ring {
    fn new(max_events: usize, max_bytes: usize) -> Ring {
        Ring {
            events: VecDeque::new(),
            blocks: VecDeque::new(),
            first_block: 0,
            bytes: 0,
            max_events: max_events.max(1),
            max_bytes,
            oversized: 0,
        }
    }

    fn push(&mut self, ev: &Event) {
        let c = cost(ev.body.len());
        if c > self.max_bytes || u32::try_from(ev.body.len()).is_err() {
            self.oversized += 1;
            return;
        }
        while self.events.len() >= self.max_events || self.bytes + c > self.max_bytes {
            if !self.pop_oldest() {
                break;
            }
        }
        let text = ev.body.as_bytes();
        let fits = self.blocks.back().is_some_and(|b| b.capacity() - b.len() >= text.len());
        if !fits {
            self.blocks.push_back(Vec::with_capacity(BLOCK.max(text.len())));
        }
        let block = self.first_block + self.blocks.len() as u64 - 1;
        let Some(last) = self.blocks.back_mut() else { return };
        let start = last.len() as u32;
        last.extend_from_slice(text);
        self.bytes += c;
        self.events.push_back(Kept {
            seq: ev.seq,
            time: ev.time,
            module: ev.module,
            name: ev.name,
            block,
            start,
            len: text.len() as u32,
        });
    }

    /// Drops the oldest event, and the blocks no kept event uses any more.
    fn pop_oldest(&mut self) -> bool {
        let Some(old) = self.events.pop_front() else { return false };
        self.bytes -= cost(old.len as usize);
        let keep_from = self.events.front().map_or(self.first_block + self.blocks.len() as u64, |e| e.block);
        while self.first_block < keep_from && self.blocks.len() > 1 {
            self.blocks.pop_front();
            self.first_block += 1;
        }
        if self.events.is_empty() {
            // The last block too: nothing refers to it.
            self.first_block += self.blocks.len() as u64;
            self.blocks.clear();
        }
        true
    }

    fn text(&self, k: &Kept) -> &str {
        let block = &self.blocks[(k.block - self.first_block) as usize];
        let bytes = &block[k.start as usize..(k.start + k.len) as usize];
        // Copied in whole from a str, so on char boundaries.
        std::str::from_utf8(bytes).unwrap_or_default()
    }

    /// The kept events from `start` on, as events.
    fn since(&self, start: DateTime<Utc>) -> impl Iterator<Item = Arc<Event>> + '_ {
        self.events.iter().filter(move |k| k.time >= start).map(|k| {
            Arc::new(Event { seq: k.seq, time: k.time, module: k.module, name: k.name, body: self.text(k).into() })
        })
    }

    fn resize(&mut self, max_events: usize, max_bytes: usize) {
        self.max_events = max_events.max(1);
        self.max_bytes = max_bytes;
        while self.events.len() > self.max_events || self.bytes > self.max_bytes {
            if !self.pop_oldest() {
                break;
            }
        }
    }
}

#[derive(Debug)]
struct ReplayLog {
    management: Ring,
    peer: Ring,
}

impl ReplayLog {
    fn ring(&mut self, class: EventClass) -> &mut Ring {
        match class {
            EventClass::Management => &mut self.management,
            EventClass::Peer => &mut self.peer,
        }
    }
}

/// What the replay log holds (for the operational state, docs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayUsage {
    pub management_events: usize,
    pub management_bytes: usize,
    pub peer_events: usize,
    pub peer_bytes: usize,
}

/// The NETCONF stream: a broadcast channel plus the replay log.
pub struct EventBus {
    log: Mutex<ReplayLog>,
    tx: broadcast::Sender<Arc<Event>>,
    seq: AtomicU64,
    pub created: DateTime<Utc>,
}

/// Events the live channel holds for a subscriber that lags (it then skips, counted).
pub const LIVE_CAPACITY: usize = 4096;

impl Default for EventBus {
    fn default() -> Self {
        let limits = crate::config::peer_limits::PeerLimits::default();
        EventBus {
            log: Mutex::new(ReplayLog {
                management: Ring::new(limits.replay_events, limits.replay_management_bytes),
                peer: Ring::new(limits.replay_events, limits.replay_peer_bytes),
            }),
            tx: broadcast::channel(LIVE_CAPACITY).0,
            seq: AtomicU64::new(0),
            created: Utc::now(),
        }
    }
}

impl EventBus {
    /// Applies the `[peer_limits]` replay budgets.
    pub fn configure(&self, limits: &crate::config::peer_limits::PeerLimits) {
        let mut log = self.lock();
        log.management.resize(limits.replay_events, limits.replay_management_bytes);
        log.peer.resize(limits.replay_events, limits.replay_peer_bytes);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn publish(&self, module: &'static str, name: &'static str, body: String) {
        let mut log = self.lock();
        // Numbered under the lock: events enter the log and the broadcast in sequence order,
        // which the subscribers' "already replayed" checks (seq <= last) rely on.
        let ev = Arc::new(Event {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            time: Utc::now(),
            module,
            name,
            body: body.into_boxed_str(),
        });
        {
            log.ring(EventClass::of(module)).push(&ev);
            // Sent under the lock, so a subscriber (which takes it too) sees each event
            // either in its replay or live, never both and never neither.
            let _ = self.tx.send(ev);
        }
    }

    /// Subscribes, returning the logged events from `start` on (for replay, in order) and
    /// the live receiver; taken under the log lock so no event is missed or seen twice.
    pub fn subscribe(&self, start: Option<DateTime<Utc>>) -> (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>) {
        let log = self.lock();
        let rx = self.tx.subscribe();
        let replay = match start {
            Some(t) => {
                let mut v: Vec<Arc<Event>> = log.management.since(t).chain(log.peer.since(t)).collect();
                v.sort_by_key(|e| e.seq);
                v
            }
            None => Vec::new(),
        };
        (replay, rx)
    }

    /// The time of the oldest event still replayable (RFC 5277 replayLogCreationTime).
    pub fn oldest(&self) -> DateTime<Utc> {
        let log = self.lock();
        [log.management.events.front(), log.peer.events.front()]
            .into_iter()
            .flatten()
            .map(|e| e.time)
            .min()
            .unwrap_or(self.created)
    }

    /// What the replay log holds now.
    pub fn usage(&self) -> ReplayUsage {
        let log = self.lock();
        ReplayUsage {
            management_events: log.management.events.len(),
            management_bytes: log.management.bytes,
            peer_events: log.peer.events.len(),
            peer_bytes: log.peer.bytes,
        }
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
    pub fn from_filter(f: &Filter<'_>, src: &str) -> Result<NotificationFilter, crate::error::RpcError> {
        Ok(match f {
            Filter::Subtree(el) => {
                NotificationFilter::Subtree(el.standalone_text(src).map_err(crate::mgmt::error::too_big)?)
            }
            Filter::XPath(x) => NotificationFilter::XPath(x.clone()),
        })
    }

    /// Whether the notification matches (the filter selects something of the part of its
    /// content `user` may read: NACM prunes the content before the filter runs).
    pub fn matches(&self, ev: &Event, nacm: &crate::nacm::Nacm, user: &str) -> bool {
        let ctx = crate::yang::context();
        let text = ev.body_nul();
        let Ok(tree) = DataTree::parse_op_string(ctx, &text, DataFormat::XML, DataOperation::NotificationYang) else {
            return false;
        };
        let tree = nacm.readable(user, tree);
        match self {
            NotificationFilter::XPath(x) => super::filter::xpath::selects(x, &tree).unwrap_or(false),
            NotificationFilter::Subtree(f) => match crate::xml::parse(f) {
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

fn changed_by(server: &Core, session: SessionId) -> String {
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

pub fn session_start(server: &Core, username: &str, session: SessionId, source: Option<std::net::SocketAddr>) {
    let body = format!(
        "<netconf-session-start xmlns=\"{NS_BASE_NOTIFICATIONS}\">{}</netconf-session-start>",
        session_info(username, session, source)
    );
    server.events.publish("ietf-netconf-notifications", "netconf-session-start", body);
}

/// RFC 6470 termination-reason values.
pub fn session_end(
    server: &Core,
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
pub fn confirmed_commit(server: &Core, session: Option<SessionId>, event: &str, timeout: Option<u32>) {
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
    pub server: Weak<Core>,
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
        let roots = crate::datastore::change::roots(tx.changes);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed ring keeps exactly what a plain bounded queue of events would, and gives
    /// its blocks back as events leave (issue 22: memory follows the log's live data).
    #[test]
    fn issue_22_the_packed_replay_ring_holds_what_a_plain_queue_would() {
        let mut rng = crate::testing::Rng(0x2545_f491);
        for (max_events, max_bytes) in [(50, 1 << 20), (10_000, 200 * 1024), (3, 4096), (1, 1 << 20)] {
            let mut ring = Ring::new(max_events, max_bytes);
            let mut model: VecDeque<(u64, String)> = VecDeque::new();
            let mut model_bytes = 0;
            for seq in 0..3_000u64 {
                // Mostly small events, sometimes one of several blocks or over the budget.
                let len = match rng.below(100) {
                    0 => BLOCK * 2 + rng.below(100),
                    1..=3 => BLOCK - rng.below(8),
                    _ => rng.below(600),
                };
                let body: String = (0..len).map(|i| char::from(b'a' + ((seq as usize + i) % 26) as u8)).collect();
                let body = if seq % 7 == 0 { format!("é{body}") } else { body };
                let ev = Event { seq, time: Utc::now(), module: "m", name: "n", body: body.clone().into() };
                ring.push(&ev);
                let c = cost(body.len());
                if c <= max_bytes {
                    while model.len() >= max_events.max(1) || model_bytes + c > max_bytes {
                        let Some((_, old)) = model.pop_front() else { break };
                        model_bytes -= cost(old.len());
                    }
                    model_bytes += c;
                    model.push_back((seq, body));
                }
                let kept: Vec<(u64, String)> =
                    ring.since(DateTime::<Utc>::MIN_UTC).map(|e| (e.seq, e.body.to_string())).collect();
                assert_eq!(kept.len(), model.len(), "seq {seq}");
                assert!(kept.iter().zip(&model).all(|(a, b)| a == b), "seq {seq}");
                assert_eq!(ring.bytes, model_bytes);
                // Only the blocks the kept events use (and the one being filled) are held.
                let mut used: Vec<u64> = ring.events.iter().map(|k| k.block).collect();
                used.dedup();
                assert!(ring.blocks.len() <= used.len() + 1, "{} blocks for {} used", ring.blocks.len(), used.len());
            }
            ring.resize(1, max_bytes);
            assert!(ring.events.len() <= 1 && ring.blocks.len() <= 1);
        }
    }

    #[test]
    fn issue_11_a_peer_flood_never_pushes_management_events_out_of_the_replay_log() {
        let bus = EventBus::default();
        bus.configure(&crate::config::peer_limits::PeerLimits { replay_peer_bytes: 64 * 1024, ..Default::default() });
        let t0 = Utc::now();
        bus.publish("ietf-netconf-notifications", "netconf-session-start", "<s/>".into());
        bus.publish("ietf-netconf-notifications", "netconf-config-change", "<c/>".into());
        for _ in 0..10_000 {
            bus.publish("cats-sma", "auth-failure", "x".repeat(2000));
        }
        let u = bus.usage();
        assert!(u.peer_bytes <= 64 * 1024, "{u:?}");
        assert_eq!(u.management_events, 2);
        let (replay, _) = bus.subscribe(Some(t0));
        assert_eq!(replay[0].name, "netconf-session-start");
        assert_eq!(replay[1].name, "netconf-config-change");
        assert!(replay.windows(2).all(|w| w[0].seq < w[1].seq), "replay is in order");
        // An event larger than its whole budget is delivered live only.
        bus.publish("cats-sma", "auth-failure", "y".repeat(100 * 1024));
        assert!(bus.usage().peer_bytes <= 64 * 1024);
    }
}

//! YANG-Push: dynamic subscriptions to event streams (RFC 8639, NETCONF binding RFC 8640)
//! and to datastores (RFC 8641), periodic and on-change. `params.rs` reads the RPCs,
//! `subscription.rs` runs one subscription (scheduling, dampening, flow control),
//! `view.rs` selects and filters what a subscriber sees, `encode.rs` writes the
//! notifications, `state.rs` shows the subscriptions in the operational datastore. The
//! registry here owns every live subscription; the RPC handlers under `netconf/rpc/` call
//! it.

pub mod configured;
pub mod encode;
pub mod params;
pub mod probe;
pub mod state;
pub mod subscription;
pub mod view;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc};
use yang2::data::Data;

use self::params::{error, sn, yp, Filter, Modify, Params, Target, Trigger};
use self::subscription::{Control, Counters, Feeds, StreamSelector};
use self::view::{DatastoreView, RunningEdit, View};
use crate::datastore::{ChangeOp, ConfigConsumer, Datastore, SessionId, Transaction};
use crate::engine::changes::ChangeTap;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::Core;
use crate::xml::escape_text;

pub const NS_SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
pub const NS_YP: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
pub const NS_DS: &str = "urn:ietf:params:xml:ns:yang:ietf-datastores";

/// Live subscriptions per session and in all (beyond: insufficient-resources).
pub const MAX_PER_SESSION: usize = 64;
pub const MAX_TOTAL: usize = 1024;
/// Commits kept for a slow on-change subscriber of running.
const RUNNING_FEED: usize = 256;

/// One live subscription as the registry knows it.
pub struct Entry {
    pub id: u32,
    pub session: SessionId,
    pub user: String,
    pub params: Mutex<Params>,
    pub counters: Arc<Counters>,
    ctrl: mpsc::UnboundedSender<Control>,
    /// The stream subscription's selector (its filter changes with modify).
    selector: Option<Arc<Mutex<StreamSelector>>>,
}

/// The registry of dynamic subscriptions.
pub struct Push {
    subs: Mutex<HashMap<u32, Arc<Entry>>>,
    next_id: AtomicU32,
    /// Changes of running, fed by a datastore consumer.
    running: broadcast::Sender<Arc<Vec<RunningEdit>>>,
    /// The engine's typed change stream, once the engine runs.
    engine: OnceLock<ChangeTap>,
    /// The configured filters (`/sn:filters` of running), for subscriptions that name one.
    filters: std::sync::RwLock<Arc<params::Filters>>,
    /// The ids of configured subscriptions (in running): dynamic ids skip them.
    configured_ids: std::sync::RwLock<std::collections::HashSet<u32>>,
}

impl Default for Push {
    fn default() -> Self {
        Push {
            subs: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            running: broadcast::channel(RUNNING_FEED).0,
            engine: OnceLock::new(),
            filters: Default::default(),
            configured_ids: Default::default(),
        }
    }
}

/// A subscription task, built but not spawned.
pub(crate) struct Built {
    pub task: std::pin::Pin<Box<dyn std::future::Future<Output = subscription::End> + Send>>,
    pub selector: Option<Arc<Mutex<StreamSelector>>>,
    pub revision: Option<DateTime<Utc>>,
}

/// What establish-subscription answers.
pub struct Established {
    pub id: u32,
    pub replay_start_revision: Option<DateTime<Utc>>,
    /// Starts the subscription; to be called once the reply is queued.
    pub start: Box<dyn FnOnce() + Send>,
}

impl Push {
    /// Connects the engine's change stream (on-change on operational metric data).
    pub fn set_engine(&self, tap: ChangeTap) {
        let _ = self.engine.set(tap);
    }

    /// The consumer that feeds running's changes to on-change subscriptions.
    pub fn running_feed(self: &Arc<Self>) -> Arc<dyn ConfigConsumer> {
        Arc::new(RunningFeed { push: Arc::downgrade(self) })
    }

    /// The configured filters, as of the last commit.
    pub fn filters(&self) -> Arc<params::Filters> {
        self.filters.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_filters(&self, f: params::Filters) {
        *self.filters.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(f);
    }

    /// Records the ids configured subscriptions hold.
    pub fn set_configured_ids(&self, ids: std::collections::HashSet<u32>) {
        *self.configured_ids.write().unwrap_or_else(|e| e.into_inner()) = ids;
    }

    /// Adds `ids` to the configured ids (a commit being prepared); answers an id a live
    /// dynamic subscription holds instead, reserving nothing.
    pub fn reserve_configured_ids(&self, ids: impl Iterator<Item = u32>) -> Option<u32> {
        let mut configured = self.configured_ids.write().unwrap_or_else(|e| e.into_inner());
        let subs = self.lock();
        let ids: Vec<u32> = ids.collect();
        if let Some(id) = ids.iter().find(|id| !configured.contains(id) && subs.contains_key(id)) {
            return Some(*id);
        }
        configured.extend(ids);
        None
    }

    /// The next dynamic id: not one a configured subscription or a live one holds.
    fn allocate_id(&self) -> u32 {
        let configured = self.configured_ids.read().unwrap_or_else(|e| e.into_inner());
        let subs = self.lock();
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id != 0 && !configured.contains(&id) && !subs.contains_key(&id) {
                return id;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<Entry>>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn entries(&self) -> Vec<Arc<Entry>> {
        let mut v: Vec<_> = self.lock().values().cloned().collect();
        v.sort_by_key(|e| e.id);
        v
    }

    /// establish-subscription (RFC 8639 section 2.4.2, RFC 8641 section 4.4.1).
    pub fn establish(
        self: &Arc<Self>,
        server: &Arc<Core>,
        session: SessionId,
        user: &str,
        out: mpsc::Sender<String>,
        params: Params,
    ) -> Result<Established, RpcError> {
        {
            let subs = self.lock();
            if subs.len() >= MAX_TOTAL || subs.values().filter(|e| e.session == session).count() >= MAX_PER_SESSION {
                return Err(error(
                    ErrorTag::ResourceDenied,
                    &sn("insufficient-resources"),
                    format!("subscription limit reached ({MAX_PER_SESSION} per session, {MAX_TOTAL} in all)"),
                ));
            }
        }
        if let Target::Datastore { datastore, selection: Some(f), trigger: Trigger::OnChange { .. } } = &params.target {
            if !view::selects_on_change_objects(f, *datastore) {
                return Err(error(
                    ErrorTag::InvalidValue,
                    &yp("on-change-unsupported"),
                    "none of the selected objects supports on-change (statistics counters change with every report); use a periodic subscription",
                ));
            }
        }
        let id = self.allocate_id();
        let counters = Arc::new(Counters::default());
        let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel();
        let info = {
            let info = server.session(session);
            move || {
                if let Some(i) = &info {
                    i.out_notifications.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let weak_server = Arc::downgrade(server);
        let on_sent = move || {
            info();
            if let Some(s) = weak_server.upgrade() {
                s.stats.out_notifications.fetch_add(1, Ordering::Relaxed);
            }
        };
        let built = self.build(server, id, user, &params, out, counters.clone(), ctrl_rx, on_sent);
        let (task, selector, revision) = (built.task, built.selector, built.revision);
        let entry = Arc::new(Entry {
            id,
            session,
            user: user.to_owned(),
            params: Mutex::new(params),
            counters,
            ctrl: ctrl_tx.clone(),
            selector,
        });
        self.lock().insert(id, entry);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let end = task.await;
            tracing::info!(id, ?end, "subscription ended");
            if let Some(p) = weak.upgrade() {
                p.lock().remove(&id);
            }
        });
        Ok(Established {
            id,
            replay_start_revision: revision,
            start: Box::new(move || {
                let _ = ctrl_tx.send(Control::Start);
            }),
        })
    }

    /// The task of one subscription (dynamic, or one receiver of a configured one) writing
    /// its messages to `out` in the params' encoding, controlled through `ctrl_rx`; not
    /// yet spawned.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        &self,
        server: &Arc<Core>,
        id: u32,
        user: &str,
        params: &Params,
        out: mpsc::Sender<String>,
        counters: Arc<Counters>,
        ctrl_rx: mpsc::UnboundedReceiver<Control>,
        on_sent: impl Fn() + Send + 'static,
    ) -> Built {
        let encoding = params.encoding.unwrap_or(encode::Encoding::Xml);
        let outbox = subscription::outbox(id, counters.clone(), out, encoding, on_sent);
        let stop = params.stop_time.map(subscription::instant_at);
        let mut revision = None;
        let mut selector = None;
        let task: std::pin::Pin<Box<dyn std::future::Future<Output = subscription::End> + Send>> = match &params.target
        {
            Target::Stream { stream, filter, replay_start } => {
                let (nacm, nacm2) = (server.nacm.clone(), server.nacm.clone());
                let (u, u2) = (user.to_owned(), user.to_owned());
                let sel = Arc::new(Mutex::new(StreamSelector {
                    module: (stream != "NETCONF").then(|| stream.clone()),
                    filter: filter.clone(),
                    allowed: Box::new(move |m, n| nacm.may_notify(&u, m, n)),
                    content: Box::new(move |ev| nacm2.event_for(&u2, ev)),
                }));
                selector = Some(sel.clone());
                let (replay, live) = server.events.subscribe(*replay_start);
                if let Some(start) = replay_start {
                    let oldest = server.events.oldest();
                    if *start < oldest {
                        revision = Some(oldest);
                    }
                }
                Box::pin(subscription::run_stream(sel, replay, replay_start.is_some(), live, stop, ctrl_rx, outbox))
            }
            Target::Datastore { datastore, selection, trigger } => {
                let view: Arc<dyn View> = Arc::new(
                    DatastoreView::new(
                        server.datastores.clone(),
                        server.nacm.clone(),
                        user.to_owned(),
                        *datastore,
                        selection.clone(),
                    )
                    .with_encoding(encoding),
                );
                let feeds = Feeds {
                    engine: (*datastore == Datastore::Operational)
                        .then(|| self.engine.get().map(|t| t.subscribe()))
                        .flatten(),
                    running: Some(self.running.subscribe()),
                };
                Box::pin(subscription::run_datastore(view, trigger.clone(), stop, feeds, ctrl_rx, outbox))
            }
        };
        Built { task, selector, revision }
    }

    fn own(&self, id: u32, session: SessionId) -> Option<Arc<Entry>> {
        self.lock().get(&id).filter(|e| e.session == session).cloned()
    }

    /// modify-subscription (RFC 8639 section 2.4.3, RFC 8641 section 4.4.2); returns the
    /// action to run once the reply is queued.
    pub fn modify(
        &self,
        server: &Arc<Core>,
        session: SessionId,
        m: Modify,
    ) -> Result<Box<dyn FnOnce() + Send>, RpcError> {
        let entry = self.own(m.id, session).ok_or_else(|| {
            error(
                ErrorTag::InvalidValue,
                &sn("no-such-subscription"),
                format!("no subscription {} of this session", m.id),
            )
        })?;
        let mut params = entry.params.lock().unwrap_or_else(|e| e.into_inner());
        let mut new_view: Option<Arc<dyn View>> = None;
        match &mut params.target {
            Target::Stream { filter, .. } => {
                if m.period_cs.is_some() || m.anchor.is_some() || m.dampening_cs.is_some() || m.datastore.is_some() {
                    return Err(RpcError::protocol(
                        ErrorTag::InvalidValue,
                        "datastore parameters do not apply to a stream subscription",
                    ));
                }
                if let Some(f) = &m.filter {
                    *filter = f.clone();
                }
            }
            Target::Datastore { datastore, selection, trigger } => {
                if m.datastore.is_some_and(|d| d != *datastore) {
                    return Err(error(
                        ErrorTag::InvalidValue,
                        &yp("datastore-not-subscribable"),
                        "a subscription's datastore cannot be changed",
                    ));
                }
                match trigger {
                    Trigger::Periodic { period_cs, anchor } => {
                        if m.dampening_cs.is_some() {
                            return Err(error(
                                ErrorTag::InvalidValue,
                                &yp("period-unsupported"),
                                "a periodic subscription cannot become on-change",
                            ));
                        }
                        if let Some(p) = m.period_cs {
                            *period_cs = p;
                        }
                        if m.anchor.is_some() {
                            *anchor = m.anchor;
                        }
                    }
                    Trigger::OnChange { dampening_cs, .. } => {
                        if m.period_cs.is_some() || m.anchor.is_some() {
                            return Err(error(
                                ErrorTag::InvalidValue,
                                &yp("on-change-unsupported"),
                                "an on-change subscription cannot become periodic",
                            ));
                        }
                        if let Some(d) = m.dampening_cs {
                            *dampening_cs = d;
                        }
                        if let Some(Some(f)) = &m.filter {
                            if !view::selects_on_change_objects(f, *datastore) {
                                return Err(error(
                                    ErrorTag::InvalidValue,
                                    &yp("on-change-unsupported"),
                                    "none of the newly selected objects supports on-change",
                                ));
                            }
                        }
                    }
                }
                if let Some(f) = &m.filter {
                    *selection = f.clone();
                    new_view = Some(Arc::new(
                        DatastoreView::new(
                            server.datastores.clone(),
                            server.nacm.clone(),
                            entry.user.clone(),
                            *datastore,
                            f.clone(),
                        )
                        .with_encoding(params.encoding.unwrap_or(encode::Encoding::Xml)),
                    ));
                }
            }
        }
        if let Some(s) = m.stop_time {
            params.stop_time = Some(s);
        }
        if let (Some(sel), Some(f)) = (&entry.selector, &m.filter) {
            // Applied by the task too; set here so the state shows it at once.
            sel.lock().unwrap_or_else(|e| e.into_inner()).filter = f.clone();
        }
        let enc = params.encoding.unwrap_or(encode::Encoding::Xml);
        let notice = encode::message(enc, Utc::now(), &policy_xml("subscription-modified", entry.id, &params))
            .unwrap_or_else(|| encode::state_in(enc, "subscription-modified", entry.id));
        drop(params);
        let ctrl = entry.ctrl.clone();
        Ok(Box::new(move || {
            let _ = ctrl.send(Control::Modify { m: Box::new(m), view: new_view, notice });
        }))
    }

    /// delete-subscription (RFC 8639 section 2.4.4): the session's own subscription ends
    /// without a notification.
    pub fn delete(&self, session: SessionId, id: u32) -> Result<(), RpcError> {
        let entry = self.own(id, session).ok_or_else(|| {
            error(ErrorTag::InvalidValue, &sn("no-such-subscription"), format!("no subscription {id} of this session"))
        })?;
        self.lock().remove(&id);
        let _ = entry.ctrl.send(Control::Delete);
        Ok(())
    }

    /// kill-subscription (RFC 8639 section 2.4.5): any session's subscription; its receiver
    /// gets subscription-terminated.
    pub fn kill(&self, id: u32) -> Result<(), RpcError> {
        let entry = self.lock().remove(&id).ok_or_else(|| {
            error(ErrorTag::InvalidValue, &sn("no-such-subscription"), format!("no subscription {id}"))
        })?;
        let _ = entry.ctrl.send(Control::Terminate("no-such-subscription"));
        Ok(())
    }

    /// resync-subscription (RFC 8641 section 4.4.3).
    pub fn resync(&self, session: SessionId, id: u32) -> Result<Box<dyn FnOnce() + Send>, RpcError> {
        let entry = self
            .own(id, session)
            .filter(|e| {
                matches!(
                    e.params.lock().unwrap_or_else(|p| p.into_inner()).target,
                    Target::Datastore { trigger: Trigger::OnChange { .. }, .. }
                )
            })
            .ok_or_else(|| {
                error(
                    ErrorTag::InvalidValue,
                    &yp("no-such-subscription-resync"),
                    format!("no on-change subscription {id} of this session"),
                )
            })?;
        let ctrl = entry.ctrl.clone();
        Ok(Box::new(move || {
            let _ = ctrl.send(Control::Resync);
        }))
    }

    /// A session ended: its dynamic subscriptions end with it (RFC 8639 section 2.4).
    pub fn session_ended(&self, session: SessionId) {
        let gone: Vec<Arc<Entry>> = {
            let mut subs = self.lock();
            let ids: Vec<u32> = subs.values().filter(|e| e.session == session).map(|e| e.id).collect();
            ids.iter().filter_map(|id| subs.remove(id)).collect()
        };
        for e in gone {
            let _ = e.ctrl.send(Control::Delete);
        }
    }
}

/// An XPath's module-name prefixes as XML namespace declarations.
pub fn xpath_xml(x: &str) -> String {
    let ctx = crate::yang::context();
    let mut decls = String::new();
    let mut seen: Vec<&str> = Vec::new();
    let mut quote = None;
    let bytes = x.as_bytes();
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        let c = b as char;
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        if c == '\'' || c == '"' {
            quote = Some(c);
            start = None;
            continue;
        }
        if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' {
            start.get_or_insert(i);
            continue;
        }
        if c == ':' && bytes.get(i + 1) != Some(&b':') {
            if let Some(s) = start {
                let word = &x[s..i];
                if !seen.contains(&word) {
                    if let Some(m) = ctx.get_module_latest(word) {
                        let _ = write!(decls, " xmlns:{word}=\"{}\"", m.namespace());
                        seen.push(word);
                    }
                }
            }
        }
        start = None;
    }
    decls
}

fn filter_xml(f: &Filter, subtree: &str, xpath: &str, ns: &str) -> String {
    match f {
        Filter::Subtree(_, text) => format!("<{subtree} xmlns=\"{ns}\">{text}</{subtree}>"),
        Filter::XPath(x) => format!("<{xpath} xmlns=\"{ns}\"{}>{}</{xpath}>", xpath_xml(x), escape_text(x)),
    }
}

/// A state notification carrying the subscription's terms (subscription-modified).
pub fn policy_xml(name: &str, id: u32, p: &Params) -> String {
    let mut s = format!("<{name} xmlns=\"{NS_SN}\"><id>{id}</id>");
    match &p.target {
        Target::Stream { stream, filter, replay_start } => {
            let _ = write!(s, "<stream>{}</stream>", escape_text(stream));
            if let Some(f) = filter {
                s.push_str(&filter_xml(f, "stream-subtree-filter", "stream-xpath-filter", NS_SN));
            }
            if let Some(t) = replay_start {
                let _ = write!(s, "<replay-start-time>{}</replay-start-time>", encode::time(*t));
            }
        }
        Target::Datastore { datastore, selection, trigger } => {
            let _ = write!(
                s,
                "<datastore xmlns=\"{NS_YP}\" xmlns:ds=\"{NS_DS}\">ds:{}</datastore>",
                datastore.identity().rsplit(':').next().unwrap_or("")
            );
            if let Some(f) = selection {
                s.push_str(&filter_xml(f, "datastore-subtree-filter", "datastore-xpath-filter", NS_YP));
            }
            s.push_str(&trigger_xml(trigger));
        }
    }
    if let Some(t) = p.stop_time {
        let _ = write!(s, "<stop-time>{}</stop-time>", encode::time(t));
    }
    if let Some(e) = p.encoding {
        let (module, identity) = e.identity().split_once(':').unwrap_or(("", ""));
        let ns = crate::yang::context().get_module_latest(module).map(|m| m.namespace().to_owned()).unwrap_or_default();
        let _ = write!(s, "<encoding xmlns:e=\"{ns}\">e:{identity}</encoding>");
    }
    let _ = write!(s, "</{name}>");
    s
}

fn trigger_xml(t: &Trigger) -> String {
    match t {
        Trigger::Periodic { period_cs, anchor } => {
            let a = anchor.map(|a| format!("<anchor-time>{}</anchor-time>", encode::time(a))).unwrap_or_default();
            format!("<periodic xmlns=\"{NS_YP}\"><period>{period_cs}</period>{a}</periodic>")
        }
        Trigger::OnChange { dampening_cs, sync_on_start, excluded } => {
            let mut s = format!(
                "<on-change xmlns=\"{NS_YP}\"><dampening-period>{dampening_cs}</dampening-period><sync-on-start>{sync_on_start}</sync-on-start>"
            );
            for e in excluded {
                let _ = write!(s, "<excluded-change>{}</excluded-change>", e.yang());
            }
            s.push_str("</on-change>");
            s
        }
    }
}

/// Feeds every commit of running to on-change subscriptions, as typed changes each with
/// its node (ancestors included) so subscribers filter without reading the datastore.
struct RunningFeed {
    push: Weak<Push>,
}

impl ConfigConsumer for RunningFeed {
    fn name(&self) -> &str {
        "yang-push"
    }
    fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
        Ok(())
    }
    fn apply(&self, tx: &Transaction<'_>) {
        let Some(push) = self.push.upgrade() else { return };
        if push.running.receiver_count() == 0 {
            return;
        }
        let ctx = crate::yang::context();
        let mut edits = Vec::new();
        for c in roots(tx.changes) {
            let tree = match c.op {
                ChangeOp::Delete => {
                    let mut t = yang2::data::DataTree::new(ctx);
                    let value =
                        if matches!(c.kind, crate::datastore::NodeKind::Leaf) { c.old_value.as_deref() } else { None };
                    if t.new_path(&c.path, value, false).is_err() {
                        continue;
                    }
                    t
                }
                _ => match tx.config.find_path(&c.path).and_then(|n| n.duplicate(true)) {
                    Ok(t) => t,
                    Err(_) => continue,
                },
            };
            edits.push(RunningEdit { op: c.op, path: c.path.clone(), tree });
        }
        if !edits.is_empty() {
            let _ = push.running.send(Arc::new(edits));
        }
    }
}

/// The changes not implied by another (a created or deleted subtree is one edit: any change
/// below it is in the subtree the edit carries), keys left out.
fn roots(changes: &[crate::datastore::Change]) -> Vec<&crate::datastore::Change> {
    crate::datastore::change::roots_covering(changes, true)
}

#[cfg(test)]
mod roots_tests {
    use super::*;
    use crate::datastore::{Change, NodeKind};

    fn ch(op: ChangeOp, path: &str, is_key: bool) -> Change {
        Change {
            op,
            path: path.into(),
            schema_path: crate::datastore::change::schema_path_of(path).into(),
            kind: NodeKind::Other,
            is_key,
            value: None,
            old_value: None,
        }
    }

    /// The comparison of every change with every root kept, as `roots` was written before.
    fn naive(changes: &[Change]) -> Vec<&Change> {
        let mut out: Vec<&Change> = Vec::new();
        for c in changes {
            let covered = out.iter().any(|r| {
                matches!(r.op, ChangeOp::Create | ChangeOp::Delete)
                    && c.path.len() > r.path.len()
                    && c.path.starts_with(&r.path)
                    && c.path[r.path.len()..].starts_with('/')
            });
            if !covered && !c.is_key {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn rfc8641_on_change_edits_are_the_subtree_roots() {
        let cs = vec![
            ch(ChangeOp::Create, "/m:a/l[k='x/y']", false),
            ch(ChangeOp::Create, "/m:a/l[k='x/y']/k", true),
            ch(ChangeOp::Create, "/m:a/l[k='x/y']/v", false),
            ch(ChangeOp::Delete, "/m:a/l[k='z']", false),
            ch(ChangeOp::Modify, "/m:a/l[k='x/y']/w", false),
            ch(ChangeOp::Create, "/m:a/l[k='z']", false),
            ch(ChangeOp::Create, "/m:a/l[k='z']/v", false),
            ch(ChangeOp::Modify, "/m:a/lx", false),
            ch(ChangeOp::Create, "/m:a/lx/y", false),
            ch(ChangeOp::Move, "/m:a/u[.='1']", false),
        ];
        let got: Vec<&str> = roots(&cs).iter().map(|c| c.path.as_str()).collect();
        let want: Vec<&str> = naive(&cs).iter().map(|c| c.path.as_str()).collect();
        assert_eq!(got, want);
        assert_eq!(
            got,
            vec!["/m:a/l[k='x/y']", "/m:a/l[k='z']", "/m:a/l[k='z']", "/m:a/lx", "/m:a/lx/y", "/m:a/u[.='1']"]
        );
    }
}

//! The life of one dynamic subscription (RFC 8639 section 2.4 and 2.7, RFC 8641 section
//! 3): periodic scheduling with anchor time, on-change dampening and sync, event stream
//! replay, and flow control. Each subscription writes to its own bounded queue; when the
//! queue is nearly full the receiver is too slow and the subscription is suspended
//! (insufficient-resources), its pending changes dropped; once the queue has drained it
//! resumes, and a datastore subscription resynchronises with a push-update. Time is tokio
//! time, so tests run it with paused time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use yang2::data::{DataFormat, DataOperation, DataTree};

use super::encode::{self, Edit, Encoding};
use super::params::{EditOp, Filter, Modify, Trigger};
use super::view::{Batch, RunningEdit, View};
use crate::engine::changes::ChangeSet;
use crate::mgmt::events::Event;
use crate::mgmt::filter::{subtree, xpath};

/// Messages a subscription's queue holds.
pub const QUEUE: usize = 256;
/// Slots kept for state notifications (suspended, resumed, terminated): data stops at
/// this many free slots.
pub const RESERVED: usize = 4;
/// How often a suspended subscription looks whether its receiver caught up.
pub const RESUME_CHECK: Duration = Duration::from_millis(100);
/// A subscription suspended this long is terminated (suspension-timeout).
pub const SUSPENSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Counters shown in the operational state (receivers/receiver).
#[derive(Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub excluded: AtomicU64,
    pub suspended: AtomicBool,
}

/// What the owner of a subscription asks of it.
pub enum Control {
    /// Begin (sent once the establish-subscription reply is queued).
    Start,
    /// Apply a modify-subscription: new terms, a new view (datastore subscriptions with a
    /// new selection filter) and the subscription-modified notification to send.
    Modify {
        m: Box<Modify>,
        view: Option<Arc<dyn View>>,
        notice: String,
    },
    Resync,
    /// End with subscription-terminated and this reason (kill-subscription).
    Terminate(&'static str),
    /// End silently (delete-subscription, session end).
    Delete,
}

/// Why a subscription task ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Deleted,
    Terminated(&'static str),
    StopTime,
    ReceiverGone,
}

/// The output side: a bounded queue drained towards the session.
pub struct Outbox {
    pub id: u32,
    pub tx: mpsc::Sender<String>,
    pub counters: Arc<Counters>,
    /// What every message is written in (XML or JSON; CBOR is JSON converted by the
    /// transport).
    pub encoding: Encoding,
}

enum Sent {
    Ok,
    Full,
    Gone,
}

impl Outbox {
    /// Queues a data notification unless the queue is down to its reserved slots.
    fn data(&self, msg: String) -> Sent {
        if self.tx.is_closed() {
            return Sent::Gone;
        }
        if self.tx.capacity() <= RESERVED {
            return Sent::Full;
        }
        match self.tx.try_send(msg) {
            Ok(()) => {
                self.counters.sent.fetch_add(1, Ordering::Relaxed);
                Sent::Ok
            }
            Err(mpsc::error::TrySendError::Full(_)) => Sent::Full,
            Err(mpsc::error::TrySendError::Closed(_)) => Sent::Gone,
        }
    }

    /// Queues a state notification, using a reserved slot if need be.
    fn state(&self, msg: String) -> bool {
        !matches!(self.tx.try_send(msg), Err(mpsc::error::TrySendError::Closed(_)))
    }

    fn drained(&self) -> bool {
        self.tx.capacity() >= QUEUE / 2
    }
}

/// Flow-control state shared by every kind of subscription.
struct Flow {
    suspended_at: Option<Instant>,
}

impl Flow {
    fn suspend(&mut self, out: &Outbox) {
        if self.suspended_at.is_none() {
            self.suspended_at = Some(Instant::now());
            out.counters.suspended.store(true, Ordering::Relaxed);
            tracing::warn!(id = out.id, "subscription suspended: the receiver does not keep up");
            out.state(encode::state_with_reason_in(
                out.encoding,
                "subscription-suspended",
                out.id,
                "insufficient-resources",
            ));
        }
    }

    /// Resumes when the queue has drained; `Err` when suspended for too long.
    fn try_resume(&mut self, out: &Outbox) -> Result<bool, End> {
        let Some(since) = self.suspended_at else { return Ok(false) };
        if out.drained() {
            self.suspended_at = None;
            out.counters.suspended.store(false, Ordering::Relaxed);
            out.state(encode::state_in(out.encoding, "subscription-resumed", out.id));
            return Ok(true);
        }
        if since.elapsed() >= SUSPENSION_TIMEOUT {
            return Err(End::Terminated("suspension-timeout"));
        }
        Ok(false)
    }

    fn next_check(&self) -> Option<Instant> {
        self.suspended_at.map(|_| Instant::now() + RESUME_CHECK)
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Waits for `Control::Start`; anything else before it ends the subscription.
async fn started(ctrl: &mut mpsc::UnboundedReceiver<Control>) -> bool {
    matches!(ctrl.recv().await, Some(Control::Start))
}

fn finish(out: &Outbox, end: End) -> End {
    if let End::Terminated(reason) = end {
        out.state(encode::state_with_reason_in(out.encoding, "subscription-terminated", out.id, reason));
    }
    end
}

/// The datastore subscription's inputs (either may be absent).
pub struct Feeds {
    pub engine: Option<broadcast::Receiver<Arc<ChangeSet>>>,
    pub running: Option<broadcast::Receiver<Arc<Vec<RunningEdit>>>>,
}

async fn recv_opt<T: Clone>(rx: &mut Option<broadcast::Receiver<T>>) -> Result<T, broadcast::error::RecvError> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Pending on-change edits, one per target (a later change of the same node replaces the
/// earlier one: dampening batches).
#[derive(Default)]
struct Pending {
    edits: Vec<Edit>,
    index: HashMap<String, usize>,
    /// When the engine started the oldest change held (latency probe).
    oldest: Option<Instant>,
}

impl Pending {
    fn add(&mut self, e: Edit) {
        match self.index.get(&e.target) {
            Some(&i) => {
                let old = self.edits[i].op;
                let mut e = e;
                // A node created and changed within one period is still a create.
                if old == EditOp::Create && e.op == EditOp::Replace {
                    e.op = EditOp::Create;
                }
                self.edits[i] = e;
            }
            None => {
                self.index.insert(e.target.clone(), self.edits.len());
                self.edits.push(e);
            }
        }
    }
    fn take(&mut self) -> (Vec<Edit>, Option<Instant>) {
        self.index.clear();
        (std::mem::take(&mut self.edits), self.oldest.take())
    }
    fn clear(&mut self) {
        self.oldest = None;
        self.index.clear();
        self.edits.clear();
    }
}

async fn snapshot(view: &Arc<dyn View>) -> Result<String, crate::error::RpcError> {
    if !view.blocking() {
        return view.snapshot();
    }
    let v = view.clone();
    match tokio::task::spawn_blocking(move || v.snapshot()).await {
        Ok(r) => r,
        Err(e) => Err(crate::error::RpcError::application(crate::error::ErrorTag::OperationFailed, e.to_string())),
    }
}

/// Sends a push-update with the full selection; false when the receiver is gone.
async fn push_full(view: &Arc<dyn View>, out: &Outbox, flow: &mut Flow) -> bool {
    match snapshot(view).await {
        Ok(contents) => match out.data(encode::push_update_in(out.encoding, out.id, &contents, false)) {
            Sent::Ok => true,
            Sent::Full => {
                flow.suspend(out);
                true
            }
            Sent::Gone => false,
        },
        Err(e) => {
            tracing::warn!(id = out.id, "push-update not built: {}", e.message);
            true
        }
    }
}

/// Runs a datastore subscription (periodic or on-change).
pub async fn run_datastore(
    mut view: Arc<dyn View>,
    mut trigger: Trigger,
    mut stop: Option<Instant>,
    mut feeds: Feeds,
    mut ctrl: mpsc::UnboundedReceiver<Control>,
    out: Outbox,
) -> End {
    if !started(&mut ctrl).await {
        return End::Deleted;
    }
    let mut flow = Flow { suspended_at: None };
    let mut pending = Pending::default();
    let mut patch_id: u64 = 0;
    let mut last_push: Option<Instant> = None;
    let mut flush_at: Option<Instant> = None;
    let mut next_period: Option<Instant> = None;
    match &trigger {
        Trigger::Periodic { period_cs, anchor } => next_period = Some(first_period(*period_cs, *anchor)),
        Trigger::OnChange { sync_on_start: true, .. } => {
            if !push_full(&view, &out, &mut flow).await {
                return End::ReceiverGone;
            }
        }
        Trigger::OnChange { .. } => {}
    }
    if matches!(trigger, Trigger::Periodic { .. }) {
        feeds.engine = None;
        feeds.running = None;
    }
    let end = loop {
        let check = flow.next_check();
        tokio::select! {
            biased;
            c = ctrl.recv() => match c {
                None | Some(Control::Delete) => break End::Deleted,
                Some(Control::Terminate(r)) => break End::Terminated(r),
                Some(Control::Start) => {}
                Some(Control::Resync) => {
                    pending.clear();
                    flush_at = None;
                    if !push_full(&view, &out, &mut flow).await {
                        break End::ReceiverGone;
                    }
                }
                Some(Control::Modify { m, view: new_view, notice }) => {
                    if let Some(v) = new_view {
                        view = v;
                    }
                    if let Some(s) = m.stop_time {
                        stop = Some(instant_at(s));
                    }
                    match &mut trigger {
                        Trigger::Periodic { period_cs, anchor } => {
                            if let Some(p) = m.period_cs {
                                *period_cs = p;
                            }
                            if m.anchor.is_some() {
                                *anchor = m.anchor;
                            }
                            if m.period_cs.is_some() || m.anchor.is_some() {
                                next_period = Some(first_period(*period_cs, *anchor));
                            }
                        }
                        Trigger::OnChange { dampening_cs, .. } => {
                            if let Some(d) = m.dampening_cs {
                                *dampening_cs = d;
                            }
                        }
                    }
                    out.state(notice);
                }
            },
            _ = sleep_until(stop) => break End::StopTime,
            _ = sleep_until(check) => match flow.try_resume(&out) {
                Err(e) => break e,
                Ok(true) => {
                    // Resynchronise: what was dropped while suspended is covered by a
                    // full push-update (periodic subscriptions simply go on).
                    if matches!(trigger, Trigger::OnChange { .. }) && !push_full(&view, &out, &mut flow).await {
                        break End::ReceiverGone;
                    }
                }
                Ok(false) => {}
            },
            _ = sleep_until(next_period) => {
                let Trigger::Periodic { period_cs, .. } = trigger else { continue };
                let period = Duration::from_millis(period_cs as u64 * 10);
                let now = Instant::now();
                let mut next = next_period.unwrap_or(now) + period;
                while next <= now {
                    next += period;
                }
                next_period = Some(next);
                if flow.suspended_at.is_some() {
                    match flow.try_resume(&out) {
                        Err(e) => break e,
                        Ok(false) => continue,
                        Ok(true) => {}
                    }
                }
                if !push_full(&view, &out, &mut flow).await {
                    break End::ReceiverGone;
                }
            }
            // Due edits are sent below, after every arm.
            _ = sleep_until(flush_at) => {}
            r = recv_opt(&mut feeds.engine) => {
                if !on_batch(r.map(Batch::Engine), &view, &trigger, &out, &mut flow, &mut pending, &mut flush_at, last_push).await {
                    break End::ReceiverGone;
                }
            }
            r = recv_opt(&mut feeds.running) => {
                if !on_batch(r.map(Batch::Running), &view, &trigger, &out, &mut flow, &mut pending, &mut flush_at, last_push).await {
                    break End::ReceiverGone;
                }
            }
        }
        // Edits due now go out at once (not through a timer, which would round up to the
        // next millisecond tick).
        if flush_at.is_some_and(|t| t <= Instant::now()) {
            flush_at = None;
            let (edits, oldest) = pending.take();
            if edits.is_empty() || flow.suspended_at.is_some() {
                continue;
            }
            last_push = Some(Instant::now());
            match out.data(encode::push_change_update_in(out.encoding, out.id, patch_id, &edits, false)) {
                Sent::Ok => {
                    patch_id += 1;
                    if let Some(t) = oldest {
                        super::probe::record(t);
                        crate::mgmt::metrics::observe_push(t.elapsed());
                    }
                }
                Sent::Full => flow.suspend(&out),
                Sent::Gone => break End::ReceiverGone,
            }
        }
    };
    finish(&out, end)
}

/// Takes in one batch of changes; false when the receiver is gone.
#[allow(clippy::too_many_arguments)]
async fn on_batch(
    r: Result<Batch, broadcast::error::RecvError>,
    view: &Arc<dyn View>,
    trigger: &Trigger,
    out: &Outbox,
    flow: &mut Flow,
    pending: &mut Pending,
    flush_at: &mut Option<Instant>,
    last_push: Option<Instant>,
) -> bool {
    let Trigger::OnChange { dampening_cs, excluded, .. } = trigger else { return true };
    let batch = match r {
        Ok(b) => b,
        Err(broadcast::error::RecvError::Lagged(n)) => {
            // Changes were lost before this subscription saw them: resynchronise.
            tracing::warn!(id = out.id, "on-change subscription lagged by {n} change sets; resynchronising");
            pending.clear();
            *flush_at = None;
            if flow.suspended_at.is_none() {
                return push_full(view, out, flow).await;
            }
            return true;
        }
        Err(broadcast::error::RecvError::Closed) => return true,
    };
    if flow.suspended_at.is_some() {
        return true;
    }
    for e in view.edits(&batch) {
        if excluded.contains(&e.op) {
            out.counters.excluded.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        pending.add(e);
    }
    if let (Batch::Engine(set), false) = (&batch, pending.edits.is_empty()) {
        pending.oldest.get_or_insert(set.started);
    }
    if !pending.edits.is_empty() && flush_at.is_none() {
        let damp = Duration::from_millis(*dampening_cs as u64 * 10);
        let now = Instant::now();
        *flush_at = Some(match last_push {
            Some(l) if l + damp > now => l + damp,
            _ => now,
        });
    }
    true
}

/// The first periodic push: now, or the next instant aligned to the anchor time.
fn first_period(period_cs: u32, anchor: Option<chrono::DateTime<chrono::Utc>>) -> Instant {
    let now = Instant::now();
    let Some(anchor) = anchor else { return now };
    let period_ms = period_cs as i64 * 10;
    if period_ms == 0 {
        return now;
    }
    let since = (chrono::Utc::now() - anchor).num_milliseconds();
    let wait = (-since).rem_euclid(period_ms);
    now + Duration::from_millis(wait as u64)
}

/// The tokio instant of a wall-clock time (now if it has passed).
pub fn instant_at(t: chrono::DateTime<chrono::Utc>) -> Instant {
    Instant::now() + (t - chrono::Utc::now()).to_std().unwrap_or_default()
}

// ----- event stream subscriptions -----------------------------------------------------------

/// Whether the receiver may see notification module:name.
pub type NotifyCheck = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// The notification filter of a stream subscription.
pub struct StreamSelector {
    /// `Some("cats-sma")`: only that module's notifications.
    pub module: Option<String>,
    pub filter: Option<Filter>,
    /// Whether the receiver may see module:name (NACM, RFC 8341 section 3.4.6).
    pub allowed: NotifyCheck,
    /// The event as the receiver may see it: its content NACM-pruned (RFC 8341 3.4.6).
    pub content: EventView,
}

/// Gives the event as one receiver may see it (None: not at all).
pub type EventView = Box<dyn Fn(&Arc<Event>) -> Option<Arc<Event>> + Send + Sync>;

impl StreamSelector {
    /// The event to send (pruned for the receiver), if this subscription wants it.
    pub fn wants(&self, ev: &Arc<Event>) -> Option<Arc<Event>> {
        if self.module.as_deref().is_some_and(|m| m != ev.module) {
            return None;
        }
        if !(self.allowed)(ev.module, ev.name) {
            return None;
        }
        let ev = (self.content)(ev)?;
        let Some(f) = &self.filter else { return Some(ev) };
        let text = ev.body_nul();
        let tree =
            DataTree::parse_op_string(crate::yang::context(), &text, DataFormat::XML, DataOperation::NotificationYang)
                .ok()?;
        // The content is already pruned for the receiver: the filter sees only that.
        let tree = crate::mgmt::filter::Readable::pruned(tree);
        let selected = match f {
            Filter::XPath(x) => xpath::selects(x, &tree).unwrap_or(false),
            Filter::Subtree(el, _) => subtree::apply(el, &tree).is_ok_and(|t| !t.is_empty()),
        };
        selected.then_some(ev)
    }
}

/// Runs an event stream subscription: replay from the log (then replay-completed), live
/// events after, stop-time.
pub async fn run_stream(
    selector: Arc<Mutex<StreamSelector>>,
    replay: Vec<Arc<Event>>,
    replaying: bool,
    mut live: broadcast::Receiver<Arc<Event>>,
    mut stop: Option<Instant>,
    mut ctrl: mpsc::UnboundedReceiver<Control>,
    out: Outbox,
) -> End {
    if !started(&mut ctrl).await {
        return End::Deleted;
    }
    let mut flow = Flow { suspended_at: None };
    let wanted = |ev: &Arc<Event>| selector.lock().unwrap_or_else(|e| e.into_inner()).wants(ev);
    let mut last_seq = None;
    let stop_wall = stop.map(|s| chrono::Utc::now() + (s - Instant::now()));
    for ev in replay {
        if stop_wall.is_some_and(|s| ev.time > s) {
            break;
        }
        last_seq = Some(ev.seq);
        let Some(ev) = wanted(&ev) else {
            out.counters.excluded.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(text) = event_message(&out, &ev) else { continue };
        // Replay waits for room rather than suspending: the log is bounded.
        if out.tx.send(text).await.is_err() {
            return End::ReceiverGone;
        }
        out.counters.sent.fetch_add(1, Ordering::Relaxed);
    }
    if replaying && !out.state(encode::state_in(out.encoding, "replay-completed", out.id)) {
        return End::ReceiverGone;
    }
    let end = loop {
        let check = flow.next_check();
        tokio::select! {
            biased;
            c = ctrl.recv() => match c {
                None | Some(Control::Delete) => break End::Deleted,
                Some(Control::Terminate(r)) => break End::Terminated(r),
                Some(Control::Start) | Some(Control::Resync) => {}
                Some(Control::Modify { m, notice, .. }) => {
                    if let Some(f) = m.filter {
                        selector.lock().unwrap_or_else(|e| e.into_inner()).filter = f;
                    }
                    if let Some(s) = m.stop_time {
                        stop = Some(instant_at(s));
                    }
                    out.state(notice);
                }
            },
            _ = sleep_until(stop) => break End::StopTime,
            _ = sleep_until(check) => {
                if let Err(e) = flow.try_resume(&out) {
                    break e;
                }
            }
            r = live.recv() => match r {
                Ok(ev) => {
                    if last_seq.is_some_and(|l| ev.seq <= l) {
                        continue;
                    }
                    if flow.suspended_at.is_some() {
                        continue;
                    }
                    let Some(ev) = wanted(&ev) else {
                        out.counters.excluded.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let Some(text) = event_message(&out, &ev) else { continue };
                    match out.data(text) {
                        Sent::Ok => {}
                        Sent::Full => flow.suspend(&out),
                        Sent::Gone => break End::ReceiverGone,
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => flow.suspend(&out),
                Err(broadcast::error::RecvError::Closed) => break End::ReceiverGone,
            }
        }
    };
    finish(&out, end)
}

/// One event in the subscription's encoding; None (counted as excluded) when it has no
/// form in it.
fn event_message(out: &Outbox, ev: &Event) -> Option<String> {
    if out.encoding == Encoding::Xml {
        return Some(ev.message());
    }
    let m = encode::message(out.encoding, ev.time, &ev.body);
    if m.is_none() {
        out.counters.excluded.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(id = out.id, event = %ev.name, "event has no JSON form under the schema: not sent");
    }
    m
}

/// A queue plus a task that drains it into the session's writer, counting notifications.
pub fn outbox(
    id: u32,
    counters: Arc<Counters>,
    session: mpsc::Sender<String>,
    encoding: Encoding,
    on_sent: impl Fn() + Send + 'static,
) -> Outbox {
    let (tx, mut rx) = mpsc::channel::<String>(QUEUE);
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if session.send(m).await.is_err() {
                return;
            }
            on_sent();
        }
    });
    let encoding = if encoding == Encoding::Cbor { Encoding::Json } else { encoding };
    Outbox { id, tx, counters, encoding }
}

/// A oneshot used to wait for a subscription task's end (tests, kill).
pub type Done = oneshot::Receiver<End>;

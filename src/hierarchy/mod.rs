//! The hierarchy of C-SMAs (seed 004, Scalability): this agent as the coordinator of
//! subordinate C-SMAs. For each configured subordinate a task keeps one NETCONF session
//! over SSH (`client.rs`, the host key pinned) with an RFC 8641 on-change subscription
//! with sync-on-start to the subordinate's metric cache, decodes what it pushes
//! (`decode.rs`) and mirrors the entries into this agent's engine (`engine/mirror.rs`).
//! Everything downstream — policy, update control, the C-PS adapters — sees one site.
//!
//! Losing a subordinate: the task reconnects with backoff; the contribution stays for
//! `withdraw-after` and is then withdrawn (each SCI as a withdrawal, an immediate update).
//! A new session's push-update lists everything the subordinate holds: the coordinator
//! reconciles with it, so nothing is counted twice and nothing missed stays.

pub mod client;
pub mod config;
pub mod decode;
pub mod state;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::mirror::{Mirrored, Outcome};
use crate::engine::model::SciState;
use crate::engine::Engine;

use self::config::{Settings, Subordinate};
use self::decode::{Change, Event, SciView};

/// The subtree a site coordinator subscribes to: the per-SCI entries.
pub const FILTER: &str = "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><metric-cache/></cats-sma>";
/// The subtree a domain C-SMA subscribes to: the site's per-service aggregates.
pub const FILTER_SERVICES: &str = "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><services/></cats-sma>";

const YANG_PUSH: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";

/// The dampening period (centiseconds) that stands for a DOIC reduction of `r` percent on a
/// subordinate's on-change subscription: none without overload, then growing with the
/// reduction asked — 10 cs at 50 %, 90 cs at 90 %, 10 s at 100 %. Dampening coalesces the
/// changes of each object within the period into one edit, so what the subordinate sends
/// falls with it while every object's latest value still arrives.
pub fn dampening_for(r: u8) -> u32 {
    match r {
        0 => 0,
        100.. => 1000,
        r => (u32::from(r) * 10 / (100 - u32::from(r))).clamp(1, 1000),
    }
}

/// The duplicates listed per subordinate in the operational state.
pub const DUPLICATES_SHOWN: usize = 1000;

/// What a notification may hold (bytes, items); a subordinate with more SCIs than this in
/// one push-update is refused with a clear error rather than buffered without bound.
pub const MAX_NOTIFICATION: usize = 64 << 20;
pub const MAX_ITEMS: usize = 1_000_000;

/// Where a subordinate is (YANG `subordinate-status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Connecting,
    Subscribed,
    Down,
    Withdrawn,
    Disabled,
}

impl Status {
    pub fn yang(self) -> &'static str {
        match self {
            Status::Connecting => "connecting",
            Status::Subscribed => "subscribed",
            Status::Down => "down",
            Status::Withdrawn => "withdrawn",
            Status::Disabled => "disabled",
        }
    }
}

/// One subordinate as the operational state shows it.
#[derive(Clone, Debug)]
pub struct SubState {
    pub status: Status,
    pub connected_since: Option<DateTime<Utc>>,
    pub session_id: Option<u32>,
    pub subscription_id: Option<u32>,
    pub host_key_fingerprint: Option<String>,
    pub last_update: Option<DateTime<Utc>>,
    pub updates: u64,
    pub resyncs: u64,
    pub sessions: u64,
    pub connect_failures: u64,
    pub host_key_mismatches: u64,
    pub duplicates: u64,
    pub refused: u64,
    pub withdrawals: u64,
    /// The dampening period asked of the subordinate's subscription (centiseconds): the
    /// coordinator's overload reduction towards it (seed 003), 0 when not overloaded.
    pub dampening_cs: u32,
    pub dampening_changes: u64,
    pub last_error: Option<(String, DateTime<Utc>)>,
    /// CSCI-ID → who holds it, for the SCIs of this subordinate refused as duplicates.
    pub duplicate: BTreeMap<String, String>,
}

impl SubState {
    fn new(status: Status) -> SubState {
        SubState {
            status,
            connected_since: None,
            session_id: None,
            subscription_id: None,
            host_key_fingerprint: None,
            last_update: None,
            updates: 0,
            resyncs: 0,
            sessions: 0,
            connect_failures: 0,
            host_key_mismatches: 0,
            duplicates: 0,
            refused: 0,
            withdrawals: 0,
            dampening_cs: 0,
            dampening_changes: 0,
            last_error: None,
            duplicate: BTreeMap::new(),
        }
    }
}

/// Sends `subordinate-state-change` (name, status, reason, SCIs contributed).
pub type Notify = Arc<dyn Fn(&str, Status, &str, u32) + Send + Sync>;

struct Running {
    config: Subordinate,
    task: JoinHandle<()>,
    state: Arc<Mutex<SubState>>,
    /// Cleared when the task is stopped: an engine job of the task still queued then (an
    /// abort does not stop a poll already under way) finds it cleared and does nothing, so
    /// nothing is mirrored after the withdrawal that follows.
    alive: Arc<AtomicBool>,
}

impl Running {
    fn stop(&self) {
        self.alive.store(false, Ordering::SeqCst);
        self.task.abort();
    }
}

/// The coordinator role: the subordinate tasks and their state.
pub struct Hierarchy {
    engine: Engine,
    notify: Notify,
    settings: Mutex<Settings>,
    running: Mutex<HashMap<String, Running>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hierarchy {
    pub fn new(engine: Engine, notify: Notify) -> Arc<Hierarchy> {
        Arc::new(Hierarchy {
            engine,
            notify,
            settings: Mutex::new(Settings::default()),
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Applies a configuration: a subordinate added starts its task, one removed or
    /// disabled is stopped and its contribution withdrawn at once, one changed restarts
    /// its session (its contribution stays until the new session's push-update reconciles
    /// it, or `withdraw-after` passes).
    pub fn configure(self: &Arc<Self>, s: Settings) {
        let globals_changed = {
            let old = lock(&self.settings);
            old.withdraw_after != s.withdraw_after
                || old.shared_scis != s.shared_scis
                || old.domain != s.domain
                || old.connect_timeout != s.connect_timeout
                || old.reconnect_initial != s.reconnect_initial
                || old.reconnect_max != s.reconnect_max
        };
        *lock(&self.settings) = s.clone();
        let mut running = lock(&self.running);
        let wanted: HashSet<&str> = s.subordinates.iter().map(|c| c.name.as_str()).collect();
        let gone: Vec<String> = running.keys().filter(|k| !wanted.contains(k.as_str())).cloned().collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                r.stop();
                self.withdraw_now(&name, "removed from the configuration");
            }
        }
        for c in &s.subordinates {
            let same = running.get(&c.name).is_some_and(|r| r.config == *c && !globals_changed);
            if same {
                continue;
            }
            let previous = running.remove(&c.name);
            let state = match &previous {
                Some(r) => {
                    r.stop();
                    r.state.clone()
                }
                None => Arc::new(Mutex::new(SubState::new(Status::Connecting))),
            };
            if !c.enabled {
                lock(&state).status = Status::Disabled;
                self.withdraw_now(&c.name, "disabled");
                let task = tokio::spawn(async {});
                let alive = Arc::new(AtomicBool::new(false));
                running.insert(c.name.clone(), Running { config: c.clone(), task, state, alive });
                continue;
            }
            // A running predecessor's contribution is inherited; a disabled one had none.
            let inherited = previous.is_some_and(|p| p.config.enabled);
            let alive = Arc::new(AtomicBool::new(true));
            let task = tokio::spawn(run(self.clone(), c.clone(), s.clone(), state.clone(), inherited, alive.clone()));
            running.insert(c.name.clone(), Running { config: c.clone(), task, state, alive });
        }
    }

    /// Each subordinate's name and state, for the operational state.
    pub fn states(&self) -> Vec<(String, SubState)> {
        let running = lock(&self.running);
        let mut v: Vec<_> = running.iter().map(|(n, r)| (n.clone(), lock(&r.state).clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// How many SCIs each subordinate contributes (for a read of the operational state,
    /// which is not async).
    pub fn contributions_blocking(&self) -> HashMap<String, u32> {
        let names: Vec<String> = lock(&self.running).keys().cloned().collect();
        self.engine
            .query_blocking(move |core| names.into_iter().map(|n| (n.clone(), core.mirrors.count(&n))).collect())
            .unwrap_or_default()
    }

    fn withdraw_now(&self, name: &str, why: &'static str) {
        let name = name.to_owned();
        let notify = self.notify.clone();
        self.engine.submit(move |core| {
            let n = core.unmirror_except(&name, &HashSet::new());
            if n > 0 {
                tracing::info!(subordinate = %name, withdrawn = n, "{why}: its SCIs are withdrawn");
                notify(&name, Status::Withdrawn, why, 0);
            }
        });
    }
}

fn set_error(state: &Mutex<SubState>, e: &str) {
    lock(state).last_error = Some((e.to_owned(), Utc::now()));
}

/// One subordinate's task: connect, subscribe, mirror; on loss, reconnect with backoff and
/// withdraw the contribution once `withdraw-after` has passed without a new session having
/// reconciled it.
async fn run(
    h: Arc<Hierarchy>,
    c: Subordinate,
    s: Settings,
    state: Arc<Mutex<SubState>>,
    inherited: bool,
    alive: Arc<AtomicBool>,
) {
    let mut backoff = crate::backoff::Backoff::new(s.reconnect_initial, s.reconnect_max);
    // Since when the contribution has been unconfirmed (None: confirmed by a session's
    // push-update, or nothing contributed). A task started by a configuration change
    // inherits its predecessor's contribution, unconfirmed from now.
    let mut lost_at: Option<Instant> = inherited.then(Instant::now);
    // Set, in the engine job that applies it, once a session's first complete push-update
    // is applied; a withdrawal job checks it in the engine too, so whichever of the two
    // runs second sees the other's outcome.
    let reconciled = Arc::new(AtomicBool::new(false));
    loop {
        {
            let mut st = lock(&state);
            if st.status != Status::Withdrawn {
                st.status = Status::Connecting;
            }
        }
        reconciled.store(false, Ordering::SeqCst);
        let attempt = session(&h, &c, &s, &state, &reconciled, &alive);
        tokio::pin!(attempt);
        let reason = loop {
            tokio::select! {
                r = &mut attempt => break r,
                _ = sleep_until(lost_at.map(|t| t + s.withdraw_after)) => {
                    withdraw_lost(&h, &c.name, &state, Some(&reconciled)).await;
                    lost_at = None;
                }
            }
        };
        set_error(&state, &reason);
        if reconciled.load(Ordering::SeqCst) {
            // A session that had put the contribution right: it is current until now.
            backoff.reset();
            lost_at = Some(Instant::now());
            let name = c.name.clone();
            let n = h.engine.query(move |core| core.mirrors.count(&name)).await.unwrap_or(0);
            lock(&state).status = Status::Down;
            (h.notify)(&c.name, Status::Down, &reason, n);
            tracing::warn!(subordinate = %c.name, "session lost: {reason}; contribution kept for {:?}", s.withdraw_after);
        } else {
            {
                let mut st = lock(&state);
                if st.status != Status::Withdrawn {
                    st.status = Status::Down;
                }
            }
            if lost_at.is_none() {
                // Entries applied by a session that never reconciled (an incomplete
                // push-update, then changes) are unconfirmed from now on.
                let name = c.name.clone();
                if h.engine.query(move |core| core.mirrors.count(&name)).await.unwrap_or(0) > 0 {
                    lost_at = Some(Instant::now());
                }
            }
        }
        let until = Instant::now() + jitter(backoff.fail());
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                _ = sleep_until(lost_at.map(|t| t + s.withdraw_after)) => {
                    withdraw_lost(&h, &c.name, &state, None).await;
                    lost_at = None;
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Up to a quarter less than `d`, so that coordinators restarted together do not retry in
/// step.
fn jitter(d: Duration) -> Duration {
    let q = d.as_millis() as u64 / 4;
    if q == 0 {
        return d;
    }
    d - Duration::from_millis(rand::random::<u64>() % q)
}

/// Withdraws a lost subordinate's contribution, unless `unless` was set first (in the
/// engine: a session's push-update reconciled it meanwhile).
async fn withdraw_lost(h: &Hierarchy, name: &str, state: &Mutex<SubState>, unless: Option<&Arc<AtomicBool>>) {
    let unless = unless.cloned();
    let n = h
        .engine
        .query({
            let name = name.to_owned();
            move |core| {
                if unless.is_some_and(|r| r.load(Ordering::SeqCst)) {
                    return None;
                }
                Some(core.unmirror_except(&name, &HashSet::new()))
            }
        })
        .await
        .flatten();
    let Some(n) = n else { return };
    {
        let mut st = lock(state);
        st.status = Status::Withdrawn;
        st.withdrawals += u64::from(n > 0);
        st.duplicate.clear();
    }
    if n > 0 {
        tracing::warn!(subordinate = %name, withdrawn = n, "subordinate down for longer than withdraw-after: its SCIs are withdrawn");
        (h.notify)(name, Status::Withdrawn, "withdraw-after expired", 0);
    }
}

/// One session: connect, subscribe, mirror until it ends; returns why it ended.
async fn session(
    h: &Hierarchy,
    c: &Subordinate,
    s: &Settings,
    state: &Mutex<SubState>,
    reconciled: &Arc<AtomicBool>,
    alive: &Arc<AtomicBool>,
) -> String {
    let target = client::Target {
        host: c.address.clone(),
        port: c.port,
        username: c.username.clone(),
        auth: match &c.credential {
            config::Credential::Password(p) => client::ClientAuth::Password(p.clone()),
            config::Credential::PrivateKeyFile(f) => client::ClientAuth::PrivateKey(f.into()),
        },
        host_key: match &c.host_key {
            config::HostKey::Key(k) => client::HostKeyPin::Key(k.clone()),
            config::HostKey::Fingerprint(f) => client::HostKeyPin::Fingerprint(f.clone()),
        },
        connect_timeout: s.connect_timeout,
        max_message_size: MAX_NOTIFICATION,
    };
    let failed = |e: client::ClientError| {
        let mut st = lock(state);
        st.connect_failures += 1;
        if matches!(e, client::ClientError::HostKey(_)) {
            st.host_key_mismatches += 1;
        }
        e.to_string()
    };
    let mut sess = match client::Session::connect(&target).await {
        Ok(v) => v,
        Err(e) => return failed(e),
    };
    let filter = if s.domain { FILTER_SERVICES } else { FILTER };
    // Seed 003 on this hop: the coordinator is its subordinates' adjacent peer. Its own
    // overload (the reporting node's reduction, as towards its SCIs) is asked of them as
    // YANG-Push dampening, the standard throttle of an on-change subscription.
    let mut overload = Some(h.engine.doic.changed.subscribe());
    let mut dampening = dampening_for(h.engine.doic.local().reduction);
    let id = match sess.rpc(&client::establish_on_change(filter, dampening), s.connect_timeout).await {
        Ok(reply) => match client::subscription_id(&reply) {
            Ok(id) => id,
            Err(e) => return failed(e),
        },
        Err(e) => return failed(e),
    };
    {
        let mut st = lock(state);
        st.sessions += 1;
        st.session_id = Some(sess.session_id());
        st.subscription_id = Some(id);
        st.host_key_fingerprint = Some(sess.host_key_fingerprint().to_owned());
        st.dampening_cs = dampening;
    }
    tracing::info!(subordinate = %c.name, subscription = id, "subscribed to the subordinate's metric cache");
    loop {
        let msg = tokio::select! {
            m = sess.next_notification() => match m {
                Ok(m) => m,
                Err(e) => return e.to_string(),
            },
            changed = async {
                match overload.as_mut() {
                    Some(r) => r.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            } => {
                if !changed {
                    // The reporting node is gone (the agent stops): no more changes.
                    overload = None;
                }
                let want = dampening_for(h.engine.doic.local().reduction);
                if want != dampening {
                    let body = format!(
                        "<modify-subscription xmlns=\"{SN}\" xmlns:yp=\"{YANG_PUSH}\"><id>{id}</id>\
                         <yp:on-change><yp:dampening-period>{want}</yp:dampening-period></yp:on-change></modify-subscription>"
                    );
                    if let Err(e) = sess.rpc(&body, s.connect_timeout).await {
                        return format!("modify-subscription: {e}");
                    }
                    tracing::info!(subordinate = %c.name, "overload: dampening-period {dampening} -> {want} cs");
                    dampening = want;
                    let mut st = lock(state);
                    st.dampening_cs = want;
                    st.dampening_changes += 1;
                }
                continue;
            }
        };
        // Up to a push-update of every SCI: decoded off the runtime's worker threads.
        let event = tokio::task::spawn_blocking(move || {
            decode::decode(&msg, &decode::Limits { max_bytes: MAX_NOTIFICATION, max_items: MAX_ITEMS })
        })
        .await;
        let event = match event {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => {
                // A notification the coordinator cannot read leaves its view unknown: a
                // new session's push-update is the way back to a known state.
                tracing::warn!(subordinate = %c.name, "undecodable notification: {e}");
                sess.close().await;
                return format!("undecodable notification: {e}");
            }
            Err(e) => return format!("decoder: {e}"),
        };
        match event {
            Event::Snapshot { id: sid, scis, services, incomplete } if sid == id => {
                let changes = if s.domain {
                    services.into_iter().map(|v| Change::Sci(site_entry(&c.name, v))).collect()
                } else {
                    scis.into_iter().map(Change::Sci).collect()
                };
                let first = !reconciled.load(Ordering::SeqCst);
                let confirm = (!incomplete).then_some(reconciled);
                let applied = apply(h, &c.name, changes, confirm, (c.max_scis, s.shared_scis), alive).await;
                record(state, applied, true);
                if incomplete {
                    // Not everything is in it (RFC 8641 section 3.11): ask again.
                    let body =
                        format!("<resync-subscription xmlns=\"{YANG_PUSH}\"><id>{id}</id></resync-subscription>");
                    if let Err(e) = sess.rpc(&body, s.connect_timeout).await {
                        return format!("resync-subscription: {e}");
                    }
                } else if first {
                    {
                        let mut st = lock(state);
                        st.status = Status::Subscribed;
                        st.connected_since = Some(Utc::now());
                    }
                    let name = c.name.clone();
                    let count = h.engine.query(move |core| core.mirrors.count(&name)).await.unwrap_or(0);
                    (h.notify)(&c.name, Status::Subscribed, "subscription established and synchronised", count);
                }
            }
            Event::Changes { id: sid, changes, incomplete } if sid == id => {
                let changes = if s.domain { site_changes(&c.name, changes) } else { changes };
                let applied = apply(h, &c.name, changes, None, (c.max_scis, s.shared_scis), alive).await;
                record(state, applied, false);
                if incomplete {
                    // Something changed that the edits do not say (RFC 8641 section 3.11):
                    // a push-update of everything puts the view right.
                    let body =
                        format!("<resync-subscription xmlns=\"{YANG_PUSH}\"><id>{id}</id></resync-subscription>");
                    if let Err(e) = sess.rpc(&body, s.connect_timeout).await {
                        return format!("resync-subscription: {e}");
                    }
                }
            }
            Event::Ended { id: sid, reason, suspended } if sid == id => {
                sess.close().await;
                let what = if suspended { "suspended" } else { "terminated" };
                return format!("subscription {what} by the subordinate: {reason}");
            }
            _ => {}
        }
    }
}

/// What one notification did.
#[derive(Default)]
struct Applied {
    duplicates: Vec<(String, String)>,
    released: Vec<String>,
    refused: u64,
    first_refusal: Option<(String, String)>,
}

fn record(state: &Mutex<SubState>, a: Applied, snapshot: bool) {
    let mut st = lock(state);
    st.updates += 1;
    st.resyncs += u64::from(snapshot);
    st.last_update = Some(Utc::now());
    st.refused += a.refused;
    st.duplicates += a.duplicates.len() as u64;
    if snapshot {
        st.duplicate.clear();
    }
    for id in a.released {
        st.duplicate.remove(&id);
    }
    for (id, holder) in a.duplicates {
        if st.duplicate.len() < DUPLICATES_SHOWN || st.duplicate.contains_key(&id) {
            st.duplicate.insert(id, holder);
        }
    }
}

/// Applies one notification's changes in one engine job. With `full`, the changes list
/// everything the subordinate holds (a complete push-update): whatever else it contributed
/// goes, and the flag is set in the same job (the contribution is reconciled).
async fn apply(
    h: &Hierarchy,
    name: &str,
    changes: Vec<Change>,
    full: Option<&Arc<AtomicBool>>,
    (max, shared): (u32, bool),
    alive: &Arc<AtomicBool>,
) -> Applied {
    let name = name.to_owned();
    let alive = alive.clone();
    let confirm = full.cloned();
    let full = confirm.is_some();
    h.engine
        .query(move |core| {
            let mut out = Applied::default();
            if !alive.load(Ordering::SeqCst) {
                return out;
            }
            // A cleared container followed by entries is a replacement: the entries listed
            // after the clear are kept, the rest withdrawn after them (no withdraw-and-add).
            let clear = changes.iter().rposition(|c| matches!(c, Change::ClearScis));
            let mut keep = HashSet::new();
            for (i, ch) in changes.into_iter().enumerate() {
                match ch {
                    Change::Sci(v) => {
                        let id = v.csci_id.clone();
                        if full || clear.is_some_and(|c| i > c) {
                            keep.insert(id.clone());
                        }
                        let refused = match mirrored(v) {
                            Ok(m) => match core.mirror(&name, &m, max, shared) {
                                Outcome::Stored | Outcome::Unchanged => {
                                    out.released.push(id);
                                    continue;
                                }
                                Outcome::Duplicate(holder) => {
                                    out.duplicates.push((id, holder));
                                    continue;
                                }
                                Outcome::Refused(d) => d,
                            },
                            Err(d) => {
                                // What was held stays no longer than the subordinate's word.
                                core.unmirror(&name, &id);
                                d
                            }
                        };
                        out.refused += 1;
                        if out.first_refusal.is_none() {
                            out.first_refusal = Some((crate::text::printable(&id, 128), refused));
                        }
                    }
                    Change::SciGone(id) => {
                        core.unmirror(&name, &id);
                        keep.remove(&id);
                        out.released.push(id);
                    }
                    Change::ClearScis | Change::Service(_) | Change::ServiceGone(_) | Change::ClearServices => {}
                }
            }
            if full || clear.is_some() {
                core.unmirror_except(&name, &keep);
            }
            if let Some(r) = &confirm {
                r.store(true, Ordering::SeqCst);
            }
            if let Some((id, d)) = &out.first_refusal {
                // One line per notification, however many entries it refused.
                tracing::warn!(subordinate = %name, refused = out.refused, "entries refused, the first ({id}): {d}");
            }
            out
        })
        .await
        .unwrap_or_default()
}

/// A domain C-SMA (seed 004, Scalability: "site-level C-SMAs report to a domain-level
/// C-SMA, which aggregates across sites") mirrors each site's per-service aggregate as one
/// entry, `SITE/CS-ID`, learned from that site: the entries keep the per-site figures, and
/// the domain's own aggregation over them is the domain total per CS-ID that it reports.
/// A service aggregate has no timestamp or sequence number of its own: the domain stamps
/// it on arrival (a per-process increasing sequence), so the newest push always wins.
fn site_entry(site: &str, v: decode::ServiceView) -> SciView {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = Utc::now();
    let base = u64::try_from(now.timestamp_micros()).unwrap_or(0);
    // One atomic step: the next number above both the last one and the clock.
    let next = |last: u64| last.max(base) + 1;
    let seq = next(SEQ.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(next(last))).unwrap_or(0));
    SciView {
        csci_id: format!("{site}/{}", v.cs_id),
        cs_id: Some(v.cs_id),
        gas: v.site_gas,
        computing_time: v.computing_time,
        health: v.health,
        cost: v.cost,
        reputation: v.reputation,
        security_label: v.security_label,
        // From the sequence (microseconds, never going back), not the clock: a wall clock
        // stepped back must not make a newer aggregate look older.
        timestamp: Some(DateTime::from_timestamp_micros(i64::try_from(seq).unwrap_or(i64::MAX)).unwrap_or(now)),
        sequence: Some(seq),
        state: None,
    }
}

/// A site's service changes as the domain's entries (`site_entry`).
fn site_changes(site: &str, changes: Vec<Change>) -> Vec<Change> {
    changes
        .into_iter()
        .filter_map(|c| match c {
            Change::Service(v) => Some(Change::Sci(site_entry(site, v))),
            Change::ServiceGone(cs) => Some(Change::SciGone(format!("{site}/{cs}"))),
            Change::ClearServices => Some(Change::ClearScis),
            Change::Sci(_) | Change::SciGone(_) | Change::ClearScis => None,
        })
        .collect()
}

/// The typed entry, or why it cannot be one.
fn mirrored(v: SciView) -> Result<Mirrored, String> {
    let state = match v.state.as_deref() {
        Some("active") => SciState::Active,
        Some("healthy") | None => SciState::Healthy,
        Some("stale") => SciState::Stale,
        Some("failed") => SciState::Failed,
        Some(other) => return Err(format!("unknown state {other}")),
    };
    let missing = |what: &str| format!("the entry has no {what}");
    if state == SciState::Active || (state == SciState::Failed && v.gas.is_none()) {
        // Nothing reported (yet, or any more): nothing to contribute.
        return Ok(Mirrored {
            csci_id: v.csci_id,
            cs_id: v.cs_id.unwrap_or_default(),
            gas: 0,
            computing_time: 0,
            health: "unhealthy".into(),
            cost: None,
            reputation: None,
            security_label: None,
            timestamp: DateTime::<Utc>::MIN_UTC,
            sequence: 0,
            state: SciState::Active,
        });
    }
    Ok(Mirrored {
        cs_id: v.cs_id.ok_or_else(|| missing("cs-id"))?,
        gas: v.gas.ok_or_else(|| missing("gas"))?,
        computing_time: v.computing_time.ok_or_else(|| missing("computing-time"))?,
        health: v.health.ok_or_else(|| missing("health"))?,
        cost: v.cost,
        reputation: v.reputation,
        security_label: v.security_label,
        timestamp: v.timestamp.ok_or_else(|| missing("timestamp"))?,
        sequence: v.sequence.ok_or_else(|| missing("sequence-number"))?,
        state,
        csci_id: v.csci_id,
    })
}

//! The session with one C-PS (seed 004, C-PS Failure Handling and Update Controller,
//! reconciliation), one task per peer:
//!
//! ```text
//!  Standby ──(fallback: every primary in backoff)──► Connecting ──GET ok──► Connected
//!     ▲                                               ▲      │ fail           │ fail
//!     └──(fallback: a primary is connected again)     │      ▼                ▼
//!                                                     └──── Backoff (1, 2, 4 … 60 s)
//! ```
//!
//! Connecting is the reconciliation: `GET /cats/metrics` (REST) or opening the stream,
//! Hello → Welcome (gRPC, [`Channel::Grpc`]), tells what the C-PS holds for the site.
//! Nothing (it restarted and lost its state), a full-sync request, a gap in our buffer
//! (updates were dropped), a first contact or a reconnection after any failure (seed 004,
//! Network Partition) → ask the update controller for a full snapshot addressed to this
//! peer, and send no delta before it (the C-SMA's view wins). Otherwise the buffered
//! updates the C-PS has not acknowledged are sent in batches; a heartbeat equal to what the
//! peer acknowledged goes as a keepalive when the peer offers it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::auth::{sign, verify_reply, NonceSource, Psk, ReplyOc, Signed, H_REPLY_SIGNATURE};
use super::codec::Encoding;
use super::current::SiteView;
use super::grpc::{self, GrpcLink};
use super::queue::Queue;
use super::signing::{RequestBinding, SigningKey, H_JWS};
use super::transport::{Request, Response, Transport, TransportError};
use super::wire::{
    self, bounded_hint, sci_rows, Ack, ErrorBody, Granularity, Keepalive, MetricBatch, MetricReport, ReportKind,
    SciRow, SciUpdate, ServiceMetrics, SiteState, H_CSMA_ID, H_KEY_ID, H_NONCE, H_SEQUENCE, H_SIGNATURE, H_SITE_ID,
    H_TIMESTAMP, KEEPALIVE_PATH, METRICS_PATH, ROOT_ACK, ROOT_BATCH, ROOT_ERROR, ROOT_KEEPALIVE, ROOT_SCI, ROOT_SITE,
};
use crate::backoff::Backoff;
use crate::engine::update::{Advertisement, AdvertisementKind, Priority, Trigger};
use crate::overload::react::PeerOverload;
use crate::overload::wire::{Olr, Supported, H_OC_OLR, H_OC_SUPPORTED};
use crate::overload::Overload;

/// How long a session waits for a requested full snapshot before asking again.
const FULL_SYNC_RETRY: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Primary,
    Fallback,
}

/// A peer's settings (YANG `c-ps/peer`), already checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSettings {
    pub name: String,
    pub url: String,
    pub role: Role,
    pub priority: u16,
    pub allowed: std::collections::BTreeSet<String>,
    pub psk: Option<Psk>,
    pub gzip: bool,
    pub buffer_size: usize,
    pub batch_size: usize,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Body encoding (YANG `encoding`): JSON, XML or CBOR.
    pub encoding: Encoding,
    /// Site aggregate, per-SCI rows, or both (YANG `granularity`).
    pub granularity: Granularity,
    /// The identity the session authenticates the C-PS as: the TLS server name when one is
    /// configured (None: the url's host, which TLS verifies otherwise). A peer overload
    /// report is believed only with this SourceID (seed 003).
    pub source_id: Option<String>,
}

impl PeerSettings {
    /// The C-PS's expected SourceID: the configured TLS server name, else the url's host.
    pub fn source_id(&self) -> String {
        if let Some(s) = &self.source_id {
            return s.clone();
        }
        let rest = self.url.split_once("://").map_or(self.url.as_str(), |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if let Some(v6) = host.strip_prefix('[') {
            return v6.split(']').next().unwrap_or("").to_owned();
        }
        host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned()
    }
}

/// Who this C-SMA is, in every request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub csma_id: String,
    pub site_id: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionState {
    Connected,
    Backoff,
    #[default]
    Disconnected,
    Connecting,
}

impl SessionState {
    pub fn yang(self) -> &'static str {
        match self {
            SessionState::Connected => "connected",
            SessionState::Backoff => "backoff",
            SessionState::Disconnected => "disconnected",
            SessionState::Connecting => "connecting",
        }
    }
}

/// What the operational datastore shows of a session.
#[derive(Clone, Debug, Default)]
pub struct SessionStatus {
    pub state: SessionState,
    pub backoff_until: Option<Instant>,
    pub last_acked: Option<u64>,
    pub last_sent: Option<u64>,
    pub sent: u64,
    pub full_syncs: u64,
    pub failed: u64,
    pub rejected: u64,
    pub last_error: Option<String>,
    pub connected_since: Option<DateTime<Utc>>,
    /// Failed since it was last connected (what makes a primary "down" for the fallbacks).
    pub down: bool,
    /// Heartbeats sent as `POST /cats/keepalive` instead of the full set.
    pub keepalives_sent: u64,
    /// What the C-PS announced in its last successful reply.
    pub keepalive_supported: bool,
    pub entry_ttl: Option<Duration>,
    pub refresh_interval: Option<Duration>,
}

/// One peer: its settings, buffer and status, shared by the dispatcher (which fills the
/// buffer), the session task and the state provider.
pub struct Peer {
    pub settings: PeerSettings,
    pub queue: Mutex<Queue>,
    pub notify: Notify,
    pub status: Mutex<SessionStatus>,
    /// False while a fallback peer is on standby: it buffers nothing.
    pub accepting: AtomicBool,
    /// A gRPC peer's stream counters (set when its session starts).
    pub grpc: std::sync::OnceLock<Arc<grpc::Counters>>,
    /// Peer overload control (seed 003), the C-SMA as reacting node towards this C-PS.
    pub overload: Mutex<PeerOverload>,
    /// A fallback that is active only to take updates diverted from an overloaded primary
    /// (seed 003, section 3.1.2): it takes those, its own snapshots and the updates that are
    /// never abated, not every routine update.
    pub divert_only: AtomicBool,
}

impl Peer {
    pub fn new(settings: PeerSettings) -> Peer {
        let accepting = settings.role == Role::Primary;
        Peer {
            queue: Mutex::new(Queue::new(settings.buffer_size)),
            settings,
            notify: Notify::new(),
            status: Mutex::new(SessionStatus::default()),
            accepting: AtomicBool::new(accepting),
            grpc: std::sync::OnceLock::new(),
            overload: Mutex::new(PeerOverload::default()),
            divert_only: AtomicBool::new(false),
        }
    }

    pub fn allowed(&self, cs_id: &str) -> bool {
        self.settings.allowed.contains(cs_id)
    }

    /// The dispatcher's entry: queue `ad` if it is for this peer and has something it may
    /// see; true if queued. Never blocks on the network.
    pub fn offer(&self, ad: &Arc<Advertisement>) -> bool {
        self.offer_as(ad, false)
    }

    /// Queues an update diverted here from an overloaded peer (seed 003, section 3.1.2).
    pub fn offer_diverted(&self, ad: &Arc<Advertisement>) -> bool {
        self.offer_as(ad, true)
    }

    fn offer_as(&self, ad: &Arc<Advertisement>, diverted: bool) -> bool {
        if !ad.is_for(&self.settings.name) || !self.accepting.load(Ordering::Acquire) {
            return false;
        }
        if !diverted && self.divert_only.load(Ordering::Acquire) && abatable(ad) {
            return false;
        }
        if MetricReport::for_peer_at(ad, &|c| self.allowed(c), self.settings.granularity).is_none() {
            return false;
        }
        lock(&self.queue).push(ad.clone());
        self.notify.notify_one();
        true
    }

    pub fn state(&self) -> SessionState {
        lock(&self.status).state
    }
}

/// Whether an update may be abated towards an overloaded C-PS (seed 003 by way of seed 004's
/// trigger priorities): routine metric or policy changes addressed to every peer. Health
/// changes, failures, withdrawals, resyncs, discoveries, a snapshot addressed to one peer
/// and heartbeats never are (a heartbeat, or the keepalive made of it, is what keeps the
/// C-PS's entries from ageing out and lets it answer with the end of its overload).
pub fn abatable(ad: &Advertisement) -> bool {
    matches!(ad.audience, crate::engine::update::Audience::All) && ad.priority() == Priority::Routine
}

impl Peer {
    /// Whether [`Peer::offer`] would queue `ad` (the loss algorithm counts only updates the
    /// peer would otherwise get).
    pub fn would_take(&self, ad: &Advertisement) -> bool {
        ad.is_for(&self.settings.name)
            && self.accepting.load(Ordering::Acquire)
            && !(self.divert_only.load(Ordering::Acquire) && abatable(ad))
            && MetricReport::for_peer_at(ad, &|c| self.allowed(c), self.settings.granularity).is_some()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every peer, for the dispatcher, the fallback decision and the state provider.
pub struct Registry {
    pub peers: RwLock<BTreeMap<String, Arc<Peer>>>,
    pub identity: RwLock<Identity>,
    /// Bumped whenever a session changes state (fallbacks watch it).
    pub changed: watch::Sender<u64>,
    /// The site as last advertised (what a C-PS's query is answered from).
    pub current: Mutex<SiteView>,
    /// Overload control settings and notifications (seed 003).
    pub overload: Arc<Overload>,
}

/// Why a fallback peer is active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallbackMode {
    Standby,
    /// Every primary (and every fallback before it) is down: it takes everything.
    Failover,
    /// A primary is overloaded and this is the first fallback that is neither overloaded
    /// nor down: it takes what is diverted to it (seed 003, section 3.1.2).
    Divert,
}

impl Registry {
    pub fn new(identity: Identity) -> Arc<Registry> {
        Arc::new(Registry {
            peers: RwLock::new(BTreeMap::new()),
            identity: RwLock::new(identity),
            changed: watch::Sender::new(0),
            current: Mutex::new(SiteView::default()),
            overload: Overload::new(),
        })
    }

    pub fn peers(&self) -> Vec<Arc<Peer>> {
        self.peers.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    pub fn identity(&self) -> Identity {
        self.identity.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn bump(&self) {
        self.changed.send_modify(|g| *g += 1);
    }

    /// How the fallback peer `name` is to be used: for failover (see
    /// [`Registry::fallback_active`]), to take updates diverted from an overloaded primary,
    /// or not.
    pub fn fallback_mode(&self, name: &str) -> FallbackMode {
        if self.fallback_active(name) {
            return FallbackMode::Failover;
        }
        // Active while every fallback before it is overloaded or down, whether or not it is
        // down itself (a down one retries in backoff rather than flapping to standby).
        let now = Instant::now();
        let Some(candidates) = self.divert_candidates(now) else { return FallbackMode::Standby };
        for p in candidates {
            if p.settings.name == name {
                return FallbackMode::Divert;
            }
            if !lock(&p.status).down {
                break;
            }
        }
        FallbackMode::Standby
    }

    /// The fallbacks that are not overloaded, in (`priority`, `name`) order, while
    /// divert-before-throttle is on and some primary is overloaded.
    fn divert_candidates(&self, now: Instant) -> Option<Vec<Arc<Peer>>> {
        let cfg = self.overload.settings();
        if !cfg.reacting() || !cfg.divert {
            return None;
        }
        let peers = self.peers();
        let overloaded = |p: &Arc<Peer>| lock(&p.overload).overloaded(now);
        if !peers.iter().any(|p| p.settings.role == Role::Primary && overloaded(p)) {
            return None;
        }
        let mut fallbacks: Vec<Arc<Peer>> =
            peers.into_iter().filter(|p| p.settings.role == Role::Fallback && !overloaded(p)).collect();
        fallbacks.sort_by(|a, b| (a.settings.priority, &a.settings.name).cmp(&(b.settings.priority, &b.settings.name)));
        Some(fallbacks)
    }

    /// Where updates abated towards an overloaded primary go (seed 003, section 3.1.2): the
    /// first fallback in (`priority`, `name`) order that is neither overloaded nor down,
    /// while divert-before-throttle is on and some primary is overloaded. None: throttle.
    pub fn divert_target(&self, now: Instant) -> Option<Arc<Peer>> {
        self.divert_candidates(now)?.into_iter().find(|p| !lock(&p.status).down && p.accepting.load(Ordering::Acquire))
    }

    /// Whether the fallback peer `name` is to be used (seed 004: fall back to an
    /// alternative C-PS): every primary has failed since it was last connected (one still
    /// making first contact counts as usable; one retrying after a failure does not, so a
    /// flapping primary does not flap the fallback), and so has every fallback before it in
    /// (`priority`, `name`) order. With no primary configured the first fallback is used.
    pub fn fallback_active(&self, name: &str) -> bool {
        let peers = self.peers();
        let down = |p: &Arc<Peer>| lock(&p.status).down;
        let primaries_down = peers.iter().filter(|p| p.settings.role == Role::Primary).all(down);
        let Some(me) = peers.iter().find(|p| p.settings.name == name) else { return false };
        let key = |p: &Arc<Peer>| (p.settings.priority, p.settings.name.clone());
        let earlier_down = peers.iter().filter(|p| p.settings.role == Role::Fallback && key(p) < key(me)).all(down);
        primaries_down && earlier_down
    }
}

/// `(peer, interval)`: see [`Hooks::refresh_hint`].
pub type RefreshHintFn = dyn Fn(&str, Option<Duration>) + Send + Sync;

/// What a session tells the rest of the agent.
#[derive(Clone)]
pub struct Hooks {
    /// Ask the update controller for a full snapshot addressed to this peer.
    pub resync: Arc<dyn Fn(&str) + Send + Sync>,
    /// The peer became unreachable (once per outage): the `c-ps-unreachable` notification.
    pub unreachable: Arc<dyn Fn(&Unreachable) + Send + Sync>,
    /// The refresh interval the peer asks for (seed 004: the heartbeat MAY be adjusted to
    /// the C-PS's load): `UpdateEvent::RefreshHint`; `None` when the peer is removed or
    /// stops announcing one.
    pub refresh_hint: Arc<RefreshHintFn>,
    /// Whether any peer takes per-SCI rows: `UpdateEvent::SciDetail`.
    pub sci_detail: Arc<dyn Fn(bool) + Send + Sync>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreachable {
    pub c_ps: String,
    pub url: String,
    pub backoff: Duration,
    pub buffered: usize,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("{0}")]
    Transport(#[from] TransportError),
    #[error("C-PS refused {method} {path}: {status} {reason}")]
    Rejected { method: &'static str, path: String, status: u16, reason: String },
    #[error("C-PS failed {method} {path}: {status} {reason}")]
    Server { method: &'static str, path: String, status: u16, reason: String },
    #[error("C-PS reply to {0} is not understood: {1}")]
    BadReply(&'static str, String),
}

#[derive(Clone, Copy)]
enum Phase {
    Standby,
    Connecting,
    Connected,
    /// Waiting until then before the next attempt.
    Backoff(Instant),
}

/// How a session reaches its C-PS: REST requests, or the gRPC stream. The session logic
/// (buffer, backoff, fallback, reconciliation, full sync) is the same for both.
#[derive(Clone)]
pub enum Channel {
    Rest(Arc<dyn Transport>),
    Grpc(Arc<GrpcLink>),
}

impl<T: Transport> From<Arc<T>> for Channel {
    fn from(t: Arc<T>) -> Channel {
        Channel::Rest(t)
    }
}

impl From<Arc<dyn Transport>> for Channel {
    fn from(t: Arc<dyn Transport>) -> Channel {
        Channel::Rest(t)
    }
}

impl From<Arc<GrpcLink>> for Channel {
    fn from(l: Arc<GrpcLink>) -> Channel {
        Channel::Grpc(l)
    }
}

/// One session task.
pub struct Session {
    pub peer: Arc<Peer>,
    pub registry: Arc<Registry>,
    pub transport: Channel,
    pub hooks: Hooks,
    pub nonces: Arc<NonceSource>,
    /// The C-SMA's private key: every request carries a JWS under it (seed 004, Metric
    /// Integrity). None only in tests that drive a session by hand.
    pub signing: Option<Arc<SigningKey>>,
}

impl Session {
    /// Runs until `stop` turns true (or its sender is dropped).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let s = &self.peer.settings;
        let mut backoff = Backoff::new(s.backoff_initial, s.backoff_max);
        let mut phase = if s.role == Role::Fallback { Phase::Standby } else { Phase::Connecting };
        let mut first_contact = true;
        // Seed 004, Network Partition: "upon reconnection, the C-SMA performs a full sync".
        let mut failed_since_connect = false;
        // What the C-PS holds, as far as its acknowledgements tell (None: unknown).
        let mut view: Option<View> = None;
        let mut awaiting_full = false;
        let mut outage_reported = false;
        let mut changes = self.registry.changed.subscribe();
        let mut full_asked_at = Instant::now();
        if matches!(phase, Phase::Standby) {
            self.set_state(SessionState::Disconnected, None);
        }
        'run: loop {
            if *stop.borrow() {
                break;
            }
            if s.role == Role::Fallback {
                let mode = self.registry.fallback_mode(&s.name);
                let active = mode != FallbackMode::Standby;
                let was_divert_only = self.peer.divert_only.swap(mode == FallbackMode::Divert, Ordering::AcqRel);
                match (&phase, active) {
                    (Phase::Standby, true) => {
                        if mode == FallbackMode::Divert {
                            tracing::warn!(c_ps = %s.name, "a primary C-PS is overloaded: diverting to fallback C-PS");
                        } else {
                            tracing::warn!(c_ps = %s.name, "no primary C-PS reachable: using fallback C-PS");
                        }
                        self.peer.accepting.store(true, Ordering::Release);
                        first_contact = true;
                        phase = Phase::Connecting;
                    }
                    // Diverting, it took only a share of the routine updates; taking over
                    // for failed primaries it needs the complete set.
                    (Phase::Connected, true) if was_divert_only && mode == FallbackMode::Failover => {
                        tracing::warn!(c_ps = %s.name, "no primary C-PS reachable: fallback C-PS takes every update");
                        self.request_full(&mut awaiting_full, &mut view);
                        full_asked_at = Instant::now();
                    }
                    (Phase::Standby, false) => {}
                    (_, false) => {
                        tracing::info!(c_ps = %s.name, "a preferred C-PS is usable again: fallback C-PS on standby");
                        self.peer.accepting.store(false, Ordering::Release);
                        lock(&self.peer.queue).clear();
                        awaiting_full = false;
                        outage_reported = false;
                        backoff.reset();
                        // On standby it is not failing: the next fallback need not stand in.
                        lock(&self.peer.status).down = false;
                        // A fallback on standby keeps no stream open.
                        if let Channel::Grpc(link) = &self.transport {
                            link.close().await;
                        }
                        self.set_state(SessionState::Disconnected, None);
                        phase = Phase::Standby;
                    }
                    _ => {}
                }
            }
            match phase {
                Phase::Standby => {
                    tokio::select! {
                        _ = changes.changed() => {}
                        r = stop.changed() => { if r.is_err() { break 'run; } }
                    }
                }
                Phase::Connecting => {
                    self.set_state(SessionState::Connecting, None);
                    match self.reconcile().await {
                        Ok((need_full, full_arrived)) => {
                            let reconnected = std::mem::take(&mut failed_since_connect);
                            backoff.reset();
                            if full_arrived {
                                awaiting_full = false;
                            }
                            if outage_reported {
                                tracing::info!(c_ps = %s.name, "C-PS reachable again");
                            }
                            outage_reported = false;
                            {
                                let mut st = lock(&self.peer.status);
                                st.connected_since = Some(Utc::now());
                                st.last_error = None;
                                st.down = false;
                            }
                            self.set_state(SessionState::Connected, None);
                            if need_full || first_contact || reconnected {
                                if reconnected && !need_full && !first_contact {
                                    tracing::info!(c_ps = %s.name, "reconnected: full sync before any buffered update");
                                }
                                view = None;
                                self.request_full(&mut awaiting_full, &mut view);
                                full_asked_at = Instant::now();
                            }
                            first_contact = false;
                            phase = Phase::Connected;
                        }
                        Err(e) => {
                            failed_since_connect = true;
                            view = None;
                            phase = self.failed(e, &mut backoff, &mut outage_reported)
                        }
                    }
                }
                Phase::Connected => {
                    if let Channel::Grpc(link) = &self.transport {
                        // What the stream's reader noticed: the stream ended, or the C-PS
                        // asked for the complete set.
                        if let Some(e) = link.broken() {
                            failed_since_connect = true;
                            view = None;
                            phase = self.failed(
                                DeliveryError::Transport(TransportError::Grpc(e)),
                                &mut backoff,
                                &mut outage_reported,
                            );
                            continue;
                        }
                        if link.take_full_sync() {
                            self.request_full(&mut awaiting_full, &mut view);
                            full_asked_at = Instant::now();
                        }
                    }
                    let batch = {
                        let q = lock(&self.peer.queue);
                        if awaiting_full && !q.front_is_full() {
                            Vec::new()
                        } else {
                            q.peek_batch(s.batch_size)
                        }
                    };
                    if batch.is_empty() {
                        let retry_full = async {
                            if awaiting_full {
                                tokio::time::sleep_until(full_asked_at + FULL_SYNC_RETRY).await
                            } else {
                                std::future::pending().await
                            }
                        };
                        tokio::select! {
                            _ = self.peer.notify.notified() => {}
                            _ = changes.changed() => {}
                            r = stop.changed() => { if r.is_err() { break 'run; } }
                            _ = retry_full => {
                                self.request_full(&mut awaiting_full, &mut view);
                                full_asked_at = Instant::now();
                            }
                        }
                        continue;
                    }
                    match self.deliver(&batch, &mut view).await {
                        Ok((ack, keepalive)) => {
                            self.hints(ack.keepalive, ack.entry_ttl, ack.refresh_interval);
                            let last = batch.last().map(|a| a.seq).unwrap_or(0);
                            let was_full = batch[0].kind == AdvertisementKind::Full;
                            {
                                let mut q = lock(&self.peer.queue);
                                q.delivered(last);
                                if was_full {
                                    q.gap = false;
                                }
                            }
                            if was_full {
                                awaiting_full = false;
                            }
                            {
                                let mut st = lock(&self.peer.status);
                                if keepalive {
                                    st.keepalives_sent += 1;
                                } else {
                                    st.sent += batch.len() as u64;
                                }
                                st.last_sent = Some(last);
                                if ack.acked_sequence > 0 {
                                    st.last_acked = Some(ack.acked_sequence);
                                }
                            }
                            // The C-PS skipped reports, or wants a full sync: what it holds
                            // is not what the acknowledgements tell.
                            if ack.full_sync_requested || ack.stale > 0 {
                                view = None;
                            }
                            if ack.full_sync_requested {
                                tracing::info!(c_ps = %s.name, "C-PS asked for a full sync");
                                self.request_full(&mut awaiting_full, &mut view);
                                full_asked_at = Instant::now();
                            }
                        }
                        Err(e) => {
                            failed_since_connect = true;
                            view = None;
                            phase = self.failed(e, &mut backoff, &mut outage_reported)
                        }
                    }
                }
                Phase::Backoff(until) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => phase = Phase::Connecting,
                        r = stop.changed() => { if r.is_err() { break 'run; } }
                        // A fallback may have to go to standby meanwhile.
                        _ = changes.changed(), if s.role == Role::Fallback => {}
                    }
                }
            }
        }
        if let Channel::Grpc(link) = &self.transport {
            link.close().await;
        }
        self.set_state(SessionState::Disconnected, None);
    }

    fn set_state(&self, state: SessionState, backoff_until: Option<Instant>) {
        let changed = {
            let mut st = lock(&self.peer.status);
            let changed = st.state != state;
            st.state = state;
            st.backoff_until = backoff_until;
            changed
        };
        if changed {
            self.registry.bump();
        }
    }

    /// Asks the update controller for a full snapshot for this peer. The view becomes
    /// unknown: the snapshot must go as the full set, never as a keepalive.
    fn request_full(&self, awaiting_full: &mut bool, view: &mut Option<View>) {
        *awaiting_full = true;
        *view = None;
        lock(&self.peer.status).full_syncs += 1;
        (self.hooks.resync)(&self.peer.settings.name);
    }

    fn failed(&self, e: DeliveryError, backoff: &mut Backoff, outage_reported: &mut bool) -> Phase {
        let d = backoff.fail();
        let buffered = lock(&self.peer.queue).len();
        {
            let mut st = lock(&self.peer.status);
            st.failed += 1;
            if matches!(e, DeliveryError::Rejected { .. }) {
                st.rejected += 1;
            }
            st.last_error = Some(e.to_string());
            st.connected_since = None;
            st.down = true;
        }
        let s = &self.peer.settings;
        tracing::warn!(c_ps = %s.name, url = %s.url, error = %e, retry_in_ms = d.as_millis() as u64, buffered,
            "C-PS unreachable; buffering updates");
        if !*outage_reported {
            *outage_reported = true;
            (self.hooks.unreachable)(&Unreachable {
                c_ps: s.name.clone(),
                url: s.url.clone(),
                backoff: d,
                buffered,
                error: e.to_string(),
            });
        }
        let until = Instant::now() + d;
        self.set_state(SessionState::Backoff, Some(until));
        Phase::Backoff(until)
    }

    /// GET the C-PS's view of this site: whether a full snapshot is needed, and whether one
    /// already arrived (its reply was lost).
    async fn reconcile(&self) -> Result<(bool, bool), DeliveryError> {
        if let Channel::Grpc(link) = &self.transport {
            // Opening the stream is the reconciliation: Hello, and the C-PS's Welcome says
            // what it holds.
            let w = link.open(self.stream_context()).await?;
            self.hints(w.keepalive, w.entry_ttl, w.refresh_interval);
            if w.acked_sequence == 0 {
                tracing::info!(c_ps = %self.peer.settings.name, "C-PS holds nothing for this site: full snapshot");
            }
            let (gap, full_arrived) = {
                let mut q = lock(&self.peer.queue);
                let full = q.already_acked(w.acked_sequence);
                (q.gap, full)
            };
            lock(&self.peer.status).last_acked = Some(w.acked_sequence);
            return Ok((w.acked_sequence == 0 || w.full_sync_requested || gap, full_arrived));
        }
        let path = METRICS_PATH.to_owned();
        let resp = self.request("GET", path.clone(), Vec::new(), None).await?;
        if resp.status == 404 {
            tracing::info!(c_ps = %self.peer.settings.name, "C-PS holds nothing for this site: full snapshot");
            return Ok((true, false));
        }
        check_status("GET", &path, &resp)?;
        let state: SiteState = self.decode_reply("GET", ROOT_SITE, &resp)?;
        self.hints(state.keepalive, state.entry_ttl, state.refresh_interval);
        let (gap, full_arrived) = {
            let mut q = lock(&self.peer.queue);
            let full = q.already_acked(state.acked_sequence);
            (q.gap, full)
        };
        lock(&self.peer.status).last_acked = Some(state.acked_sequence);
        Ok((state.full_sync_requested || gap, full_arrived))
    }

    fn signer(&self) -> grpc::Signer {
        grpc::Signer {
            nonces: self.nonces.clone(),
            signing: self.signing.clone(),
            psk: self.peer.settings.psk.clone(),
            csma_id: self.registry.identity().csma_id,
        }
    }

    fn stream_context(&self) -> grpc::StreamContext {
        grpc::StreamContext { peer: self.peer.clone(), registry: self.registry.clone(), signer: self.signer() }
    }

    /// The gRPC form of [`Session::deliver`]: a keepalive, or the reports (with their SCI
    /// rows inside) in one Advertisement, each answered by an Ack or a Refusal.
    async fn deliver_grpc(
        &self,
        link: &GrpcLink,
        reports: &[(MetricReport, Vec<SciRow>)],
        keepalive: Option<u64>,
        view: &mut Option<View>,
    ) -> Result<(Ack, bool), DeliveryError> {
        use grpc::pb::csma_body::Kind;
        let signer = self.signer();
        if let Some(sequence) = keepalive {
            match link.exchange(&signer, "Keepalive", Kind::Keepalive(grpc::pb::Keepalive { sequence })).await {
                Ok(ack) => return Ok((ack, true)),
                Err(DeliveryError::Rejected { status: 404 | 409, reason, .. }) => {
                    tracing::info!(c_ps = %self.peer.settings.name, %reason, "keepalive refused; sending the full set");
                }
                Err(e) => return Err(e),
            }
        }
        if reports.is_empty() {
            return Ok((Ack::default(), false));
        }
        let id = self.registry.identity();
        let ad = grpc::pb::Advertisement {
            csma_id: id.csma_id,
            site_id: id.site_id,
            reports: reports.iter().map(|(r, rows)| grpc::wire::report(r, rows)).collect(),
        };
        let ack = link.exchange(&signer, "Advertisement", Kind::Advertisement(ad)).await?;
        for (r, rows) in reports {
            View::apply(view, r, rows);
        }
        Ok((ack, false))
    }

    /// Takes what a C-PS announced in a successful reply: keepalive support, entry TTL and
    /// the refresh interval it wants (bounded: an absurd value is logged and ignored). A
    /// change of the refresh interval goes to the update controller.
    fn hints(&self, keepalive: bool, entry_ttl: Option<u32>, refresh: Option<u32>) {
        let name = &self.peer.settings.name;
        let take = |what: &str, v: Option<u32>| {
            bounded_hint(v).unwrap_or_else(|e| {
                tracing::warn!(c_ps = %name, "C-PS announced an unusable {what} ({e}); ignored");
                None
            })
        };
        let ttl = take("entry-ttl", entry_ttl);
        let refresh = take("refresh-interval", refresh);
        let changed = {
            let mut st = lock(&self.peer.status);
            st.keepalive_supported = keepalive;
            st.entry_ttl = ttl;
            let changed = st.refresh_interval != refresh;
            st.refresh_interval = refresh;
            changed
        };
        if changed {
            // Only while the registry holds this very peer, and under its lock: `stop_peer`
            // removes the peer (write lock) before it withdraws the hint, so a session it is
            // stopping cannot put a hint back after that (the abort is not immediate).
            let peers = self.registry.peers.read().unwrap_or_else(|e| e.into_inner());
            if peers.get(name).is_some_and(|p| Arc::ptr_eq(p, &self.peer)) {
                (self.hooks.refresh_hint)(name, refresh);
            }
        }
    }

    fn decode_reply<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        root: &str,
        resp: &Response,
    ) -> Result<T, DeliveryError> {
        reply_encoding(resp, self.peer.settings.encoding)
            .decode(root, &resp.body)
            .map_err(|e| DeliveryError::BadReply(method, e))
    }

    /// Sends one batch: per report the SCI withdrawals (DELETE) and, with granularity
    /// `sci`/`both`, the SCI rows (PUT /cats/metrics/{csci-id}), then the reports in one
    /// POST (a full one alone). A heartbeat whose content is what the C-PS already holds
    /// goes as a keepalive when the C-PS offers it (seed 004, Periodic Synchronization);
    /// true in the result then.
    async fn deliver(
        &self,
        batch: &[Arc<Advertisement>],
        view: &mut Option<View>,
    ) -> Result<(Ack, bool), DeliveryError> {
        let id = self.registry.identity();
        let s = &self.peer.settings;
        let allowed = |c: &str| self.peer.allowed(c);
        let g = s.granularity;
        let reports: Vec<(MetricReport, Vec<SciRow>)> = batch
            .iter()
            .filter_map(|a| {
                let rows = if g.sci() { sci_rows(a, &allowed) } else { Vec::new() };
                MetricReport::for_peer_at(a, &allowed, g).map(|r| {
                    // Never a PUT of a row the same report withdraws (DELETE).
                    let rows = rows.into_iter().filter(|row| !r.sci_withdrawn.contains(&row.csci_id)).collect();
                    (r, rows)
                })
            })
            .collect();
        if let ([(r, rows)], [ad]) = (reports.as_slice(), batch) {
            let (supported, last_acked) = {
                let st = lock(&self.peer.status);
                (st.keepalive_supported, st.last_acked)
            };
            let unchanged = view.as_ref().is_some_and(|v| v.same_as(r, rows));
            if let (true, true, Some(acked), Trigger::Heartbeat) = (supported, unchanged, last_acked, ad.trigger) {
                if let Channel::Grpc(link) = &self.transport {
                    return self.deliver_grpc(link, &reports, Some(acked), view).await;
                }
                let k = Keepalive { csma_id: id.csma_id.clone(), site_id: id.site_id.clone(), sequence: acked };
                let body = s.encoding.encode(ROOT_KEEPALIVE, &k).map_err(|e| DeliveryError::BadReply("POST", e))?;
                let resp = self.request("POST", KEEPALIVE_PATH.to_owned(), body, None).await?;
                match check_status("POST", KEEPALIVE_PATH, &resp) {
                    Ok(()) => return Ok((self.decode_reply("POST", ROOT_ACK, &resp)?, true)),
                    // The C-PS lost the site (aged out, restarted) or missed something: the
                    // full set goes instead.
                    Err(DeliveryError::Rejected { status: 404 | 409, reason, .. }) => {
                        tracing::info!(c_ps = %s.name, %reason, "keepalive refused; sending the full set");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if let Channel::Grpc(link) = &self.transport {
            return self.deliver_grpc(link, &reports, None, view).await;
        }
        for (r, rows) in &reports {
            for csci in &r.sci_withdrawn {
                let path = format!("{METRICS_PATH}/{}", encode_segment(csci));
                let resp = self.request("DELETE", path.clone(), Vec::new(), Some(r.sequence)).await?;
                // 404: the C-PS did not know the SCI; the withdrawal holds either way.
                if resp.status != 404 {
                    check_status("DELETE", &path, &resp)?;
                }
            }
            for row in rows {
                let path = format!("{METRICS_PATH}/{}", encode_segment(&row.csci_id));
                let u = SciUpdate {
                    csma_id: id.csma_id.clone(),
                    site_id: id.site_id.clone(),
                    sequence: r.sequence,
                    sci: row.clone(),
                };
                let body = s.encoding.encode(ROOT_SCI, &u).map_err(|e| DeliveryError::BadReply("PUT", e))?;
                let resp = self.request("PUT", path.clone(), body, None).await?;
                check_status("PUT", &path, &resp)?;
            }
        }
        if reports.is_empty() {
            return Ok((Ack::default(), false));
        }
        let b = MetricBatch {
            csma_id: id.csma_id.clone(),
            site_id: id.site_id.clone(),
            reports: reports.iter().map(|(r, _)| r.clone()).collect(),
        };
        let body = s.encoding.encode(ROOT_BATCH, &b).map_err(|e| DeliveryError::BadReply("POST", e))?;
        let resp = self.request("POST", METRICS_PATH.to_owned(), body, None).await?;
        check_status("POST", METRICS_PATH, &resp)?;
        let ack: Ack = self.decode_reply("POST", ROOT_ACK, &resp)?;
        for (r, rows) in &reports {
            View::apply(view, r, rows);
        }
        Ok((ack, false))
    }

    async fn request(
        &self,
        method: &'static str,
        path: String,
        body: Vec<u8>,
        sequence: Option<u64>,
    ) -> Result<Response, DeliveryError> {
        let s = &self.peer.settings;
        let id = self.registry.identity();
        let mut headers = vec![
            (H_CSMA_ID, id.csma_id.clone()),
            (H_SITE_ID, id.site_id.clone()),
            ("accept", s.encoding.content_type().into()),
        ];
        let body = if !body.is_empty() {
            headers.push(("content-type", s.encoding.content_type().into()));
            if s.gzip {
                headers.push(("content-encoding", "gzip".into()));
                wire::gzip(&body)
            } else {
                body
            }
        } else {
            body
        };
        if let Some(seq) = sequence {
            headers.push((H_SEQUENCE, seq.to_string()));
        }
        // One timestamp and nonce per request, covered by the PSK MAC and the JWS alike.
        let ts = Utc::now().timestamp_millis();
        let nonce = self.nonces.next();
        if s.psk.is_some() || self.signing.is_some() {
            headers.push((H_TIMESTAMP, ts.to_string()));
            headers.push((H_NONCE, nonce.to_string()));
        }
        if let Some(psk) = &s.psk {
            let signed = Signed { method, path: &path, csma_id: &id.csma_id, timestamp_ms: ts, nonce };
            headers.push((H_KEY_ID, psk.key_id.clone()));
            headers.push((H_SIGNATURE, sign(&psk.secret, &signed, &body)));
        }
        if let Some(a) = super::overload::announcement(&self.registry) {
            headers.push((H_OC_SUPPORTED, a.to_string()));
        }
        if let Some(key) = &self.signing {
            let binding = RequestBinding {
                method: method.into(),
                path: path.clone(),
                csma_id: id.csma_id.clone(),
                timestamp: ts,
                nonce,
            };
            headers.push((H_JWS, key.sign(&binding, &body)));
        }
        let path_for_errors = path.clone();
        let Channel::Rest(transport) = &self.transport else {
            return Err(DeliveryError::BadReply(method, "a gRPC peer makes no REST request".into()));
        };
        let resp = transport.send(Request { method, path, headers, body }).await?;
        let oc = ReplyOc { supported: resp.header(H_OC_SUPPORTED), olr: resp.header(H_OC_OLR) };
        if let Some(psk) = &s.psk {
            // Seed 004, C-PS Authentication: in PSK mode the C-PS proves its replies too. A
            // reply that does not verify is a failed request: nothing in it (acknowledged
            // sequence, full-sync request, the site's state) is believed.
            if let Err(e) = verify_reply(
                &psk.secret,
                resp.status,
                &id.csma_id,
                nonce,
                resp.header(H_REPLY_SIGNATURE),
                &oc,
                &resp.body,
            ) {
                // A C-PS cannot sign its refusal of a request it could not authenticate (a
                // wrong key): an error reply is reported with its unverified reason, as a
                // refusal; a success reply that does not verify is an impostor's.
                let unverified = |reason: String| format!("{reason} (reply not authenticated: {e})");
                return Err(match check_status(method, &path_for_errors, &resp) {
                    Err(DeliveryError::Rejected { method, path, status, reason }) => {
                        DeliveryError::Rejected { method, path, status, reason: unverified(reason) }
                    }
                    Err(DeliveryError::Server { method, path, status, reason }) => {
                        DeliveryError::Server { method, path, status, reason: unverified(reason) }
                    }
                    _ => DeliveryError::BadReply(
                        method,
                        format!("reply (status {}) not authenticated: {e}", resp.status),
                    ),
                });
            }
        }
        // Seed 003: the C-PS's answer to our announcement and its overload report, from a
        // reply that authenticated (TLS, and the reply signature in PSK mode).
        super::overload::take(&self.peer, &self.registry, oc.supported.map(Supported::decode), oc.olr.map(Olr::decode));
        Ok(resp)
    }
}

/// What the C-PS holds for this C-SMA as its acknowledgements tell: the service rows and
/// the SCI rows. A heartbeat equal to it can go as a keepalive.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    services: BTreeMap<String, ServiceMetrics>,
    scis: BTreeMap<String, SciRow>,
}

impl View {
    /// Folds an acknowledged report in: a full one replaces the view, a delta changes it.
    fn apply(view: &mut Option<View>, r: &MetricReport, rows: &[SciRow]) {
        if r.kind == ReportKind::Full {
            *view = Some(View::default());
        }
        // Deltas on an unknown view leave it unknown.
        let Some(v) = view else { return };
        for x in &r.services {
            v.services.insert(x.cs_id.clone(), x.clone());
        }
        for w in &r.withdrawn {
            v.services.remove(w);
            v.scis.retain(|_, row| &row.cs_id != w);
        }
        for c in &r.sci_withdrawn {
            v.scis.remove(c);
        }
        for row in rows {
            v.scis.insert(row.csci_id.clone(), row.clone());
        }
    }

    /// Whether full report `r` (with its rows) says exactly what the view holds.
    fn same_as(&self, r: &MetricReport, rows: &[SciRow]) -> bool {
        let mut v = Some(View::default());
        View::apply(&mut v, r, rows);
        r.kind == ReportKind::Full && r.sci_withdrawn.is_empty() && v.as_ref() == Some(self)
    }
}

/// The encoding of a reply: its Content-Type when it names one of the three, else the
/// peer's.
fn reply_encoding(resp: &Response, peer: Encoding) -> Encoding {
    resp.header("content-type").and_then(Encoding::from_media_type).unwrap_or(peer)
}

fn check_status(method: &'static str, path: &str, resp: &Response) -> Result<(), DeliveryError> {
    if (200..300).contains(&resp.status) {
        return Ok(());
    }
    // The C-PS's text: escaped and bounded before it is logged or kept as last-error.
    let reason = reply_encoding(resp, Encoding::Json)
        .decode::<ErrorBody>(ROOT_ERROR, &resp.body)
        .map(|e| if e.detail.is_empty() { e.error } else { format!("{}: {}", e.error, e.detail) })
        .unwrap_or_else(|_| String::from_utf8_lossy(&resp.body).into_owned());
    let reason = crate::text::printable(&reason, 200);
    let path = path.to_owned();
    Err(if (400..500).contains(&resp.status) {
        DeliveryError::Rejected { method, path, status: resp.status, reason }
    } else {
        DeliveryError::Server { method, path, status: resp.status, reason }
    })
}

/// Percent-encodes a path segment (CSCI-IDs contain ':' and may contain '/').
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_segment`]; `None` on a malformed escape or non-UTF-8.
pub fn decode_segment(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Settings of a test peer (also the gRPC link's unit tests).
    pub(crate) fn settings(name: &str, role: Role, priority: u16) -> PeerSettings {
        PeerSettings {
            name: name.into(),
            url: "http://127.0.0.1:1".into(),
            role,
            priority,
            allowed: Default::default(),
            psk: None,
            gzip: false,
            buffer_size: 1,
            batch_size: 1,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            encoding: Encoding::Json,
            granularity: Granularity::Site,
            source_id: None,
        }
    }

    fn peer(name: &str, role: Role, priority: u16, down: bool) -> Arc<Peer> {
        let p = Peer::new(settings(name, role, priority));
        lock(&p.status).down = down;
        Arc::new(p)
    }

    fn registry(peers: Vec<Arc<Peer>>) -> Arc<Registry> {
        let r = Registry::new(Identity { csma_id: "c".into(), site_id: "s".into() });
        for p in peers {
            r.peers.write().unwrap().insert(p.settings.name.clone(), p);
        }
        r
    }

    fn report(kind: ReportKind, services: &[(&str, u32)], withdrawn: &[&str]) -> MetricReport {
        MetricReport {
            sequence: 1,
            kind,
            trigger: "heartbeat".into(),
            generated_at: Utc::now(),
            services: services
                .iter()
                .map(|(c, g)| ServiceMetrics {
                    cs_id: (*c).into(),
                    gas: *g,
                    computing_time: 1,
                    health: crate::engine::model::Health::Healthy,
                    cost: Some(3),
                    reputation: Some(4),
                    security_label: None,
                    sci_count: 1,
                })
                .collect(),
            withdrawn: withdrawn.iter().map(|w| (*w).into()).collect(),
            sci_withdrawn: vec![],
        }
    }

    // Seed 004, Periodic Synchronization: the heartbeat MAY be adjusted to the C-PS's load
    // (its refresh hint). A session that `stop_peer` is stopping (the abort is not at once)
    // may still be taking a reply's hints: once its peer has left the registry, no hint
    // reaches the controller, so the heartbeat does not stay adapted to a gone peer.
    #[tokio::test]
    async fn seed004_periodic_sync_a_removed_peers_session_passes_no_refresh_hint_on() {
        let p = peer("cps1", Role::Primary, 1, false);
        let r = registry(vec![p.clone()]);
        type Hints = Mutex<Vec<(String, Option<Duration>)>>;
        let seen: Arc<Hints> = Default::default();
        let hints = seen.clone();
        let session = Session {
            peer: p,
            registry: r.clone(),
            transport: Channel::Rest(Arc::new(
                crate::cps::transport::HttpTransport::new(
                    crate::cps::transport::Endpoint::parse("http://127.0.0.1:1").unwrap(),
                    None,
                    Duration::from_secs(1),
                )
                .unwrap(),
            )),
            hooks: Hooks {
                resync: Arc::new(|_: &str| {}),
                unreachable: Arc::new(|_: &Unreachable| {}),
                refresh_hint: Arc::new(move |n: &str, d| hints.lock().unwrap().push((n.to_owned(), d))),
                sci_detail: Arc::new(|_| {}),
            },
            nonces: Arc::new(NonceSource::new()),
            signing: None,
        };
        session.hints(true, None, Some(30));
        assert_eq!(*seen.lock().unwrap(), [("cps1".to_string(), Some(Duration::from_secs(30)))]);
        // Removed (what `stop_peer` does before it withdraws the hint), then a late reply.
        r.peers.write().unwrap().remove("cps1");
        session.hints(true, None, Some(20));
        // Replaced by a new peer of the same name: still not this session's to tell.
        r.peers.write().unwrap().insert("cps1".into(), peer("cps1", Role::Primary, 1, false));
        session.hints(true, None, Some(10));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
    }

    #[test]
    fn seed004_periodic_sync_the_view_is_what_was_acknowledged_and_only_an_equal_heartbeat_is_a_keepalive() {
        use ReportKind::{Delta, Full};
        let mut v = None;
        View::apply(&mut v, &report(Delta, &[("AR1", 1)], &[]), &[]);
        assert!(v.is_none(), "a delta on an unknown view leaves it unknown");
        View::apply(&mut v, &report(Full, &[("AR1", 1), ("AR2", 2)], &[]), &[]);
        View::apply(&mut v, &report(Delta, &[("AR1", 5)], &["AR2"]), &[]);
        let view = v.clone().unwrap();
        assert!(view.same_as(&report(Full, &[("AR1", 5)], &["AR2"]), &[]));
        assert!(!view.same_as(&report(Full, &[("AR1", 6)], &[]), &[]), "a changed value");
        assert!(!view.same_as(&report(Full, &[("AR1", 5), ("AR3", 1)], &[]), &[]), "a new service");
        assert!(!view.same_as(&report(Delta, &[("AR1", 5)], &[]), &[]), "only a full set");
        let mut cost = report(Full, &[("AR1", 5)], &[]);
        cost.services[0].cost = Some(4);
        assert!(!view.same_as(&cost, &[]), "cost counts too");
    }

    #[test]
    fn fallbacks_are_used_in_priority_order_once_every_primary_is_down() {
        // seed 004, C-PS Failure Handling: fall back to an alternative C-PS.
        let r = registry(vec![
            peer("p1", Role::Primary, 100, false),
            peer("p2", Role::Primary, 100, true),
            peer("f1", Role::Fallback, 10, false),
            peer("f2", Role::Fallback, 20, false),
        ]);
        assert!(!r.fallback_active("f1"), "a primary is usable");
        let by = |n: &str| r.peers().into_iter().find(|p| p.settings.name == n).unwrap();
        lock(&by("p1").status).down = true;
        assert!(r.fallback_active("f1"));
        assert!(!r.fallback_active("f2"), "f1 comes first and is usable");
        lock(&by("f1").status).down = true;
        assert!(r.fallback_active("f2"));
        assert!(r.fallback_active("f1"), "a failed fallback keeps retrying");
        let none = registry(vec![peer("f", Role::Fallback, 1, false)]);
        assert!(none.fallback_active("f"), "no primary: the fallback is used");
        assert!(!none.fallback_active("unknown"));
    }
}

//! What an unauthenticated peer may cost (DESIGN decision 7, issue 11 class 5), shared by
//! every listener: the SSH (NETCONF) and HTTPS (RESTCONF) management listeners and the SCI
//! HTTP and gRPC collectors.
//!
//! - [`Gate`]: one per listener. A connection is *pending* from accept until it has
//!   authenticated (SSH user authentication, a RESTCONF request with valid credentials, an
//!   SCI report that was accepted). Pending connections are capped per listener and per
//!   source address, all connections per source address; a connection over a cap is closed
//!   at once. A pending connection that has not authenticated within `auth_timeout_secs` is
//!   closed; the handshake (SSH version exchange, TLS) has its own shorter deadline. The
//!   HTTP header and body deadlines are applied by the HTTP listeners with the same
//!   [`ListenerLimits`].
//! - [`PasswordPool`]: argon2 runs on a fixed number of worker threads fed by a bounded
//!   queue, shared by SSH and RESTCONF, so memory is bounded by workers x argon2 memory
//!   cost. A check that finds the queue (or the source's share of it) full fails at once as
//!   a failed login, without hashing. An unknown user's password is checked against a dummy
//!   hash with the same parameters as the configured ones, so both take the same path.
//! - [`Backoff`]: a bounded table of sources that keep failing; past a number of failures a
//!   source's password attempts are refused (without hashing) for an exponentially growing
//!   time.
//! - [`Counters`]: atomics for all of the above, in the operational state
//!   (`/cats-sma:cats-sma/listener-limits`, [`LimitsState`]), the log and the audit trail.
//!
//! IPv6 sources are grouped by /64 (one host usually owns a whole /64), IPv4 by address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tracing::{info, warn};

use crate::mgmt::audit::{self, Category};
use crate::mgmt::users::UserStore;

// ----- configuration ---------------------------------------------------------------------

/// `[limits.ssh]`, `[limits.restconf]`, `[limits.sci_http]`, `[limits.sci_grpc]` in the
/// bootstrap file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerLimits {
    /// Seconds for the handshake: the SSH version exchange, the TLS handshake.
    pub handshake_timeout_secs: u64,
    /// Seconds from accept until the connection has authenticated (SSH: key exchange and
    /// user authentication; HTTP: the first request with valid credentials / accepted
    /// report). Closed otherwise.
    pub auth_timeout_secs: u64,
    /// Seconds to receive a request's header (HTTP); also how long an idle keep-alive
    /// connection is kept.
    pub header_read_timeout_secs: u64,
    /// Seconds to receive a request's body (HTTP).
    pub body_read_timeout_secs: u64,
    /// Connections not yet authenticated, on this listener.
    pub max_pending: usize,
    /// Connections not yet authenticated, per source address.
    pub max_pending_per_source: usize,
    /// All connections (authenticated or not) per source address.
    pub max_connections_per_source: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            handshake_timeout_secs: 10,
            auth_timeout_secs: 30,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            max_pending: 256,
            max_pending_per_source: 128,
            max_connections_per_source: 256,
        }
    }
}

impl ListenerLimits {
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.handshake_timeout_secs)
    }
    pub fn auth_timeout(&self) -> Duration {
        Duration::from_secs(self.auth_timeout_secs)
    }
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_secs(self.header_read_timeout_secs)
    }
    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_secs(self.body_read_timeout_secs)
    }

    fn check(&self, table: &str) -> Result<(), String> {
        for (k, v) in [
            ("handshake_timeout_secs", self.handshake_timeout_secs),
            ("auth_timeout_secs", self.auth_timeout_secs),
            ("header_read_timeout_secs", self.header_read_timeout_secs),
            ("body_read_timeout_secs", self.body_read_timeout_secs),
            ("max_pending", self.max_pending as u64),
            ("max_pending_per_source", self.max_pending_per_source as u64),
            ("max_connections_per_source", self.max_connections_per_source as u64),
        ] {
            if v == 0 {
                return Err(format!("{table}.{k} must be at least 1"));
            }
        }
        Ok(())
    }
}

/// The `[limits]` table of the bootstrap file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSettings {
    pub ssh: ListenerLimits,
    pub restconf: ListenerLimits,
    pub sci_http: ListenerLimits,
    /// The SCI gRPC collector (`[limits.sci_grpc]`); its HTTP/2 has no header or body
    /// deadline of its own: the authentication deadline bounds a pending connection.
    pub sci_grpc: ListenerLimits,
    /// NETCONF over TLS (RFC 7589): its listener and TLS Call Home (`[limits.netconf_tls]`).
    pub netconf_tls: ListenerLimits,
    /// Threads that run argon2 (each holds one argon2 memory block while it works).
    pub password_workers: usize,
    /// Password checks waiting for a worker; over it a login fails at once.
    pub password_queue: usize,
    /// Password checks one source may have queued or running.
    pub password_checks_per_source: usize,
    /// Failed logins from one source before it is backed off.
    pub backoff_after_failures: u32,
    /// The first back-off; it doubles with every further failure.
    pub backoff_initial_ms: u64,
    /// The longest back-off; a source quiet for twice this long is forgotten.
    pub backoff_max_secs: u64,
    /// Sources remembered by the back-off table (the oldest forgotten first when full).
    pub backoff_sources: usize,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        LimitsSettings {
            ssh: ListenerLimits::default(),
            restconf: ListenerLimits::default(),
            sci_http: ListenerLimits::default(),
            sci_grpc: ListenerLimits::default(),
            netconf_tls: ListenerLimits::default(),
            password_workers: 2,
            password_queue: 256,
            password_checks_per_source: 128,
            backoff_after_failures: 10,
            backoff_initial_ms: 1000,
            backoff_max_secs: 60,
            backoff_sources: 4096,
        }
    }
}

impl LimitsSettings {
    /// Semantic checks beyond the TOML schema.
    pub fn check(&self) -> Result<(), String> {
        self.ssh.check("limits.ssh")?;
        self.restconf.check("limits.restconf")?;
        self.sci_http.check("limits.sci_http")?;
        self.sci_grpc.check("limits.sci_grpc")?;
        self.netconf_tls.check("limits.netconf_tls")?;
        for (k, v) in [
            ("password_workers", self.password_workers as u64),
            ("password_queue", self.password_queue as u64),
            ("password_checks_per_source", self.password_checks_per_source as u64),
            ("backoff_after_failures", u64::from(self.backoff_after_failures)),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("backoff_max_secs", self.backoff_max_secs),
            ("backoff_sources", self.backoff_sources as u64),
        ] {
            if v == 0 {
                return Err(format!("limits.{k} must be at least 1"));
            }
        }
        if self.password_workers > 64 {
            return Err("limits.password_workers must be at most 64".into());
        }
        Ok(())
    }
}

// ----- counters ----------------------------------------------------------------------------

/// What one listener refused or cut off, and what it let through.
#[derive(Debug, Default)]
pub struct ListenerCounters {
    pub accepted: AtomicU64,
    /// Authenticated (pending → established).
    pub established: AtomicU64,
    /// Refused at accept: the listener's pending cap was full.
    pub refused_pending: AtomicU64,
    /// Refused at accept: the source's pending cap was full.
    pub refused_source_pending: AtomicU64,
    /// Refused at accept: the source's connection cap was full.
    pub refused_source_connections: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub auth_timeouts: AtomicU64,
    /// HTTP header not received in time (or idle keep-alive ended).
    pub header_timeouts: AtomicU64,
    pub body_timeouts: AtomicU64,
}

impl ListenerCounters {
    pub fn refused(&self) -> u64 {
        self.refused_pending.load(Ordering::Relaxed)
            + self.refused_source_pending.load(Ordering::Relaxed)
            + self.refused_source_connections.load(Ordering::Relaxed)
    }
}

/// The password-check pool and the back-off table.
#[derive(Debug, Default)]
pub struct PasswordCounters {
    /// argon2 verifications run (known and unknown users alike).
    pub hashes: AtomicU64,
    /// Of those, against the dummy hash (unknown user or user without password).
    pub dummy_hashes: AtomicU64,
    pub successes: AtomicU64,
    pub failures: AtomicU64,
    /// Failed at once: the queue was full.
    pub queue_full: AtomicU64,
    /// Failed at once: the source had its share of the queue.
    pub source_busy: AtomicU64,
    /// Failed at once: the source is backed off.
    pub backoff_refusals: AtomicU64,
    /// Sources put into back-off.
    pub backoffs: AtomicU64,
}

/// Every counter of this module; one instance per agent.
#[derive(Debug, Default)]
pub struct Counters {
    pub ssh: ListenerCounters,
    pub restconf: ListenerCounters,
    pub sci_http: ListenerCounters,
    pub sci_grpc: ListenerCounters,
    pub netconf_tls: ListenerCounters,
    pub password: PasswordCounters,
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

// ----- sources -----------------------------------------------------------------------------

/// The unit a per-source limit counts: an IPv4 address, an IPv6 /64.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Logs at most one line per key and window, with the number of events since the last line
/// (a flood from one source must not flood the log either).
struct LogThrottle {
    window: Duration,
    /// (source, what) → (when last logged, events swallowed since).
    seen: Mutex<HashMap<ThrottleKey, (Instant, u64)>>,
}

type ThrottleKey = (IpAddr, &'static str);

const THROTTLE_KEYS: usize = 4096;

impl LogThrottle {
    fn new(window: Duration) -> LogThrottle {
        LogThrottle { window, seen: Mutex::new(HashMap::new()) }
    }

    /// `Some(n)` when a line should be written now, `n` counting this event and those
    /// swallowed before it.
    fn hit(&self, source: IpAddr, what: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= THROTTLE_KEYS && !seen.contains_key(&(source, what)) {
            seen.retain(|_, (at, _)| now.duration_since(*at) < self.window);
            if seen.len() >= THROTTLE_KEYS {
                seen.clear();
            }
        }
        let e = seen.entry((source, what)).or_insert((now - self.window * 2, 0));
        e.1 += 1;
        if now.duration_since(e.0) >= self.window {
            let n = e.1;
            *e = (now, 0);
            Some(n)
        } else {
            None
        }
    }
}

// ----- the connection gate -----------------------------------------------------------------

#[derive(Default)]
struct SourceUse {
    pending: usize,
    total: usize,
}

#[derive(Default)]
struct GateState {
    pending: usize,
    sources: HashMap<IpAddr, SourceUse>,
}

/// Admission of one listener's connections.
pub struct Gate {
    /// "ssh", "restconf", "sci-http".
    pub listener: &'static str,
    pub limits: ListenerLimits,
    counters: Arc<Counters>,
    state: Mutex<GateState>,
    log: LogThrottle,
}

/// Why a connection was refused at accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Pending,
    SourcePending,
    SourceConnections,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Pending => "too many unauthenticated connections",
            Refusal::SourcePending => "too many unauthenticated connections from this source",
            Refusal::SourceConnections => "too many connections from this source",
        }
    }
}

impl Gate {
    pub fn new(listener: &'static str, limits: ListenerLimits, counters: Arc<Counters>) -> Arc<Gate> {
        Arc::new(Gate {
            listener,
            limits,
            counters,
            state: Mutex::new(GateState::default()),
            log: LogThrottle::new(Duration::from_secs(10)),
        })
    }

    pub fn counters(&self) -> &ListenerCounters {
        match self.listener {
            "ssh" => &self.counters.ssh,
            "restconf" => &self.counters.restconf,
            "netconf-tls" => &self.counters.netconf_tls,
            "sci-grpc" => &self.counters.sci_grpc,
            _ => &self.counters.sci_http,
        }
    }

    /// Admits a just-accepted connection as pending, or refuses it (counted and logged; the
    /// caller closes the socket at once).
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Arc<Permit>, Refusal> {
        let source = source_key(peer.ip());
        let refusal = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (pending_now, used) = {
                let u = st.sources.get(&source);
                (st.pending, (u.map_or(0, |u| u.pending), u.map_or(0, |u| u.total)))
            };
            if used.1 >= self.limits.max_connections_per_source {
                Some(Refusal::SourceConnections)
            } else if used.0 >= self.limits.max_pending_per_source {
                Some(Refusal::SourcePending)
            } else if pending_now >= self.limits.max_pending {
                Some(Refusal::Pending)
            } else {
                st.pending += 1;
                let u = st.sources.entry(source).or_default();
                u.pending += 1;
                u.total += 1;
                None
            }
        };
        let c = self.counters();
        match refusal {
            None => {
                bump(&c.accepted);
                Ok(Arc::new(Permit {
                    gate: self.clone(),
                    source,
                    peer,
                    accepted: Instant::now(),
                    established: AtomicBool::new(false),
                }))
            }
            Some(r) => {
                audit::event(Category::ConnectionRefused)
                    .outcome("refused")
                    .source(source)
                    .transport(self.listener)
                    .field("reason", r.as_str())
                    .emit_aggregated(format!("{} refused {source} {:?}", self.listener, r));
                let total = bump(match r {
                    Refusal::Pending => &c.refused_pending,
                    Refusal::SourcePending => &c.refused_source_pending,
                    Refusal::SourceConnections => &c.refused_source_connections,
                });
                if let Some(n) = self.log.hit(source, r.as_str()) {
                    warn!(
                        listener = self.listener,
                        source = %source,
                        refused_since_last_line = n,
                        refused_total = total,
                        "connection refused: {}",
                        r.as_str()
                    );
                }
                Err(r)
            }
        }
    }

    /// Counts a handshake / header / body timeout and logs it (throttled per source).
    pub fn timed_out(&self, peer: SocketAddr, what: Timeout) {
        let c = self.counters();
        let total = bump(match what {
            Timeout::Handshake => &c.handshake_timeouts,
            Timeout::Auth => &c.auth_timeouts,
            Timeout::Header => &c.header_timeouts,
            Timeout::Body => &c.body_timeouts,
        });
        let source = source_key(peer.ip());
        audit::event(Category::ConnectionRefused)
            .outcome("closed")
            .source(source)
            .transport(self.listener)
            .field("reason", format!("{} timeout", what.as_str()))
            .emit_aggregated(format!("{} timeout {source} {what:?}", self.listener));
        if let Some(n) = self.log.hit(source, what.as_str()) {
            info!(
                listener = self.listener,
                source = %source,
                timeouts_since_last_line = n,
                timeouts_total = total,
                "connection closed: {} timeout",
                what.as_str()
            );
        }
    }

    fn release(&self, source: IpAddr, pending: bool) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if pending {
            st.pending = st.pending.saturating_sub(1);
        }
        if let Some(u) = st.sources.get_mut(&source) {
            if pending {
                u.pending = u.pending.saturating_sub(1);
            }
            u.total = u.total.saturating_sub(1);
            if u.total == 0 {
                st.sources.remove(&source);
            }
        }
    }

    fn establish(&self, source: IpAddr) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending = st.pending.saturating_sub(1);
        if let Some(u) = st.sources.get_mut(&source) {
            u.pending = u.pending.saturating_sub(1);
        }
        drop(st);
        bump(&self.counters().established);
    }

    /// Pending connections now (listener-wide).
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pending
    }
}

/// Which deadline cut a connection off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    Handshake,
    Auth,
    Header,
    Body,
}

impl Timeout {
    pub fn as_str(self) -> &'static str {
        match self {
            Timeout::Handshake => "handshake",
            Timeout::Auth => "authentication",
            Timeout::Header => "header read",
            Timeout::Body => "body read",
        }
    }
}

/// One admitted connection; releases its place when dropped.
pub struct Permit {
    gate: Arc<Gate>,
    source: IpAddr,
    pub peer: SocketAddr,
    accepted: Instant,
    established: AtomicBool,
}

impl Permit {
    /// The connection has authenticated: it no longer counts as pending.
    pub fn establish(&self) {
        if !self.established.swap(true, Ordering::AcqRel) {
            self.gate.establish(self.source);
        }
    }

    pub fn is_established(&self) -> bool {
        self.established.load(Ordering::Acquire)
    }

    pub fn limits(&self) -> &ListenerLimits {
        &self.gate.limits
    }

    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Resolves when the authentication deadline passes with the connection still pending
    /// (counted and logged); never once it has authenticated. Select on it next to the
    /// connection and drop the connection when it fires.
    pub async fn auth_deadline(&self) {
        let deadline = self.accepted + self.gate.limits.auth_timeout();
        tokio::time::sleep_until(deadline.into()).await;
        if self.is_established() {
            std::future::pending::<()>().await;
        }
        self.gate.timed_out(self.peer, Timeout::Auth);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release(self.source, !self.is_established());
    }
}

// ----- back-off ----------------------------------------------------------------------------

struct Failures {
    count: u32,
    last: Instant,
}

/// Sources that keep failing to log in. Time is passed in (DESIGN decision 4).
pub struct Backoff {
    after: u32,
    initial: Duration,
    max: Duration,
    cap: usize,
    sources: HashMap<IpAddr, Failures>,
}

impl Backoff {
    pub fn new(s: &LimitsSettings) -> Backoff {
        Backoff {
            after: s.backoff_after_failures,
            initial: Duration::from_millis(s.backoff_initial_ms),
            max: Duration::from_secs(s.backoff_max_secs),
            cap: s.backoff_sources,
            sources: HashMap::new(),
        }
    }

    fn delay(&self, count: u32) -> Option<Duration> {
        let over = count.checked_sub(self.after)?;
        let factor = 1u32.checked_shl(over.min(31)).unwrap_or(u32::MAX);
        Some(self.initial.saturating_mul(factor).min(self.max))
    }

    fn forgotten(&self, f: &Failures, now: Instant) -> bool {
        now.saturating_duration_since(f.last) > self.max * 2
    }

    /// How much longer `source` is refused, if it is.
    pub fn blocked(&mut self, source: IpAddr, now: Instant) -> Option<Duration> {
        let f = self.sources.get(&source)?;
        if self.forgotten(f, now) {
            self.sources.remove(&source);
            return None;
        }
        let until = f.last + self.delay(f.count)?;
        (now < until).then(|| until - now)
    }

    /// Records a failed login; true when this failure started a back-off.
    pub fn failed(&mut self, source: IpAddr, now: Instant) -> bool {
        if !self.sources.contains_key(&source) && self.sources.len() >= self.cap {
            let max2 = self.max * 2;
            self.sources.retain(|_, f| now.saturating_duration_since(f.last) <= max2);
            if self.sources.len() >= self.cap {
                if let Some(oldest) = self.sources.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k) {
                    self.sources.remove(&oldest);
                }
            }
        }
        let stale = self.sources.get(&source).is_some_and(|f| self.forgotten(f, now));
        if stale {
            self.sources.remove(&source);
        }
        let f = self.sources.entry(source).or_insert(Failures { count: 0, last: now });
        f.count = f.count.saturating_add(1);
        f.last = now;
        f.count == self.after
    }

    /// A successful login forgets the source's failures.
    pub fn succeeded(&mut self, source: IpAddr) {
        self.sources.remove(&source);
    }

    pub fn len(&self) -> usize {
        self.sources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

// ----- the password pool -------------------------------------------------------------------

struct Job {
    hash: Arc<str>,
    password: String,
    reply: tokio::sync::oneshot::Sender<bool>,
}

/// What a password check came to. Only `Accepted` logs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Wrong password, unknown user, or a user without a password (all hashed).
    Rejected,
    /// Not hashed: the queue was full.
    QueueFull,
    /// Not hashed: the source had its share of the queue.
    SourceBusy,
    /// Not hashed: the source is backed off.
    BackedOff,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected => "wrong-credentials",
            Verdict::QueueFull => "password-queue-full",
            Verdict::SourceBusy => "source-busy",
            Verdict::BackedOff => "source-backed-off",
        }
    }
}

/// argon2 on a fixed set of worker threads behind a bounded queue, with per-source shares
/// and back-off; shared by every transport that checks passwords.
pub struct PasswordPool {
    queue: std::sync::mpsc::SyncSender<Job>,
    dummy: Arc<str>,
    per_source: usize,
    in_flight: Mutex<HashMap<IpAddr, usize>>,
    backoff: Mutex<Backoff>,
    counters: Arc<Counters>,
}

impl PasswordPool {
    /// Starts the workers. `dummy` is the hash unknown users are checked against (see
    /// [`UserStore::dummy_hash`]).
    pub fn start(settings: &LimitsSettings, dummy: String, counters: Arc<Counters>) -> PasswordPool {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(settings.password_queue);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..settings.password_workers {
            let rx = rx.clone();
            let counters = counters.clone();
            let spawned = std::thread::Builder::new().name(format!("argon2-{i}")).spawn(move || loop {
                let job = {
                    let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                    rx.recv()
                };
                let Ok(job) = job else { return };
                bump(&counters.password.hashes);
                let ok = crate::mgmt::users::verify_hash(&job.password, &job.hash);
                let _ = job.reply.send(ok);
            });
            if let Err(e) = spawned {
                warn!("cannot start password worker {i}: {e}");
            }
        }
        PasswordPool {
            queue: tx,
            dummy: dummy.into(),
            per_source: settings.password_checks_per_source,
            in_flight: Mutex::new(HashMap::new()),
            backoff: Mutex::new(Backoff::new(settings)),
            counters,
        }
    }

    pub fn counters(&self) -> &PasswordCounters {
        &self.counters.password
    }

    /// Checks `user`'s password for a login from `peer` over `transport` ("ssh",
    /// "restconf"), and logs the outcome. Unknown users cost the same argon2 run.
    pub async fn check(
        &self,
        users: &UserStore,
        user: &str,
        password: &str,
        peer: Option<SocketAddr>,
        transport: &'static str,
    ) -> Verdict {
        let source = peer.map(|p| source_key(p.ip()));
        let verdict = self.run(users, user, password, source).await;
        let c = &self.counters.password;
        let hashes = c.hashes.load(Ordering::Relaxed);
        let source = source.map(|s| s.to_string()).unwrap_or_default();
        login_audit(verdict, user, &source, transport, "password");
        match verdict {
            Verdict::Accepted => {
                bump(&c.successes);
                info!(transport, user = ?user, source = %source, method = "password", hashes, "login succeeded");
            }
            Verdict::Rejected => {
                let failures = bump(&c.failures);
                warn!(
                    transport,
                    user = ?user,
                    source = %source,
                    method = "password",
                    outcome = verdict.as_str(),
                    hashed = true,
                    hashes,
                    failures,
                    "login failed"
                );
            }
            _ => {
                let failures = bump(&c.failures);
                warn!(
                    transport,
                    user = ?user,
                    source = %source,
                    method = "password",
                    outcome = verdict.as_str(),
                    hashed = false,
                    hashes,
                    failures,
                    "login failed"
                );
            }
        }
        verdict
    }

    async fn run(&self, users: &UserStore, user: &str, password: &str, source: Option<IpAddr>) -> Verdict {
        if let Some(s) = source {
            let blocked = self.backoff.lock().unwrap_or_else(|e| e.into_inner()).blocked(s, Instant::now());
            if blocked.is_some() {
                bump(&self.counters.password.backoff_refusals);
                return Verdict::BackedOff;
            }
        }
        let Some(_share) = self.take_share(source) else {
            bump(&self.counters.password.source_busy);
            return Verdict::SourceBusy;
        };
        let (hash, known) = match users.password_hash(user) {
            Some(h) => (h, true),
            None => (self.dummy.clone(), false),
        };
        if !known {
            bump(&self.counters.password.dummy_hashes);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job { hash, password: password.to_owned(), reply };
        if self.queue.try_send(job).is_err() {
            bump(&self.counters.password.queue_full);
            return Verdict::QueueFull;
        }
        let ok = answer.await.unwrap_or(false) && known;
        if let Some(s) = source {
            let mut b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
            if ok {
                b.succeeded(s);
            } else if b.failed(s, Instant::now()) {
                drop(b);
                self.backed_off(s);
            }
        }
        if ok {
            Verdict::Accepted
        } else {
            Verdict::Rejected
        }
    }

    /// A place among the source's in-flight checks, released on drop.
    fn take_share(&self, source: Option<IpAddr>) -> Option<Share<'_>> {
        let Some(s) = source else { return Some(Share { pool: self, source: None }) };
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(s).or_insert(0);
        if *n >= self.per_source {
            return None;
        }
        *n += 1;
        Some(Share { pool: self, source: Some(s) })
    }

    fn backed_off(&self, s: IpAddr) {
        bump(&self.counters.password.backoffs);
        warn!(source = %s, "source backed off after repeated login failures");
        audit::event(Category::Login)
            .outcome("backed-off")
            .source(s)
            .field("reason", "repeated login failures: password attempts refused for a while")
            .emit_aggregated(format!("login backoff {s}"));
    }

    /// Records a failed login that did not go through the pool (a refused public key), so
    /// it counts towards the source's back-off.
    pub fn record_failure(&self, peer: Option<SocketAddr>) {
        if let Some(p) = peer {
            let s = source_key(p.ip());
            if self.backoff.lock().unwrap_or_else(|e| e.into_inner()).failed(s, Instant::now()) {
                self.backed_off(s);
            }
        }
    }
}

/// The audit record of a login: every success; failures (which a peer causes at will)
/// aggregated per source and transport.
pub fn login_audit(verdict: Verdict, user: &str, source: &str, transport: &'static str, method: &'static str) {
    let ev = audit::event(Category::Login).user(user).source(source).transport(transport).field("method", method);
    if verdict == Verdict::Accepted {
        ev.outcome("success").emit();
    } else {
        let ev = ev.outcome("failure").field("reason", verdict.as_str());
        let ev = if method == "password" { ev.field("hashed", verdict == Verdict::Rejected) } else { ev };
        ev.emit_aggregated(format!("login failure {transport} {source}"));
    }
}

struct Share<'a> {
    pool: &'a PasswordPool,
    source: Option<IpAddr>,
}

impl Drop for Share<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.source {
            let mut m = self.pool.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = m.get_mut(&s) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&s);
                }
            }
        }
    }
}

// ----- everything together -----------------------------------------------------------------

/// The limits of one agent: a gate per listener, the password pool, the counters.
pub struct Limits {
    pub settings: LimitsSettings,
    pub counters: Arc<Counters>,
    pub ssh: Arc<Gate>,
    pub restconf: Arc<Gate>,
    pub sci_http: Arc<Gate>,
    pub sci_grpc: Arc<Gate>,
    pub netconf_tls: Arc<Gate>,
    pub passwords: PasswordPool,
}

impl Limits {
    pub fn new(settings: LimitsSettings, users: &UserStore) -> Arc<Limits> {
        let counters = Arc::new(Counters::default());
        let passwords = PasswordPool::start(&settings, users.dummy_hash(), counters.clone());
        Arc::new(Limits {
            ssh: Gate::new("ssh", settings.ssh.clone(), counters.clone()),
            restconf: Gate::new("restconf", settings.restconf.clone(), counters.clone()),
            sci_http: Gate::new("sci-http", settings.sci_http.clone(), counters.clone()),
            sci_grpc: Gate::new("sci-grpc", settings.sci_grpc.clone(), counters.clone()),
            netconf_tls: Gate::new("netconf-tls", settings.netconf_tls.clone(), counters.clone()),
            passwords,
            counters,
            settings,
        })
    }
}

/// The counters in the operational state, `/cats-sma:cats-sma/listener-limits`.
pub struct LimitsState {
    pub limits: std::sync::Weak<Limits>,
}

impl crate::datastore::StateProvider for LimitsState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(
        &self,
        tree: &mut yang2::data::DataTree<'static>,
        xpath: Option<&str>,
    ) -> Result<(), crate::error::RpcError> {
        use crate::datastore::tree::set;
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let Some(l) = self.limits.upgrade() else { return Ok(()) };
        let base = "/cats-sma:cats-sma/listener-limits";
        for gate in [&l.ssh, &l.restconf, &l.sci_http, &l.sci_grpc, &l.netconf_tls] {
            let c = gate.counters();
            let entry = format!("{base}/listener[name='{}']", gate.listener);
            set(tree, &format!("{entry}/pending"), Some(&gate.pending().min(u32::MAX as usize).to_string()))?;
            for (leaf, v) in [
                ("accepted", &c.accepted),
                ("established", &c.established),
                ("refused-pending", &c.refused_pending),
                ("refused-source-pending", &c.refused_source_pending),
                ("refused-source-connections", &c.refused_source_connections),
                ("handshake-timeouts", &c.handshake_timeouts),
                ("auth-timeouts", &c.auth_timeouts),
                ("header-timeouts", &c.header_timeouts),
                ("body-timeouts", &c.body_timeouts),
            ] {
                set(tree, &format!("{entry}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
            }
        }
        let p = &l.counters.password;
        for (leaf, v) in [
            ("hashes", &p.hashes),
            ("dummy-hashes", &p.dummy_hashes),
            ("successes", &p.successes),
            ("failures", &p.failures),
            ("queue-full", &p.queue_full),
            ("source-busy", &p.source_busy),
            ("backoff-refusals", &p.backoff_refusals),
            ("backoffs", &p.backoffs),
        ] {
            set(tree, &format!("{base}/password-checks/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    #[test]
    fn ipv6_sources_are_grouped_by_64() {
        assert_eq!(source_key("2001:db8:1:2:3:4:5:6".parse().unwrap()), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        assert_eq!(source_key("::ffff:10.0.0.1".parse().unwrap()), "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(source_key("10.0.0.1".parse().unwrap()), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn gate_caps_pending_per_source_and_globally_and_releases() {
        let limits = ListenerLimits {
            max_pending: 3,
            max_pending_per_source: 2,
            max_connections_per_source: 3,
            ..Default::default()
        };
        let g = Gate::new("ssh", limits, Arc::new(Counters::default()));
        let a1 = g.admit(peer("10.0.0.1")).unwrap();
        let a2 = g.admit(peer("10.0.0.1")).unwrap();
        assert_eq!(g.admit(peer("10.0.0.1")).err(), Some(Refusal::SourcePending));
        let b1 = g.admit(peer("10.0.0.2")).unwrap();
        assert_eq!(g.admit(peer("10.0.0.3")).err(), Some(Refusal::Pending));
        // Authenticated connections leave the pending pools but still count per source.
        a1.establish();
        a1.establish();
        assert_eq!(g.pending(), 2);
        let a3 = g.admit(peer("10.0.0.1")).unwrap();
        a3.establish();
        assert_eq!(g.admit(peer("10.0.0.1")).err(), Some(Refusal::SourceConnections));
        drop((a1, a2, a3, b1));
        assert_eq!(g.pending(), 0);
        assert!(g.state.lock().unwrap().sources.is_empty());
        assert_eq!(g.counters().refused(), 3);
        assert_eq!(g.counters().established.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn backoff_grows_exponentially_is_bounded_and_forgets() {
        let s = LimitsSettings {
            backoff_after_failures: 3,
            backoff_initial_ms: 1000,
            backoff_max_secs: 8,
            backoff_sources: 2,
            ..Default::default()
        };
        let mut b = Backoff::new(&s);
        let t0 = Instant::now();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(!b.failed(ip, t0));
        assert!(!b.failed(ip, t0));
        assert_eq!(b.blocked(ip, t0), None);
        assert!(b.failed(ip, t0), "the third failure starts the back-off");
        assert_eq!(b.blocked(ip, t0), Some(Duration::from_secs(1)));
        assert_eq!(b.blocked(ip, t0 + Duration::from_secs(1)), None);
        b.failed(ip, t0);
        assert_eq!(b.blocked(ip, t0), Some(Duration::from_secs(2)));
        for _ in 0..40 {
            b.failed(ip, t0);
        }
        assert_eq!(b.blocked(ip, t0), Some(Duration::from_secs(8)), "capped at backoff_max");
        assert_eq!(b.blocked(ip, t0 + Duration::from_secs(17)), None, "forgotten after 2 x max");
        assert!(b.is_empty());
        // The table is bounded: a third source evicts the oldest.
        b.failed("10.0.0.2".parse().unwrap(), t0);
        b.failed("10.0.0.3".parse().unwrap(), t0 + Duration::from_secs(1));
        b.failed("10.0.0.4".parse().unwrap(), t0 + Duration::from_secs(2));
        assert_eq!(b.len(), 2);
        assert!(!b.sources.contains_key(&"10.0.0.2".parse::<IpAddr>().unwrap()));
        b.succeeded("10.0.0.3".parse().unwrap());
        assert_eq!(b.len(), 1);
    }

    fn store(hash: &str) -> UserStore {
        UserStore::from_entries(&[crate::config::UserEntry {
            name: "bob".into(),
            password_hash: Some(hash.into()),
            authorized_keys: vec![],
        }])
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_users_are_hashed_too_and_a_full_queue_fails_fast() {
        let users = Arc::new(store(&crate::mgmt::users::hash_password("pw").unwrap()));
        let settings = LimitsSettings { password_workers: 1, password_queue: 1, ..Default::default() };
        let pool = Arc::new(PasswordPool::start(&settings, users.dummy_hash(), Arc::new(Counters::default())));
        let p = Some(peer("10.0.0.9"));
        assert_eq!(pool.check(&users, "bob", "pw", p, "ssh").await, Verdict::Accepted);
        assert_eq!(pool.check(&users, "bob", "nope", p, "ssh").await, Verdict::Rejected);
        assert_eq!(pool.check(&users, "nobody", "pw", p, "ssh").await, Verdict::Rejected);
        let c = pool.counters();
        assert_eq!(c.hashes.load(Ordering::Relaxed), 3);
        assert_eq!(c.dummy_hashes.load(Ordering::Relaxed), 1);
        // Many at once: one runs, one waits, the rest fail without hashing.
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (pool, users) = (pool.clone(), users.clone());
            set.spawn(
                async move { pool.check(&users, "bob", "wrong", Some(peer(&format!("10.1.0.{i}"))), "ssh").await },
            );
        }
        let all: Vec<Verdict> = set.join_all().await;
        assert!(all.contains(&Verdict::QueueFull), "{all:?}");
        assert!(pool.counters().hashes.load(Ordering::Relaxed) < 3 + 8);
    }

    #[tokio::test]
    async fn a_backed_off_source_is_refused_without_hashing() {
        let users = store(&crate::mgmt::users::hash_password("pw").unwrap());
        let settings = LimitsSettings { backoff_after_failures: 2, backoff_initial_ms: 60_000, ..Default::default() };
        let pool = PasswordPool::start(&settings, users.dummy_hash(), Arc::new(Counters::default()));
        let bad = Some(peer("10.0.0.7"));
        assert_eq!(pool.check(&users, "bob", "x", bad, "restconf").await, Verdict::Rejected);
        assert_eq!(pool.check(&users, "bob", "y", bad, "restconf").await, Verdict::Rejected);
        let hashes = pool.counters().hashes.load(Ordering::Relaxed);
        assert_eq!(pool.check(&users, "bob", "pw", bad, "restconf").await, Verdict::BackedOff);
        assert_eq!(pool.counters().hashes.load(Ordering::Relaxed), hashes, "not hashed");
        assert_eq!(pool.check(&users, "bob", "pw", Some(peer("10.0.0.8")), "restconf").await, Verdict::Accepted);
    }
}

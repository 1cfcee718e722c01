//! Seed 000 (draft-dunbar-ippm-5g-edge-compute-ip-layer-metrics): IP-layer metrics of the
//! sites hosting an application server, from the traffic its egress routers (A-ERs) count.
//!
//! - `flow`: IPFIX / NetFlow v9 decoding (NetGauze's codec), templates per exporter and
//!   observation domain.
//! - here: the UDP collector, the four counters of section 3.2 per application site and
//!   measurement interval, the Load Index, and the Capacity Index (configured, or estimated
//!   from the site's history, section 3.3).
//! - `select`: the section 4 cost and the ranking built from it.
//! - `config`, `state`, `rpc`: configuration in (`cats-ip-metrics`), operational state out,
//!   the `select-site` RPC.

pub mod config;
pub mod flow;
pub mod learn;
pub mod rpc;
pub mod select;
pub mod stamp;
pub mod state;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use self::config::IpmConfig;
use self::flow::{Domain, FlowCount, Protocol};
use crate::error::{ErrorTag, RpcError};

pub const ROOT: &str = "/cats-sma:cats-sma/cats-ip-metrics:ip-metrics";
pub const NS: &str = "urn:cats-sma:yang:cats-ip-metrics";
/// Exporter template states kept at once (YANG `exporter` max-elements).
pub const MAX_DOMAINS: usize = 4096;
/// Template states (transport session and domain) per exporter address.
pub const MAX_DOMAINS_PER_EXPORTER: usize = 16;
/// Completed intervals kept per site for the capacity estimator.
pub const MAX_HISTORY: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    crate::cps::session::lock(m)
}

/// The four counters of section 3.2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub to_packets: u64,
    pub from_packets: u64,
    pub to_bytes: u64,
    pub from_bytes: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.to_packets = self.to_packets.saturating_add(o.to_packets);
        self.from_packets = self.from_packets.saturating_add(o.from_packets);
        self.to_bytes = self.to_bytes.saturating_add(o.to_bytes);
        self.from_bytes = self.from_bytes.saturating_add(o.from_bytes);
    }

    /// LoadIndex = w1·ToPackets + w2·FromPackets + w3·ToBytes + w4·FromBytes.
    pub fn load_index(&self, w: &[f64; 4]) -> f64 {
        w[0] * self.to_packets as f64
            + w[1] * self.from_packets as f64
            + w[2] * self.to_bytes as f64
            + w[3] * self.from_bytes as f64
    }
}

/// A completed measurement interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub start: DateTime<Utc>,
    pub counts: Counts,
    pub load: f64,
}

/// One application site's measurements.
#[derive(Clone, Debug, Default)]
pub struct Meter {
    pub total: Counts,
    current: Counts,
    pub last: Option<Interval>,
    /// Load Indexes of completed intervals, oldest first (the capacity estimator's window).
    history: VecDeque<f64>,
    /// The users' feedback on the last complete interval (load-feedback), taken at the next
    /// boundary.
    feedback: Option<f64>,
    /// The capacity estimate, computed when the history or its parameters change.
    estimated: Option<f64>,
}

/// Where a site's Capacity Index comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    Configured(u32),
    Estimated(f64),
    None,
}

impl Capacity {
    pub fn value(self) -> Option<f64> {
        match self {
            Capacity::Configured(c) => Some(f64::from(c)),
            Capacity::Estimated(c) => Some(c),
            Capacity::None => None,
        }
    }

    pub fn yang(self) -> &'static str {
        match self {
            Capacity::Configured(_) => "configured",
            Capacity::Estimated(_) => "estimated",
            Capacity::None => "none",
        }
    }
}

impl Meter {
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// The section 3.3 estimate: the `percentile` (nearest rank) of the Load Indexes in the
    /// window, once `min` intervals completed; at least 1 (an idle history still gives a
    /// finite ratio).
    pub fn estimate(&self, percentile: u8, min: u32) -> Option<f64> {
        if self.history.is_empty() || self.history.len() < min as usize {
            return None;
        }
        let mut v: Vec<f64> = self.history.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let rank = ((f64::from(percentile) / 100.0) * v.len() as f64).ceil() as usize;
        Some(v[rank.clamp(1, v.len()) - 1].max(1.0))
    }
}

/// The collector's counters (YANG `collector/statistics`).
#[derive(Default)]
pub struct Stats {
    pub messages: AtomicU64,
    pub malformed: AtomicU64,
    pub unknown_exporter: AtomicU64,
    pub without_template: AtomicU64,
    pub records: AtomicU64,
    pub matched_records: AtomicU64,
    pub withdrawals_ignored: AtomicU64,
    pub templates_expired: AtomicU64,
    pub templates_refused: AtomicU64,
}

/// Template state of one exporter transport session and observation domain.
pub struct Exporter {
    pub domain: Domain,
    pub protocol: Protocol,
    pub messages: u64,
    pub last: DateTime<Utc>,
    last_instant: Instant,
}

/// An application site: (application-id, site-id).
pub type SiteKey = (IpAddr, String);

#[derive(Default)]
struct Inner {
    config: IpmConfig,
    meters: HashMap<SiteKey, Meter>,
    /// (A-ER, server address) → the sites whose traffic that is.
    index: HashMap<(IpAddr, IpAddr), Vec<SiteKey>>,
    a_ers: HashSet<IpAddr>,
    exporters: HashMap<(SocketAddr, u32), Exporter>,
    /// Application Bound Group Routers: ingress routers per application.
    groups: HashMap<IpAddr, BTreeMap<String, Member>>,
    interval_start: Option<(Instant, DateTime<Utc>)>,
    learner: learn::Learner,
    fit: Option<learn::Fit>,
    /// The weights the last interval's Load Index was computed with.
    weights_in_use: Option<[f64; 4]>,
}

/// The IP-layer metrics of seed 000.
pub struct Ipm {
    inner: Mutex<Inner>,
    pub stats: Stats,
    collector: Listener,
    reflector: Listener,
    pub reflector_stats: Arc<stamp::ReflectorStats>,
    /// The reflector's settings, read per packet without the `inner` lock.
    reflector_config: Arc<Mutex<Option<stamp::ReflectorConfig>>>,
    sender: Mutex<stamp::Sender>,
    sender_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// On-change YANG-Push (the engine's typed change stream) and what was last pushed.
    changes: Option<crate::engine::changes::ChangeTap>,
    published: Mutex<HashMap<String, Vec<(String, String)>>>,
    /// Wakes the interval task when the measurement interval changes.
    reconfigured: Arc<tokio::sync::Notify>,
}

impl Ipm {
    pub fn new(changes: Option<crate::engine::changes::ChangeTap>) -> Arc<Ipm> {
        let ipm = Arc::new(Ipm {
            inner: Mutex::new(Inner::default()),
            stats: Stats::default(),
            collector: Listener::default(),
            reflector: Listener::default(),
            reflector_stats: Arc::default(),
            reflector_config: Arc::default(),
            sender: Mutex::default(),
            sender_task: Mutex::default(),
            changes,
            published: Mutex::default(),
            reconfigured: Arc::new(tokio::sync::Notify::new()),
        });
        tokio::spawn(intervals(Arc::downgrade(&ipm), ipm.reconfigured.clone()));
        ipm
    }

    /// The configuration in force.
    pub fn config(&self) -> IpmConfig {
        lock(&self.inner).config.clone()
    }

    /// Takes a new configuration: the meters of sites that stay are kept, the index is
    /// rebuilt; a changed measurement interval starts a new interval now.
    pub fn configure(&self, c: IpmConfig) {
        let mut g = lock(&self.inner);
        let interval_changed = g.config.interval != c.interval;
        let mut index: HashMap<(IpAddr, IpAddr), Vec<SiteKey>> = HashMap::new();
        let mut a_ers = HashSet::new();
        let mut keys = HashSet::new();
        for app in &c.applications {
            for site in &app.sites {
                let key = (app.id, site.id.clone());
                for a in &site.a_ers {
                    a_ers.insert(*a);
                    for s in site.servers_or(app.id) {
                        let v = index.entry((*a, s)).or_default();
                        if !v.contains(&key) {
                            v.push(key.clone());
                        }
                    }
                }
                keys.insert(key);
            }
        }
        g.meters.retain(|k, _| keys.contains(k));
        let apps: HashSet<IpAddr> = c.applications.iter().map(|a| a.id).collect();
        g.groups.retain(|a, _| apps.contains(a));
        for k in keys {
            g.meters.entry(k).or_default();
        }
        let cap = history_cap(&c);
        for m in g.meters.values_mut() {
            while m.history.len() > cap {
                m.history.pop_front();
            }
            m.estimated = m.estimate(c.estimate.percentile, c.estimate.min_intervals);
            if interval_changed {
                // The counts so far belong to an interval of the old length: they stay in
                // the totals, not in the new interval.
                m.current = Counts::default();
            }
        }
        g.index = index;
        g.a_ers = a_ers;
        g.config = c;
        if interval_changed || g.interval_start.is_none() {
            g.interval_start = Some((Instant::now(), Utc::now()));
        }
        drop(g);
        self.reconfigured.notify_one();
    }

    /// Closes the current measurement interval of every site (the interval task calls it at
    /// each boundary).
    fn roll(&self, now: Instant) {
        let mut g = lock(&self.inner);
        let Some((_, start)) = g.interval_start else { return };
        // Feedback on the interval that completed last goes to the learner first.
        let forgetting = g.config.learning.map_or(1.0, |(_, f)| f);
        let mut samples = Vec::new();
        for m in g.meters.values_mut() {
            if let (Some(y), Some(l)) = (m.feedback.take(), m.last) {
                let c = l.counts;
                samples.push(([c.to_packets, c.from_packets, c.to_bytes, c.from_bytes].map(|v| v as f64), y));
            }
        }
        // The fit changes only with new samples.
        if !samples.is_empty() {
            for (x, y) in samples {
                g.learner.add(x, y, forgetting);
            }
            g.fit = g.learner.fit();
        }
        let weights = match (g.config.learning, g.fit) {
            (Some((min, _)), Some(f)) if g.learner.samples >= min => f.weights,
            _ => g.config.weights,
        };
        g.weights_in_use = Some(weights);
        let cap = history_cap(&g.config);
        for m in g.meters.values_mut() {
            let counts = std::mem::take(&mut m.current);
            let load = counts.load_index(&weights);
            m.last = Some(Interval { start, counts, load });
            m.history.push_back(load);
            while m.history.len() > cap {
                m.history.pop_front();
            }
        }
        let (p, min) = (g.config.estimate.percentile, g.config.estimate.min_intervals);
        for m in g.meters.values_mut() {
            m.estimated = m.estimate(p, min);
        }
        g.interval_start = Some((now, Utc::now()));
        let lifetime = g.config.collector.as_ref().map(|c| c.template_lifetime);
        if let Some(lifetime) = lifetime {
            let mut expired = 0;
            for e in g.exporters.values_mut() {
                expired += e.domain.expire(now, lifetime);
            }
            self.stats.templates_expired.fetch_add(expired, Ordering::Relaxed);
        }
    }

    /// One datagram from `from`.
    pub fn receive(&self, from: SocketAddr, msg: &[u8]) {
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        let now = Instant::now();
        let mut g = lock(&self.inner);
        if !g.a_ers.contains(&from.ip()) {
            drop(g);
            self.stats.unknown_exporter.fetch_add(1, Ordering::Relaxed);
            refused(from, "the source is no configured A-ER");
            return;
        }
        let (protocol, domain) = match flow::header(msg) {
            Ok(h) => h,
            Err(e) => {
                drop(g);
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                refused(from, &e);
                return;
            }
        };
        let Some((lifetime, max)) = g.config.collector.as_ref().map(|c| (c.template_lifetime, c.max_templates)) else {
            return;
        };
        if !g.exporters.contains_key(&(from, domain)) {
            // New template state: exporters silent for a template lifetime make room; beyond
            // the bounds a new one is refused (evicting would let a spoofer who rotates
            // ports push a real A-ER's templates out).
            if g.exporters.len() >= MAX_DOMAINS {
                g.exporters.retain(|_, e| now.duration_since(e.last_instant) < lifetime);
            }
            let same_ip = g.exporters.keys().filter(|(a, _)| a.ip() == from.ip()).count();
            if g.exporters.len() >= MAX_DOMAINS || same_ip >= MAX_DOMAINS_PER_EXPORTER {
                drop(g);
                self.stats.templates_refused.fetch_add(1, Ordering::Relaxed);
                refused(from, "too many exporter sessions and observation domains");
                return;
            }
        }
        let e = g.exporters.entry((from, domain)).or_insert_with(|| Exporter {
            domain: Domain::default(),
            protocol,
            messages: 0,
            last: Utc::now(),
            last_instant: now,
        });
        e.protocol = protocol;
        e.messages += 1;
        e.last = Utc::now();
        e.last_instant = now;
        let expired = e.domain.expire(now, lifetime);
        let decoded = e.domain.decode(msg, now, max);
        self.stats.templates_expired.fetch_add(expired, Ordering::Relaxed);
        let d = match decoded {
            Ok(d) => d,
            Err(err) => {
                drop(g);
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                refused(from, &err);
                return;
            }
        };
        self.stats.messages.fetch_add(1, Ordering::Relaxed);
        self.stats.records.fetch_add(d.records, Ordering::Relaxed);
        self.stats.without_template.fetch_add(d.without_template, Ordering::Relaxed);
        self.stats.withdrawals_ignored.fetch_add(d.withdrawals_ignored, Ordering::Relaxed);
        self.stats.templates_refused.fetch_add(d.refused, Ordering::Relaxed);
        let mut matched = 0;
        for f in &d.flows {
            matched += u64::from(g.count(from.ip(), f));
        }
        self.stats.matched_records.fetch_add(matched, Ordering::Relaxed);
    }

    /// Runs `f` over the meters and configuration (state rendering, selection).
    pub fn with<R>(
        &self,
        f: impl FnOnce(&IpmConfig, &HashMap<SiteKey, Meter>, &HashMap<(SocketAddr, u32), Exporter>) -> R,
    ) -> R {
        let g = lock(&self.inner);
        f(&g.config, &g.meters, &g.exporters)
    }

    /// The Capacity Index of a site in force (the estimate is computed at interval boundaries).
    pub fn capacity(configured: Option<u32>, m: Option<&Meter>) -> Capacity {
        match configured {
            Some(v) => Capacity::Configured(v),
            None => m.and_then(|m| m.estimated).map_or(Capacity::None, Capacity::Estimated),
        }
    }

    /// The collector's bound address.
    pub fn listening(&self) -> Option<SocketAddr> {
        self.collector.bound()
    }

    /// The STAMP reflector's bound address.
    pub fn reflecting(&self) -> Option<SocketAddr> {
        self.reflector.bound()
    }

    /// Binds the collector's and the reflector's sockets for `c` (prepare: a port that
    /// cannot be bound refuses the commit); a socket is None when the current one serves.
    pub fn bind(&self, c: &IpmConfig) -> Result<Sockets, String> {
        Ok(Sockets {
            collector: self.collector.bind(c.collector.as_ref().map(|x| x.listen), "ip-metrics/collector")?,
            reflector: self.reflector.bind(c.reflector.as_ref().map(|x| x.listen), "ip-metrics/stamp/reflector")?,
        })
    }

    /// Applies `c` with the sockets `bind` gave.
    pub fn apply(self: &Arc<Self>, c: IpmConfig, sockets: Sockets) {
        let collect_at = c.collector.as_ref().map(|x| x.listen);
        let reflect_at = c.reflector.as_ref().map(|x| x.listen);
        let sending = c.sender.is_some();
        self.configure(c);
        let weak = Arc::downgrade(self);
        self.collector
            .apply(collect_at, sockets.collector, "IPFIX / NetFlow v9 collector", |s| tokio::spawn(collect(weak, s)));
        *lock(&self.reflector_config) = lock(&self.inner).config.reflector.clone();
        let snapshot = self.reflector_config.clone();
        let stats = self.reflector_stats.clone();
        self.reflector.apply(reflect_at, sockets.reflector, "STAMP session-reflector", move |s| {
            let config = move || lock(&snapshot).clone();
            tokio::spawn(stamp::reflector(s, config, stats))
        });
        let mut sender = lock(&self.sender_task);
        match (sending, sender.is_some()) {
            (true, false) => *sender = Some(tokio::spawn(send_probes(Arc::downgrade(self)))),
            (false, true) => {
                if let Some(t) = sender.take() {
                    t.abort();
                }
                lock(&self.sender).rtts.clear();
            }
            _ => {}
        }
    }

    /// Delay-i from the agent's vantage point: the smallest mean RTT among `a_ers`.
    pub fn measured_delay(&self, a_ers: &[IpAddr]) -> Option<u32> {
        let s = lock(&self.sender);
        a_ers.iter().filter_map(|a| s.rtts.get(a).and_then(|r| r.mean())).min()
    }

    /// The STAMP measurements of `a_er`.
    pub fn rtt(&self, a_er: IpAddr) -> Option<stamp::Rtt> {
        lock(&self.sender).rtts.get(&a_er).cloned()
    }

    /// Joins `ingress` to the group of `app` or refreshes its membership (section 5), with
    /// the RTTs it reported (kept when it reported none).
    pub fn join(&self, app: IpAddr, ingress: &str, rtt: &HashMap<IpAddr, u32>) -> Result<(), RpcError> {
        if ingress.contains('\'') && ingress.contains('"') {
            return Err(RpcError::application(
                ErrorTag::InvalidValue,
                "an ingress name may hold single or double quotes, not both",
            )
            .with_bad_element("ingress"));
        }
        let mut g = lock(&self.inner);
        let now = Instant::now();
        let (timeout, max) = (g.config.group_timeout, g.config.max_members);
        let group = g.groups.entry(app).or_default();
        group.retain(|_, m| now.duration_since(m.last_instant) < timeout);
        let n = group.len();
        match group.get_mut(ingress) {
            Some(m) => {
                m.last = Utc::now();
                m.last_instant = now;
                m.requests += 1;
                if !rtt.is_empty() {
                    m.rtt = rtt.clone();
                }
            }
            None if n >= max => {
                return Err(RpcError::application(
                    ErrorTag::ResourceDenied,
                    format!("the group of application {app} has {n} ingress routers, its max-group-members"),
                ))
            }
            None => {
                group.insert(
                    ingress.to_owned(),
                    Member { joined: Utc::now(), last: Utc::now(), last_instant: now, requests: 1, rtt: rtt.clone() },
                );
            }
        }
        Ok(())
    }

    /// Records `value` as the users' feedback on the last complete interval of a site.
    pub fn feedback(&self, app: IpAddr, site: &str, value: f64, start: Option<&str>) -> Result<(), RpcError> {
        let mut g = lock(&self.inner);
        let m = g.meters.get_mut(&(app, site.to_owned())).ok_or_else(|| {
            RpcError::application(
                ErrorTag::InvalidValue,
                format!("application {app} has no site '{site}' in ip-metrics"),
            )
            .with_bad_element("site-id")
        })?;
        let Some(last) = m.last else {
            return Err(RpcError::application(
                ErrorTag::OperationFailed,
                format!("site '{site}' of {app} has no complete measurement interval to give feedback on yet"),
            ));
        };
        if let Some(s) = start {
            let want = chrono::DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).ok();
            if want.is_none_or(|t| (t - last.start).num_milliseconds().abs() > 0) {
                return Err(RpcError::application(
                    ErrorTag::OperationFailed,
                    format!(
                        "the last complete interval of site '{site}' started at {}, not {s}",
                        crate::datastore::tree::yang_time(last.start)
                    ),
                ));
            }
        }
        m.feedback = Some(value);
        Ok(())
    }

    /// The learner's fit, its sample count and whether the Load Index uses it.
    pub fn learning(&self) -> (Option<learn::Fit>, u64, bool) {
        let g = lock(&self.inner);
        let in_use = g.config.learning.is_some_and(|(min, _)| g.learner.samples >= min) && g.fit.is_some();
        (g.fit, g.learner.samples, in_use)
    }

    /// Pushes the on-change objects (`state::objects`) that changed since the last push, and
    /// the deletion of those that are gone, to on-change subscriptions. Called at each
    /// interval boundary (measurements, rankings, the fit, expired group members) and after
    /// a join. Nothing is built while nobody listens.
    pub fn publish(&self) {
        use crate::engine::changes::{ChangeSet, StateChange};
        let Some(tap) = &self.changes else { return };
        if tap.receiver_count() == 0 {
            // A subscriber that comes later starts from a full snapshot: forget what was
            // pushed so that every object is compared afresh.
            lock(&self.published).clear();
            return;
        }
        // Computed, compared and sent under `published`, so that two publishers (the interval
        // task, a join) cannot send an older snapshot after a newer one.
        let mut published = lock(&self.published);
        let now: HashMap<String, Vec<(String, String)>> = state::objects(self).into_iter().collect();
        let mut changes: Vec<StateChange> = now
            .iter()
            .filter(|(p, l)| published.get(*p) != Some(*l))
            .map(|(p, l)| StateChange::Subtree { path: p.clone(), leaves: Some(l.clone()) })
            .collect();
        changes.extend(
            published
                .keys()
                .filter(|p| !now.contains_key(*p))
                .map(|p| StateChange::Subtree { path: p.clone(), leaves: None }),
        );
        *published = now;
        if !changes.is_empty() {
            let _ = tap.send(Arc::new(ChangeSet { started: tokio::time::Instant::now(), changes }));
        }
    }

    /// The members of `app`'s group now (the expired ones removed).
    pub fn members(&self, app: IpAddr) -> Vec<(String, Member, Duration)> {
        let mut g = lock(&self.inner);
        let now = Instant::now();
        let timeout = g.config.group_timeout;
        let Some(group) = g.groups.get_mut(&app) else { return Vec::new() };
        group.retain(|_, m| now.duration_since(m.last_instant) < timeout);
        group
            .iter()
            .map(|(k, m)| (k.clone(), m.clone(), timeout.saturating_sub(now.duration_since(m.last_instant))))
            .collect()
    }
}

/// Sockets bound in prepare for apply.
#[derive(Default)]
pub struct Sockets {
    collector: Option<std::net::UdpSocket>,
    reflector: Option<std::net::UdpSocket>,
}

/// One UDP listener: the address asked for, the one bound, and its task.
#[derive(Default)]
struct Listener(Mutex<Option<(SocketAddr, SocketAddr, tokio::task::JoinHandle<()>)>>);

impl Listener {
    fn bound(&self) -> Option<SocketAddr> {
        lock(&self.0).as_ref().map(|(_, b, _)| *b)
    }

    fn bind(&self, want: Option<SocketAddr>, what: &str) -> Result<Option<std::net::UdpSocket>, String> {
        let Some(want) = want else { return Ok(None) };
        if lock(&self.0).as_ref().is_some_and(|(w, _, _)| *w == want) {
            return Ok(None);
        }
        let s = std::net::UdpSocket::bind(want).map_err(|e| format!("{what}: cannot listen on UDP {want}: {e}"))?;
        s.set_nonblocking(true).map_err(|e| format!("{what}: {e}"))?;
        Ok(Some(s))
    }

    fn apply(
        &self,
        want: Option<SocketAddr>,
        socket: Option<std::net::UdpSocket>,
        what: &str,
        start: impl FnOnce(tokio::net::UdpSocket) -> tokio::task::JoinHandle<()>,
    ) {
        let mut slot = lock(&self.0);
        if want.is_none() || socket.is_some() {
            if let Some((_, _, task)) = slot.take() {
                task.abort();
            }
        }
        let (Some(want), Some(s)) = (want, socket) else { return };
        let sock = match tokio::net::UdpSocket::from_std(s) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("{what}: {e}");
                return;
            }
        };
        let bound = sock.local_addr().unwrap_or(want);
        tracing::info!("{what} listening on UDP {bound}");
        *slot = Some((want, bound, start(sock)));
    }
}

/// An ingress router in an Application Bound Group.
#[derive(Clone, Debug)]
pub struct Member {
    pub joined: DateTime<Utc>,
    pub last: DateTime<Utc>,
    last_instant: Instant,
    pub requests: u64,
    pub rtt: HashMap<IpAddr, u32>,
}

/// The STAMP session-sender: every A-ER of every site, each on its interval.
async fn send_probes(ipm: std::sync::Weak<Ipm>) {
    let sock = match tokio::net::UdpSocket::bind("[::]:0").await {
        Ok(s) => s,
        Err(_) => match tokio::net::UdpSocket::bind("0.0.0.0:0").await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("STAMP session-sender: no UDP socket: {e}");
                return;
            }
        },
    };
    let v6 = sock.local_addr().is_ok_and(|a| a.is_ipv6());
    let mut buf = vec![0u8; 2048];
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let Ok((n, from)) = r else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Some(i) = ipm.upgrade() else { return };
                let Some(c) = lock(&i.inner).config.sender.clone() else { continue };
                lock(&i.sender).reflected(from.ip().to_canonical(), &buf[..n], &c, Instant::now());
            }
            _ = tick.tick() => {
                let Some(i) = ipm.upgrade() else { return };
                let (c, targets) = {
                    let g = lock(&i.inner);
                    let Some(c) = g.config.sender.clone() else { continue };
                    let mut t: Vec<IpAddr> = g.config.applications.iter().flat_map(|a| a.sites.iter().flat_map(|s| s.a_ers.iter().copied())).collect();
                    t.sort();
                    t.dedup();
                    (c, t)
                };
                let due = lock(&i.sender).due(&targets, &c, Instant::now());
                drop(i);
                for (a, p) in due {
                    let _ = sock.send_to(&p, stamp::mapped(a, c.port, v6)).await;
                }
            }
        }
    }
}

impl Inner {
    /// Adds one flow to the sites of its exporter whose server it goes to or comes from.
    fn count(&mut self, exporter: IpAddr, f: &FlowCount) -> bool {
        let mut any = false;
        let to = Counts { to_packets: f.packets, to_bytes: f.octets, ..Default::default() };
        let from = Counts { from_packets: f.packets, from_bytes: f.octets, ..Default::default() };
        for (server, c) in [(f.dst.to_canonical(), to), (f.src.to_canonical(), from)] {
            let Some(keys) = self.index.get(&(exporter, server)) else { continue };
            for k in keys {
                if let Some(m) = self.meters.get_mut(k) {
                    m.current.add(&c);
                    m.total.add(&c);
                    any = true;
                }
            }
        }
        any
    }
}

fn history_cap(c: &IpmConfig) -> usize {
    let n = c.estimate.window.as_secs().div_ceil(c.interval.as_secs().max(1));
    (n as usize).clamp(1, MAX_HISTORY)
}

/// A message the collector did not take: an audit record per source and window.
fn refused(from: SocketAddr, reason: &str) {
    crate::mgmt::audit::event(crate::mgmt::audit::Category::InputRefused)
        .outcome("failure")
        .source(from)
        .transport("ipfix")
        .field("reason", reason)
        .emit_aggregated(format!("ipfix/{}", from.ip()));
}

async fn collect(ipm: std::sync::Weak<Ipm>, sock: tokio::net::UdpSocket) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("ip-metrics/collector: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(ipm) = ipm.upgrade() else { return };
        ipm.receive(from, &buf[..n]);
    }
}

/// Closes a measurement interval at each boundary.
async fn intervals(ipm: std::sync::Weak<Ipm>, reconfigured: Arc<tokio::sync::Notify>) {
    loop {
        let due = {
            let Some(i) = ipm.upgrade() else { return };
            let g = lock(&i.inner);
            g.interval_start.map(|(t, _)| t + g.config.interval)
        };
        let notified = reconfigured.notified();
        match due {
            Some(due) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(due.into()) => {
                        let Some(i) = ipm.upgrade() else { return };
                        i.roll(Instant::now());
                        i.publish();
                    }
                    _ = notified => {}
                }
            }
            None => notified.await,
        }
    }
}

/// Renders a Load or Capacity Index as YANG `index-value` (decimal64, 3 fraction digits),
/// saturating at the type's range.
pub fn index_value(v: f64) -> String {
    decimal(v, 3)
}

/// `v` as a YANG decimal64 with `digits` fraction digits in canonical form (no trailing
/// zero but one), clamped to 0 and the type's largest value.
pub fn decimal(v: f64, digits: u32) -> String {
    let scale = 10f64.powi(digits as i32);
    let max = i64::MAX as f64 / scale;
    let text = if !v.is_finite() || v >= max {
        let s = i64::MAX.to_string();
        let (int, frac) = s.split_at(s.len() - digits as usize);
        format!("{int}.{frac}")
    } else {
        format!("{:.*}", digits as usize, v.max(0.0))
    };
    let t = text.trim_end_matches('0');
    if t.ends_with('.') {
        format!("{t}0")
    } else {
        t.to_owned()
    }
}

/// Sites and their preference per application (for a flow group), in configuration order.
pub fn preferences(c: &IpmConfig, app: IpAddr, group: Option<&str>) -> BTreeMap<String, u32> {
    let Some(a) = c.applications.iter().find(|a| a.id == app) else { return BTreeMap::new() };
    let g = group.and_then(|g| a.groups.iter().find(|x| x.name == g));
    a.sites
        .iter()
        .map(|s| (s.id.clone(), g.and_then(|g| g.preferences.get(&s.id).copied()).unwrap_or(s.preference)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed000_3_2_load_index_is_the_weighted_sum() {
        let c = Counts { to_packets: 10, from_packets: 8, to_bytes: 1500, from_bytes: 12000 };
        assert_eq!(c.load_index(&[0.25; 4]), 0.25 * (10.0 + 8.0 + 1500.0 + 12000.0));
        assert_eq!(c.load_index(&[1.0, 0.0, 0.0, 0.0]), 10.0);
        assert_eq!(index_value(3379.5), "3379.5");
        assert_eq!(index_value(10.0), "10.0");
        assert_eq!(index_value(0.1 * 5.0 + 0.2 * 3.0 + 0.3 * 640.0 + 0.4 * 3084.0), "1426.7");
        assert_eq!(index_value(1e30), "9223372036854775.807");
        assert_eq!(decimal(1.0 / 3.0, 6), "0.333333");
        assert_eq!(decimal(f64::INFINITY, 6), "9223372036854.775807");
    }

    #[test]
    fn seed000_3_3_capacity_estimate_is_a_percentile_of_the_history() {
        let mut m = Meter::default();
        assert_eq!(m.estimate(90, 1), None);
        m.history.extend((1..=10).map(|v| v as f64 * 100.0));
        assert_eq!(m.estimate(90, 11), None);
        assert_eq!(m.estimate(90, 10), Some(900.0));
        assert_eq!(m.estimate(100, 10), Some(1000.0));
        assert_eq!(m.estimate(50, 10), Some(500.0));
        assert_eq!(m.estimate(1, 10), Some(100.0));
        m.history = [0.0, 0.0].into();
        assert_eq!(m.estimate(90, 1), Some(1.0));
    }
}

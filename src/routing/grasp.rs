//! GRASP (RFC 8990) for the objective `CATS:ServiceMetrics` (seed 004, Protocol Adapter):
//! the site's metric set flooded (M_FLOOD, section 2.5.6.2) on change, at most every
//! `min-flood-interval`, and on a heartbeat, over UDP to configured peers and the
//! ALL_GRASP_NEIGHBORS group of an interface; synchronization requests (M_REQ_SYN, section
//! 2.5.6.1) answered with M_SYNCH on a TCP listener. Not a full GRASP node: no relaying,
//! discovery or negotiation (docs/routing-protocols.md).
//!
//! Messages are CBOR arrays (section 2.8, CDDL in section 4) written and read with ciborium.
//! The objective value is a map (docs/routing-protocols.md, "GRASP"):
//! `{ "site-id": text, "csma-id": text, "generation": uint, "part": [uint, uint],
//!    "services": [* { "cs-id", "gas", "computing-time", "health", "sci-count",
//!    ? "cost", ? "reputation", ? "security-label" }] }`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ciborium::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{broadcast, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use yang2::data::{Data, DataTree};

use crate::cps::session::lock;
pub use crate::cps::session::Identity;
use crate::datastore::tree::set;
use crate::datastore::{ConfigConsumer, StateProvider, Transaction};
use crate::engine::model::{CsId, SiteMetrics};
use crate::engine::update::{Advertisement, AdvertisementKind};
use crate::error::RpcError;

pub const OBJECTIVE: &str = "CATS:ServiceMetrics";
pub const M_END: u64 = 6;
pub const M_REQ_SYN: u64 = 4;
pub const M_SYNCH: u64 = 8;
pub const M_FLOOD: u64 = 9;
pub const M_INVALID: u64 = 99;
pub const O_DECLINE: u64 = 102;
pub const O_IPV6_LOCATOR: u64 = 103;
pub const O_IPV4_LOCATOR: u64 = 104;
pub const IPPROTO_TCP: u64 = 6;
/// objective-flags (section 2.10): F_SYNCH (bit 2), valid for synchronization.
pub const F_SYNCH: u64 = 1 << 2;
/// ALL_GRASP_NEIGHBORS (section 2.6).
pub const ALL_GRASP_NEIGHBORS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x13);
pub const GRASP_PORT: u16 = 7017;
/// How long a synchronization connection may stay idle, and how many run at once.
const SYNCH_TIMEOUT: Duration = Duration::from_secs(10);
const SYNCH_CONNECTIONS: usize = 16;
const SYNCH_PER_SOURCE: usize = 4;

pub const GRASP: &str = "/cats-sma:cats-sma/cats-sma-routing:routing/grasp";
/// The audience of the full snapshot the GRASP channel asks for (see `bgp::AUDIENCE`).
pub const AUDIENCE: &str = "\u{1}grasp";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraspConfig {
    pub listen: Option<SocketAddr>,
    pub multicast_interface: Option<String>,
    pub peers: Vec<SocketAddr>,
    pub flood_interval: Duration,
    pub min_flood_interval: Duration,
    pub flood_ttl: u32,
    pub loop_count: u8,
    pub max_message: usize,
}

pub fn grasp_config(t: &DataTree<'static>) -> Result<Option<GraspConfig>, String> {
    let Some(root) = t.find_xpath(GRASP).ok().and_then(|mut s| s.next()) else { return Ok(None) };
    let mut m = BTreeMap::new();
    let mut peers = Vec::new();
    for c in root.children() {
        if c.schema().name() == "peer" {
            let f: BTreeMap<String, String> =
                c.children().map(|x| (x.schema().name().to_owned(), x.value_canonical().unwrap_or_default())).collect();
            let a: IpAddr = f.get("address").and_then(|a| a.parse().ok()).ok_or("routing/grasp/peer: address")?;
            let p: u16 = f.get("port").and_then(|p| p.parse().ok()).ok_or("routing/grasp/peer: port")?;
            peers.push(SocketAddr::new(a, p));
        } else if let Some(v) = c.value_canonical() {
            m.insert(c.schema().name().to_owned(), v);
        }
    }
    let num = |k: &str, d: u64| -> Result<u64, String> {
        m.get(k).map_or(Ok(d), |v| v.parse().map_err(|_| format!("routing/grasp/{k}: '{v}'")))
    };
    let listen = match m.get("listen-address") {
        Some(a) => Some(SocketAddr::new(
            a.parse().map_err(|_| format!("routing/grasp/listen-address: '{a}'"))?,
            num("listen-port", GRASP_PORT.into())? as u16,
        )),
        None => None,
    };
    if listen.is_some_and(|l| l.ip().is_unspecified()) {
        return Err("routing/grasp/listen-address: a wildcard address cannot be the floods' locator; give the \
                    address peers reach the agent at"
            .into());
    }
    let multicast_interface = m.get("multicast-interface").cloned();
    if let Some(i) = &multicast_interface {
        interface_index(i)?;
    }
    Ok(Some(GraspConfig {
        listen,
        multicast_interface,
        peers,
        flood_interval: Duration::from_millis(num("flood-interval", 60_000)?),
        min_flood_interval: Duration::from_millis(num("min-flood-interval", 1000)?),
        flood_ttl: num("flood-ttl", 180_000)?.min(u32::MAX as u64) as u32,
        loop_count: num("loop-count", 6)?.min(255) as u8,
        max_message: num("max-message-size", 2048)? as usize,
    }))
}

fn interface_index(name: &str) -> Result<u32, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("routing/grasp/multicast-interface: '{name}'"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call;
    // if_nametoindex only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(format!("routing/grasp/multicast-interface: no interface '{name}'"));
    }
    Ok(i)
}

/// Counters (YANG `counters`).
#[derive(Default)]
pub struct Counters {
    pub floods_sent: AtomicU64,
    pub flood_errors: AtomicU64,
    pub synch_answered: AtomicU64,
    pub declined: AtomicU64,
    pub invalid: AtomicU64,
}

/// The site as last advertised, for floods and synchronization answers.
#[derive(Default)]
struct View {
    services: BTreeMap<CsId, SiteMetrics>,
    generation: u64,
}

impl View {
    fn fold(&mut self, ad: &Advertisement) {
        if ad.kind == AdvertisementKind::Full {
            self.services.clear();
        }
        for s in &ad.sites {
            self.services.insert(s.cs_id.clone(), s.clone());
        }
        for w in &ad.withdrawn {
            self.services.remove(w);
        }
        self.generation = self.generation.max(ad.seq);
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn service(s: &SiteMetrics) -> Value {
    let mut m = vec![
        (text("cs-id"), text(&s.cs_id)),
        (text("gas"), Value::Integer(s.gas.into())),
        (text("computing-time"), Value::Integer(s.computing_time_ms.into())),
        (text("health"), text(s.health.yang())),
        (text("sci-count"), Value::Integer(s.sci_count.into())),
    ];
    if let Some(c) = s.cost {
        m.push((text("cost"), Value::Integer(c.into())));
    }
    if let Some(r) = s.reputation {
        m.push((text("reputation"), Value::Integer(r.into())));
    }
    if let Some(l) = s.security_label {
        m.push((text("security-label"), Value::Integer(l.into())));
    }
    Value::Map(m)
}

/// The objective option (section 2.10): `[name, flags, loop-count, value]`.
fn objective(loop_count: u8, value: Value) -> Value {
    Value::Array(vec![text(OBJECTIVE), Value::Integer(F_SYNCH.into()), Value::Integer(loop_count.into()), value])
}

fn metric_set(id: &Identity, generation: u64, part: (usize, usize), services: Vec<Value>) -> Value {
    Value::Map(vec![
        (text("site-id"), text(&id.site_id)),
        (text("csma-id"), text(&id.csma_id)),
        (text("generation"), Value::Integer(generation.into())),
        (text("part"), Value::Array(vec![Value::Integer(part.0.into()), Value::Integer(part.1.into())])),
        (text("services"), Value::Array(services)),
    ])
}

fn ip_bytes(a: IpAddr) -> Value {
    match a {
        IpAddr::V4(v4) => Value::Bytes(v4.octets().to_vec()),
        IpAddr::V6(v6) => Value::Bytes(v6.octets().to_vec()),
    }
}

fn locator(l: Option<SocketAddr>) -> Value {
    match l {
        Some(a) => Value::Array(vec![
            Value::Integer(if a.is_ipv4() { O_IPV4_LOCATOR } else { O_IPV6_LOCATOR }.into()),
            ip_bytes(a.ip()),
            Value::Integer(IPPROTO_TCP.into()),
            Value::Integer(a.port().into()),
        ]),
        None => Value::Array(vec![]),
    }
}

pub fn to_cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing a Value into a Vec cannot fail.
    let _ = ciborium::into_writer(v, &mut out);
    out
}

fn session_id() -> Value {
    Value::Integer(rand::random::<u32>().into())
}

/// The M_FLOOD messages carrying the whole set: as few as fit in `max` octets each (a
/// service alone too big for a message is left out and logged).
pub fn floods(
    id: &Identity,
    initiator: IpAddr,
    generation: u64,
    services: &[SiteMetrics],
    c: &GraspConfig,
    locator_addr: Option<SocketAddr>,
) -> Vec<Vec<u8>> {
    let build = |part: (usize, usize), chunk: Vec<Value>, sid: Value| {
        to_cbor(&Value::Array(vec![
            Value::Integer(M_FLOOD.into()),
            sid,
            ip_bytes(initiator),
            Value::Integer(c.flood_ttl.into()),
            Value::Array(vec![objective(c.loop_count, metric_set(id, generation, part, chunk)), locator(locator_addr)]),
        ]))
    };
    // Group the services into chunks that fit: the header measured at its largest (the
    // longest session-id and part numbers), plus room for the services array's own header.
    let overhead = build((u32::MAX as usize, u32::MAX as usize), vec![], Value::Integer(u32::MAX.into())).len() + 8;
    let mut chunks: Vec<Vec<Value>> = vec![vec![]];
    let mut size = overhead;
    for s in services {
        let v = service(s);
        let n = to_cbor(&v).len();
        if overhead + n > c.max_message {
            tracing::warn!(cs_id = %s.cs_id, "GRASP: one service's metrics exceed max-message-size: not flooded");
            continue;
        }
        if size + n > c.max_message {
            chunks.push(vec![]);
            size = overhead;
        }
        size += n;
        chunks.last_mut().expect("chunks starts non-empty").push(v);
    }
    let total = chunks.len();
    chunks.into_iter().enumerate().map(|(i, chunk)| build((i + 1, total), chunk, session_id())).collect()
}

/// The answer to one message on the synchronization listener (section 2.5.6.1): M_SYNCH
/// with the whole set for our objective, M_END with O_DECLINE for another one, M_INVALID
/// for anything else. Also the `grasp_message` fuzz target's entry point.
pub fn answer(
    msg: &[u8],
    id: &Identity,
    generation: u64,
    services: &[SiteMetrics],
    loop_count: u8,
    counters: &Counters,
) -> Vec<u8> {
    let invalid = |sid: Value| {
        counters.invalid.fetch_add(1, Ordering::Relaxed);
        to_cbor(&Value::Array(vec![Value::Integer(M_INVALID.into()), sid]))
    };
    let v: Value = match ciborium::de::from_reader_with_recursion_limit(msg, 32) {
        Ok(v) => v,
        Err(_) => return invalid(Value::Integer(0.into())),
    };
    let Value::Array(items) = v else { return invalid(Value::Integer(0.into())) };
    let sid = match items.get(1) {
        Some(Value::Integer(i)) if u32::try_from(*i).is_ok() => Value::Integer(*i),
        _ => return invalid(Value::Integer(0.into())),
    };
    let is_req = matches!(items.first(), Some(Value::Integer(t)) if u64::try_from(*t) == Ok(M_REQ_SYN));
    if !is_req || items.len() != 3 {
        return invalid(sid);
    }
    let Some(Value::Array(obj)) = items.get(2) else { return invalid(sid) };
    let Some(Value::Text(name)) = obj.first() else { return invalid(sid) };
    if name != OBJECTIVE {
        counters.declined.fetch_add(1, Ordering::Relaxed);
        return to_cbor(&Value::Array(vec![
            Value::Integer(M_END.into()),
            sid,
            Value::Array(vec![Value::Integer(O_DECLINE.into()), text("objective not supported")]),
        ]));
    }
    counters.synch_answered.fetch_add(1, Ordering::Relaxed);
    let all: Vec<Value> = services.iter().map(service).collect();
    to_cbor(&Value::Array(vec![
        Value::Integer(M_SYNCH.into()),
        sid,
        objective(loop_count, metric_set(id, generation, (1, 1), all)),
    ]))
}

/// What the GRASP channel needs from the rest of the agent.
#[derive(Clone)]
pub struct Hooks {
    pub subscribe: Arc<dyn Fn() -> broadcast::Receiver<Arc<Advertisement>> + Send + Sync>,
    pub resync: Arc<dyn Fn() + Send + Sync>,
    pub identity: Arc<dyn Fn() -> Identity + Send + Sync>,
}

struct Running {
    config: GraspConfig,
    listener: Option<Arc<TcpListener>>,
    listening: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The GRASP channel: stopped until configured.
pub struct Grasp {
    hooks: Hooks,
    running: Mutex<Option<Running>>,
    pub counters: Arc<Counters>,
}

impl Grasp {
    pub fn new(hooks: Hooks) -> Arc<Grasp> {
        Arc::new(Grasp { hooks, running: Mutex::new(None), counters: Arc::default() })
    }

    /// Binds the sockets a configuration needs (so a commit that cannot have them fails).
    fn bind(&self, c: &GraspConfig) -> Result<Sockets, String> {
        let running = lock(&self.running);
        let same = running.as_ref().is_some_and(|r| r.config.listen == c.listen && r.listener.is_some());
        let tcp = match c.listen {
            Some(a) if !same => {
                Some(super::bind_listener(a).map_err(|e| format!("routing/grasp: listen on {a}: {e}"))?)
            }
            _ => None,
        };
        Ok(Sockets { tcp, keep: same })
    }

    fn apply(&self, c: Option<GraspConfig>, s: Option<Sockets>) {
        let mut guard = lock(&self.running);
        let old = guard.take();
        let mut kept = None;
        if let Some(r) = old {
            let _ = r.stop.send(true);
            for t in r.tasks {
                t.abort();
            }
            if s.as_ref().is_some_and(|s| s.keep) {
                kept = r.listener;
            }
        }
        let Some(c) = c else { return };
        let (stop, stop_rx) = watch::channel(false);
        let view = Arc::new(Mutex::new(View::default()));
        let mut tasks = Vec::new();
        let mut listening = None;
        let listener = match s.and_then(|s| s.tcp) {
            Some(l) => TcpListener::from_std(l).ok().map(Arc::new),
            // The same address as before: the running listener is kept.
            None => kept,
        };
        if let Some(l) = &listener {
            listening = l.local_addr().ok();
            tasks.push(tokio::spawn(synch_task(
                l.clone(),
                view.clone(),
                self.hooks.clone(),
                c.loop_count,
                c.max_message,
                self.counters.clone(),
                stop_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(flood_task(
            c.clone(),
            listening,
            view,
            self.hooks.clone(),
            (self.hooks.subscribe)(),
            self.counters.clone(),
            stop_rx,
        )));
        (self.hooks.resync)();
        tracing::info!(listening = ?listening, peers = c.peers.len(), "GRASP objective {OBJECTIVE} started");
        *guard = Some(Running { config: c, listener, listening, stop, tasks });
    }

    pub fn listening(&self) -> Option<Option<SocketAddr>> {
        lock(&self.running).as_ref().map(|r| r.listening)
    }

    pub fn shutdown(&self) {
        self.apply(None, None);
    }
}

struct Sockets {
    tcp: Option<std::net::TcpListener>,
    /// The running listener's address is kept (it is re-bound after the old one closes).
    keep: bool,
}

async fn flood_task(
    c: GraspConfig,
    listening: Option<SocketAddr>,
    view: Arc<Mutex<View>>,
    hooks: Hooks,
    mut ads: broadcast::Receiver<Arc<Advertisement>>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut dests = c.peers.clone();
    if let Some(i) = c.multicast_interface.as_deref().and_then(|i| interface_index(i).ok()) {
        dests.push(SocketAddr::V6(SocketAddrV6::new(ALL_GRASP_NEIGHBORS, GRASP_PORT, 0, i)));
    }
    // One socket per address family the destinations use, from the listener's address
    // when it is of that family.
    let mut socks: Vec<UdpSocket> = Vec::new();
    for v6 in [false, true] {
        if !dests.iter().any(|d| d.is_ipv6() == v6) {
            continue;
        }
        let ip: IpAddr = match listening.map(|l| l.ip()).filter(|ip| ip.is_ipv6() == v6) {
            Some(ip) => ip,
            None if v6 => Ipv6Addr::UNSPECIFIED.into(),
            None => std::net::Ipv4Addr::UNSPECIFIED.into(),
        };
        match UdpSocket::bind(SocketAddr::new(ip, 0)).await {
            Ok(s) => socks.push(s),
            Err(e) => tracing::error!("GRASP: UDP socket on {ip}: {e}; floods to that family fail"),
        }
    }
    // The initiator (RFC 8990 section 2.5.6.2): the listener's address, else the first
    // socket's; `listen-address` is never a wildcard (refused at commit).
    let initiator =
        match listening.map(|l| l.ip()).or_else(|| socks.first().and_then(|s| s.local_addr().ok()).map(|a| a.ip())) {
            Some(ip) if !ip.is_unspecified() => ip,
            _ => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
    let mut dirty = false;
    let mut last_flood: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let heartbeat_due = last_flood.is_none_or(|t| now >= t + c.flood_interval);
        let change_due = dirty && last_flood.is_none_or(|t| now >= t + c.min_flood_interval);
        let have_view = lock(&view).generation > 0;
        if have_view && (heartbeat_due || change_due) {
            let (generation, services) = {
                let v = lock(&view);
                (v.generation, v.services.values().cloned().collect::<Vec<_>>())
            };
            let id = (hooks.identity)();
            for m in floods(&id, initiator, generation, &services, &c, listening) {
                for d in &dests {
                    let Some(sock) = socks.iter().find(|s| s.local_addr().is_ok_and(|a| a.is_ipv6() == d.is_ipv6()))
                    else {
                        counters.flood_errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match sock.send_to(&m, d).await {
                        Ok(_) => counters.floods_sent.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            tracing::debug!(to = %d, "GRASP flood: {e}");
                            counters.flood_errors.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
            dirty = false;
            last_flood = Some(now);
        }
        let next = match last_flood {
            Some(t) if dirty => (t + c.min_flood_interval).min(t + c.flood_interval),
            Some(t) => t + c.flood_interval,
            None => now + Duration::from_secs(3600),
        };
        tokio::select! {
            r = ads.recv() => match r {
                Ok(ad) => {
                    // Flooded when the set changed; a heartbeat that repeats it waits for
                    // the flood-interval.
                    let mut v = lock(&view);
                    let before = v.services.clone();
                    v.fold(&ad);
                    dirty |= v.services != before;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => (hooks.resync)(),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sleep_until(next) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn synch_task(
    l: Arc<TcpListener>,
    view: Arc<Mutex<View>>,
    hooks: Hooks,
    loop_count: u8,
    max: usize,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(SYNCH_CONNECTIONS));
    let per_source: Arc<Mutex<BTreeMap<IpAddr, usize>>> = Arc::default();
    loop {
        let (s, from) = tokio::select! {
            c = super::next_connection(&l, "GRASP") => c,
            _ = stop.changed() => return,
        };
        // At most SYNCH_PER_SOURCE connections from one address, SYNCH_CONNECTIONS in all.
        {
            let mut p = lock(&per_source);
            let n = p.entry(from.ip()).or_default();
            if *n >= SYNCH_PER_SOURCE {
                tracing::debug!(from = %from, "GRASP: too many synchronization connections from one address: closed");
                continue;
            }
            *n += 1;
        }
        let release = {
            let per_source = per_source.clone();
            move || {
                let mut p = lock(&per_source);
                if let Some(n) = p.get_mut(&from.ip()) {
                    *n -= 1;
                    if *n == 0 {
                        p.remove(&from.ip());
                    }
                }
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(from = %from, "GRASP: too many synchronization connections: closed");
            release();
            continue;
        };
        let (view, hooks, counters, mut stop) = (view.clone(), hooks.clone(), counters.clone(), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = synch_one(s, &view, &hooks, loop_count, max, &counters) => {}
                _ = stop.changed() => {}
            }
            release();
        });
    }
}

/// One synchronization connection: requests answered until the peer closes it. A message
/// ends where a whole CBOR item does; one above `max` octets ends the connection.
async fn synch_one(
    mut s: TcpStream,
    view: &Mutex<View>,
    hooks: &Hooks,
    loop_count: u8,
    max: usize,
    counters: &Counters,
) {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 2048];
    // When the message being read began: one must be whole within SYNCH_TIMEOUT.
    let mut started: Option<tokio::time::Instant> = None;
    loop {
        if started.is_some_and(|t| t.elapsed() > SYNCH_TIMEOUT) {
            counters.invalid.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // An idle connection is closed after SYNCH_TIMEOUT (one that keeps asking stays).
        let n = match tokio::time::timeout(SYNCH_TIMEOUT, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
            Err(_) => {
                if !buf.is_empty() {
                    counters.invalid.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        started.get_or_insert_with(tokio::time::Instant::now);
        while let Some(len) = cbor_item_len(&buf) {
            let (generation, services) = {
                let v = lock(view);
                (v.generation, v.services.values().cloned().collect::<Vec<_>>())
            };
            let reply = answer(&buf[..len], &(hooks.identity)(), generation, &services, loop_count, counters);
            buf.drain(..len);
            started = if buf.is_empty() { None } else { Some(tokio::time::Instant::now()) };
            if s.write_all(&reply).await.is_err() {
                return;
            }
        }
        if buf.len() > max {
            counters.invalid.fetch_add(1, Ordering::Relaxed);
            let _ = s
                .write_all(&to_cbor(&Value::Array(vec![Value::Integer(M_INVALID.into()), Value::Integer(0.into())])))
                .await;
            return;
        }
    }
}

/// The length of the first complete CBOR item in `b` (None: incomplete). Malformed input
/// counts as complete so that it is answered with M_INVALID.
pub fn cbor_item_len(b: &[u8]) -> Option<usize> {
    let mut r = b;
    match ciborium::de::from_reader_with_recursion_limit::<Value, _>(&mut r, 32) {
        Ok(_) => Some(b.len() - r.len()),
        Err(ciborium::de::Error::Io(_)) => None,
        Err(_) => Some(b.len()),
    }
}

/// Feeds commits to the GRASP channel.
pub struct GraspConsumer {
    pub grasp: Arc<Grasp>,
    pending: Mutex<Option<(Option<GraspConfig>, Option<Sockets>)>>,
}

impl GraspConsumer {
    pub fn load(grasp: Arc<Grasp>, t: &DataTree<'static>) -> GraspConsumer {
        match grasp_config(t).and_then(|c| Ok((c.clone(), c.map(|c| grasp.bind(&c)).transpose()?))) {
            Ok((c, s)) => grasp.apply(c, s),
            Err(e) => tracing::error!("routing/grasp in running is not usable, left out: {e}"),
        }
        GraspConsumer { grasp, pending: Mutex::new(None) }
    }
}

impl ConfigConsumer for GraspConsumer {
    fn name(&self) -> &str {
        "GRASP"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if tx.changes_under(GRASP).next().is_none() {
            return Ok(());
        }
        let c = grasp_config(tx.config)?;
        let s = c.as_ref().map(|c| self.grasp.bind(c)).transpose()?;
        *lock(&self.pending) = Some((c, s));
        Ok(())
    }

    fn abort(&self, _tx: &Transaction<'_>) {
        lock(&self.pending).take();
    }

    fn apply(&self, _tx: &Transaction<'_>) {
        let Some((c, s)) = lock(&self.pending).take() else { return };
        self.grasp.apply(c, s);
    }
}

pub struct GraspState {
    pub grasp: Arc<Grasp>,
}

impl StateProvider for GraspState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let Some(listening) = self.grasp.listening() else { return Ok(()) };
        if let Some(a) = listening {
            set(tree, &format!("{GRASP}/listening-port"), Some(&a.port().to_string()))?;
        }
        let c = &self.grasp.counters;
        for (name, v) in [
            ("floods-sent", &c.floods_sent),
            ("flood-errors", &c.flood_errors),
            ("synch-answered", &c.synch_answered),
            ("declined", &c.declined),
            ("invalid", &c.invalid),
        ] {
            set(tree, &format!("{GRASP}/counters/{name}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8990_hostile_cbor_lengths_do_not_allocate_or_panic() {
        let c = Counters::default();
        let id = Identity { csma_id: String::new(), site_id: String::new() };
        for hostile in [
            &[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..], // array of 2^64-1 items
            &[0x5b, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x01][..], // 64 GiB byte string
            &[0x7b, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x41][..], // 64 GiB text
            &[0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..], // map of 2^64-1 pairs
            &[0x9f; 64][..],                                             // deep indefinite arrays
        ] {
            let len = cbor_item_len(hostile);
            if let Some(len) = len {
                let reply = answer(&hostile[..len], &id, 1, &[], 6, &c);
                assert_eq!(reply[..2], [0x82, 0x18], "M_INVALID");
            }
        }
    }
}

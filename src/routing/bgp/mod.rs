//! The BGP-LS speaker (seed 004, Protocol Adapter, distributed model): the update
//! controller's advertisements folded into one Adj-RIB-Out (`rib.rs`: pacing, damping),
//! published to one session task per neighbor (`session.rs`), encoded with NetGauze
//! (`encode.rs`); `config.rs` takes commits in, `state.rs` renders the operational state.
//!
//! A change of the RIB's parameters (prefixes, code points, encoding, pacing, damping)
//! rebuilds the routes in place, sessions stay up; adding or removing a neighbor starts or
//! stops only its session; a change of local-as, router-id, hold time, retry times or the
//! listener restarts every session (their OPEN changes).

pub mod config;
pub mod encode;
pub mod md5;
pub mod rib;
pub mod session;
pub mod state;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use self::config::{Advertise, SessionConfig, SpeakerConfig};
use self::rib::{Published, Rib};
use self::session::{EventFn, FsmState, Neighbor, NeighborConfig, SessionParams, Stop};
use crate::cps::session::lock;
use crate::engine::update::Advertisement;

/// The audience of the full snapshot the speaker asks the update controller for (at start
/// and after falling behind): no C-PS peer can be named so (control characters are not
/// allowed in YANG strings), so C-PS sessions skip it.
pub const AUDIENCE: &str = "\u{1}bgp-ls";

/// What the speaker needs from the rest of the agent.
#[derive(Clone)]
pub struct Hooks {
    /// A new receiver of the update controller's advertisements.
    pub subscribe: Arc<dyn Fn() -> broadcast::Receiver<Arc<Advertisement>> + Send + Sync>,
    /// Ask the update controller for a full snapshot addressed to [`AUDIENCE`].
    pub resync: Arc<dyn Fn() + Send + Sync>,
    /// The site-id every route carries (agent/site-id).
    pub site_id: Arc<dyn Fn() -> String + Send + Sync>,
    /// Session up / down (the `bgp-ls-session` notification).
    pub events: Arc<EventFn>,
    /// Whether no C-PS peer is reachable (`advertise when-c-ps-unreachable`), and a watch
    /// that changes whenever a C-PS session does.
    pub cps_unreachable: Arc<dyn Fn() -> bool + Send + Sync>,
    pub cps_changed: Arc<dyn Fn() -> watch::Receiver<u64> + Send + Sync>,
}

struct NeighborTask {
    neighbor: Arc<Neighbor>,
    incoming: mpsc::Sender<TcpStream>,
    stop: watch::Sender<Option<Stop>>,
    task: JoinHandle<()>,
}

impl NeighborTask {
    fn stop(self, why: Stop) {
        // The session sends Cease on its own; abort only if it is stuck.
        let _ = self.stop.send(Some(why));
        let task = self.task;
        tokio::spawn(async move {
            let abort = task.abort_handle();
            if tokio::time::timeout(std::time::Duration::from_secs(2), task).await.is_err() {
                abort.abort();
            }
        });
    }
}

type Neighbors = Arc<Mutex<BTreeMap<IpAddr, NeighborTask>>>;

/// A running speaker.
struct Running {
    config: SpeakerConfig,
    rib: Arc<Mutex<Rib>>,
    published: watch::Receiver<Arc<Published>>,
    reconfigured: Arc<Notify>,
    /// `advertise` as configured, for the RIB task.
    advertise: watch::Sender<Advertise>,
    /// Whether the routes are advertised now (YANG `advertising`).
    advertising: watch::Receiver<bool>,
    neighbors: Neighbors,
    listener: Option<Arc<TcpListener>>,
    listening: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    hooks_events: Arc<EventFn>,
}

impl Running {
    fn session_params(&self) -> Arc<SessionParams> {
        Arc::new(session_params(&self.config.session, self.published.clone(), self.hooks_events.clone()))
    }
}

fn session_params(
    s: &SessionConfig,
    published: watch::Receiver<Arc<Published>>,
    events: Arc<EventFn>,
) -> SessionParams {
    SessionParams {
        local_as: s.local_as,
        router_id: s.router_id,
        hold_time: s.hold_time,
        retry_initial: s.retry_initial,
        retry_max: s.retry_max,
        published,
        events,
    }
}

/// The speaker: stopped until configured.
pub struct Speaker {
    hooks: Hooks,
    running: Mutex<Option<Running>>,
}

impl Speaker {
    pub fn new(hooks: Hooks) -> Arc<Speaker> {
        Arc::new(Speaker { hooks, running: Mutex::new(None) })
    }

    /// Binds the listener a configuration asks for (so a commit that cannot have it fails);
    /// None when there is none or the running one is kept (same address).
    pub fn bind(&self, c: &SpeakerConfig) -> Result<Option<std::net::TcpListener>, String> {
        let Some(addr) = c.session.listen else { return Ok(None) };
        if let Some(r) = lock(&self.running).as_ref() {
            if r.config.session.listen == Some(addr) && r.listener.is_some() {
                return Ok(None);
            }
        }
        match super::bind_listener(addr) {
            Ok(l) => Ok(Some(l)),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && lock(&self.running).as_ref().and_then(|r| r.listening).map(|a| a.port())
                        == Some(addr.port()) =>
            {
                Err(format!(
                    "routing/bgp-ls: listen on {addr}: the running listener holds port {}; change the port, or \
                     remove listen-address in one commit and set the new one in the next",
                    addr.port()
                ))
            }
            Err(e) => Err(format!("routing/bgp-ls: listen on {addr}: {e}")),
        }
    }

    /// Applies a configuration (None: stop). `listener` comes from [`Speaker::bind`].
    pub fn apply(&self, c: Option<SpeakerConfig>, listener: Option<std::net::TcpListener>) {
        let mut guard = lock(&self.running);
        let Some(c) = c else {
            if let Some(r) = guard.take() {
                stop_running(r, Stop::Shutdown);
                tracing::info!("BGP-LS speaker stopped");
            }
            return;
        };
        if let Some(r) = guard.as_mut() {
            if r.config.session == c.session && listener.is_none() {
                if r.config.rib != c.rib {
                    lock(&r.rib).reconfigure(c.rib.clone());
                    r.reconfigured.notify_one();
                }
                r.advertise.send_replace(c.advertise);
                self.apply_neighbors(r, &c.neighbors);
                r.config = c;
                return;
            }
        }
        let mut kept = None;
        if let Some(r) = guard.take() {
            if r.config.session.listen == c.session.listen {
                kept = r.listener.clone();
            }
            stop_running(r, Stop::Reconfigured);
        }
        let listener = match listener.map(TcpListener::from_std) {
            Some(Ok(l)) => Some(Arc::new(l)),
            Some(Err(e)) => {
                tracing::error!("BGP-LS listener: {e}");
                None
            }
            None => kept,
        };
        *guard = Some(self.start(c, listener));
    }

    fn start(&self, c: SpeakerConfig, listener: Option<Arc<TcpListener>>) -> Running {
        let rib = Arc::new(Mutex::new(Rib::new(c.rib.clone())));
        let (tx, published) = watch::channel(Arc::new(Published::new()));
        let (stop, stop_rx) = watch::channel(false);
        let reconfigured = Arc::new(Notify::new());
        let (advertise, advertise_rx) = watch::channel(c.advertise);
        let (advertising_tx, advertising) = watch::channel(false);
        let mut tasks = vec![tokio::spawn(rib_task(
            RibTask {
                rib: rib.clone(),
                tx,
                hooks: self.hooks.clone(),
                reconfigured: reconfigured.clone(),
                advertise: advertise_rx,
                advertising: advertising_tx,
            },
            (self.hooks.subscribe)(),
            stop_rx.clone(),
        ))];
        (self.hooks.resync)();
        let neighbors: Neighbors = Arc::new(Mutex::new(BTreeMap::new()));
        let mut listening = None;
        if let Some(l) = &listener {
            listening = l.local_addr().ok();
            tasks.push(tokio::spawn(accept_task(l.clone(), neighbors.clone(), stop_rx)));
        }
        let mut r = Running {
            config: c.clone(),
            rib,
            published,
            reconfigured,
            advertise,
            advertising,
            neighbors,
            listener,
            listening,
            stop,
            tasks,
            hooks_events: self.hooks.events.clone(),
        };
        self.apply_neighbors(&mut r, &c.neighbors);
        tracing::info!(
            local_as = c.session.local_as,
            router_id = %c.session.router_id,
            listening = ?r.listening,
            neighbors = c.neighbors.len(),
            "BGP-LS speaker started"
        );
        r
    }

    fn apply_neighbors(&self, r: &mut Running, want: &[NeighborConfig]) {
        let params = r.session_params();
        let mut map = lock(&r.neighbors);
        let keep: BTreeMap<IpAddr, &NeighborConfig> = want.iter().map(|n| (n.address, n)).collect();
        let gone: Vec<IpAddr> =
            map.iter().filter(|(a, t)| keep.get(a) != Some(&&t.neighbor.config)).map(|(a, _)| *a).collect();
        for a in gone {
            if let Some(t) = map.remove(&a) {
                if let (Some(l), Some(_)) = (&r.listener, &t.neighbor.config.md5_key) {
                    let _ = md5::set_key(l.as_ref(), a, None);
                }
                t.stop(Stop::Deconfigured);
            }
        }
        for (a, n) in keep {
            if map.contains_key(&a) {
                continue;
            }
            // RFC 2385 on the listener: a passive neighbor's connections must be signed.
            if let (Some(l), Some(k), true) = (&r.listener, &n.md5_key, n.passive) {
                if let Err(e) = md5::set_key(l.as_ref(), a, Some(&k.0)) {
                    tracing::error!(neighbor = %a, "BGP-LS: TCP MD5 key on the listener: {e}");
                }
            }
            let neighbor = Arc::new(Neighbor::new(n.clone()));
            let (incoming, incoming_rx) = mpsc::channel(1);
            let (stop, stop_rx) = watch::channel(None);
            let task = tokio::spawn(session::run(neighbor.clone(), params.clone(), incoming_rx, stop_rx));
            map.insert(a, NeighborTask { neighbor, incoming, stop, task });
        }
    }

    /// The state provider's view: neighbors, the listener's address, the RIB.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let guard = lock(&self.running);
        let r = guard.as_ref()?;
        let neighbors = lock(&r.neighbors).values().map(|t| (t.neighbor.config.clone(), t.neighbor.status())).collect();
        let advertising = *r.advertising.borrow();
        let rib = lock(&r.rib);
        let snapshot = Snapshot {
            advertising,
            listening: r.listening,
            neighbors,
            nlri: rib.states(Instant::now()),
            unmapped: rib.unmapped(),
        };
        Some(snapshot)
    }

    pub fn shutdown(&self) {
        self.apply(None, None);
    }
}

/// What `state.rs` renders.
pub struct Snapshot {
    pub advertising: bool,
    pub listening: Option<SocketAddr>,
    pub neighbors: Vec<(NeighborConfig, session::Status)>,
    pub nlri: Vec<rib::NlriState>,
    pub unmapped: usize,
}

fn stop_running(r: Running, why: Stop) {
    let _ = r.stop.send(true);
    let neighbors = std::mem::take(&mut *lock(&r.neighbors));
    for (_, t) in neighbors {
        t.stop(why);
    }
    for t in r.tasks {
        t.abort();
    }
}

struct RibTask {
    rib: Arc<Mutex<Rib>>,
    tx: watch::Sender<Arc<Published>>,
    hooks: Hooks,
    reconfigured: Arc<Notify>,
    advertise: watch::Receiver<Advertise>,
    advertising: watch::Sender<bool>,
}

/// Folds advertisements into the RIB and publishes its routes: all of them while the
/// speaker advertises, none while `advertise when-c-ps-unreachable` holds it back.
async fn rib_task(mut t: RibTask, mut ads: broadcast::Receiver<Arc<Advertisement>>, mut stop: watch::Receiver<bool>) {
    let far = || Instant::now() + std::time::Duration::from_secs(86_400);
    let mut cps = (t.hooks.cps_changed)();
    let empty = Arc::new(Published::new());
    let mut on = None;
    loop {
        let next = {
            let mut r = lock(&t.rib);
            let (changed, due) = r.step(Instant::now());
            let now_on = *t.advertise.borrow() == Advertise::Always || (t.hooks.cps_unreachable)();
            if on != Some(now_on) {
                if on.is_some() {
                    if now_on {
                        tracing::warn!(
                            "BGP-LS: no C-PS is reachable: the metrics go by BGP-LS (C-PS Failure Handling)"
                        );
                    } else {
                        tracing::info!("BGP-LS: a C-PS is reachable again: the BGP-LS routes are withdrawn");
                    }
                }
                on = Some(now_on);
                t.advertising.send_replace(now_on);
                t.tx.send_replace(if now_on { Arc::new(r.published().clone()) } else { empty.clone() });
            } else if changed && now_on {
                t.tx.send_replace(Arc::new(r.published().clone()));
            }
            due.unwrap_or_else(far)
        };
        tokio::select! {
            r = ads.recv() => match r {
                Ok(ad) => lock(&t.rib).fold(&ad, &(t.hooks.site_id)()),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "BGP-LS speaker fell behind the update controller; asking for a full snapshot");
                    (t.hooks.resync)();
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sleep_until(next) => {}
            _ = t.reconfigured.notified() => {}
            r = t.advertise.changed() => if r.is_err() { return },
            r = cps.changed() => if r.is_err() { cps = (t.hooks.cps_changed)() },
            _ = stop.changed() => return,
        }
    }
}

/// Hands each connection from a configured passive neighbor to its session; any other is
/// closed at once.
async fn accept_task(l: Arc<TcpListener>, neighbors: Neighbors, mut stop: watch::Receiver<bool>) {
    // Connections from strangers are logged at most every 10 s, with the count since.
    let mut strangers = 0u64;
    let mut last_warning: Option<Instant> = None;
    loop {
        let (s, from) = tokio::select! {
            c = super::next_connection(&l, "BGP-LS") => c,
            _ = stop.changed() => return,
        };
        let ip = match from.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let map = lock(&neighbors);
        match map.get(&ip) {
            // Only a session waiting for its neighbor takes a connection (RFC 4271 section
            // 6.8: one arriving while a session is up or starting is closed).
            Some(t) if t.neighbor.config.passive && t.neighbor.status().state == FsmState::Active => {
                if t.incoming.try_send(s).is_err() {
                    tracing::info!(from = %from, "BGP-LS: a second connection from a neighbor: closed");
                }
            }
            Some(t) if t.neighbor.config.passive => {
                tracing::info!(from = %from, "BGP-LS: a connection from a neighbor already in session: closed")
            }
            Some(_) => {
                tracing::info!(from = %from, "BGP-LS: connection from an active neighbor (the C-SMA connects to it): closed")
            }
            None => {
                strangers += 1;
                if last_warning.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10)) {
                    tracing::warn!(
                        from = %from,
                        connections = strangers,
                        "BGP-LS: connections from addresses that are not neighbors: closed"
                    );
                    strangers = 0;
                    last_warning = Some(Instant::now());
                }
            }
        }
    }
}

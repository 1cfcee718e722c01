//! Support for the C-PS adapter tests: an update-controller stand-in that emits
//! advertisements and answers resync requests with a full snapshot of its current view
//! (what the real controller does), peers with fast backoff, and polling helpers whose
//! time limits only guard against hangs.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cats_sma::cps::auth::Psk;
use cats_sma::cps::codec::Encoding;
use cats_sma::cps::reference::{CpsConfig, CpsState, RefCps};
use cats_sma::cps::session::{Hooks, Identity, PeerSettings, Role, Unreachable};
use cats_sma::cps::transport::{Endpoint, HttpTransport};
use cats_sma::cps::wire::Granularity;
use cats_sma::cps::Adapters;
use cats_sma::engine::model::{Health, Metrics, SciState, SiteMetrics};
use cats_sma::engine::update::{Advertisement, AdvertisementKind, Audience, SciMetrics, Trigger};
use tokio::sync::broadcast;

pub const KEY_ID: &str = "k1";
pub const SECRET: &[u8] = b"a pre-shared key of 32 bytes....";
pub const SITE: &str = "site-a";
pub const CSMA: &str = "csma-a";

/// The stand-in controller: sequence numbers, the current view, the broadcast.
pub struct Controller {
    pub tx: broadcast::Sender<Arc<Advertisement>>,
    seq: AtomicU64,
    pub view: Mutex<BTreeMap<String, SiteMetrics>>,
    pub resyncs: Mutex<Vec<String>>,
    pub unreachable: Mutex<Vec<Unreachable>>,
    /// Per-SCI rows of the current view (sent in fulls and as `sci_delta`).
    pub scis: Mutex<BTreeMap<String, SciMetrics>>,
    /// `RefreshHint`s and `SciDetail`s the adapters sent.
    pub hints: Mutex<Vec<(String, Option<Duration>)>>,
    pub sci_detail: Mutex<Vec<bool>>,
}

pub fn sci_row(csci: &str, cs: &str, gas: u32) -> SciMetrics {
    SciMetrics {
        csci_id: csci.into(),
        cs_id: cs.into(),
        state: SciState::Healthy,
        metrics: Metrics {
            gas,
            computing_time_ms: 7,
            health: Health::Healthy,
            cost: Some(12),
            reputation: Some(8),
            security_label: Some(3),
        },
    }
}

pub fn site(cs: &str, gas: u32) -> SiteMetrics {
    SiteMetrics {
        cs_id: cs.into(),
        gas,
        computing_time_ms: 10,
        health: Health::Healthy,
        cost: None,
        reputation: None,
        security_label: None,
        sci_count: 1,
    }
}

impl Controller {
    pub fn new() -> Arc<Controller> {
        let (tx, _) = broadcast::channel(4096);
        Arc::new(Controller {
            tx,
            seq: AtomicU64::new(1000),
            view: Mutex::new(BTreeMap::new()),
            resyncs: Mutex::new(Vec::new()),
            unreachable: Mutex::new(Vec::new()),
            scis: Mutex::new(BTreeMap::new()),
            hints: Mutex::new(Vec::new()),
            sci_detail: Mutex::new(Vec::new()),
        })
    }

    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A delta changing one service; returns its sequence number.
    pub fn delta(&self, cs: &str, gas: u32) -> u64 {
        let s = site(cs, gas);
        self.view.lock().unwrap().insert(cs.into(), s.clone());
        self.send_delta(s, vec![])
    }

    /// Sends a metric-change delta of one service (and these SCI rows); returns its sequence.
    fn send_delta(&self, site: SiteMetrics, scis: Vec<SciMetrics>) -> u64 {
        let seq = self.next();
        let _ = self.tx.send(Arc::new(Advertisement {
            seq,
            kind: AdvertisementKind::Delta,
            audience: Audience::All,
            trigger: Trigger::MetricChange,
            sites: vec![site],
            withdrawn: vec![],
            sci_withdrawn: vec![],
            scis,
            generated_at: chrono::Utc::now(),
        }));
        seq
    }

    /// The SCI `csci` failed and service `cs` lost it (withdrawn when `left` is None).
    pub fn sci_failed(&self, csci: &str, cs: &str, left: Option<u32>) -> u64 {
        let seq = self.next();
        let (sites, withdrawn) = match left {
            Some(g) => {
                let s = site(cs, g);
                self.view.lock().unwrap().insert(cs.into(), s.clone());
                (vec![s], vec![])
            }
            None => {
                self.view.lock().unwrap().remove(cs);
                (vec![], vec![cs.to_owned()])
            }
        };
        let _ = self.tx.send(Arc::new(Advertisement {
            seq,
            kind: AdvertisementKind::Delta,
            audience: Audience::All,
            trigger: Trigger::SciFailure,
            sites,
            withdrawn,
            sci_withdrawn: vec![cats_sma::engine::update::SciWithdrawal::new(csci, [cs.to_owned()])],
            scis: vec![],
            generated_at: chrono::Utc::now(),
        }));
        seq
    }

    /// What the real controller does on `Resync { peer }`: a full snapshot addressed to it.
    pub fn full_for(&self, peer: &str) -> u64 {
        self.full(Audience::Peer(peer.to_owned()), Trigger::Resync)
    }

    /// The periodic full snapshot (trigger heartbeat) to everyone.
    pub fn heartbeat(&self) -> u64 {
        self.full(Audience::All, Trigger::Heartbeat)
    }

    fn full(&self, audience: Audience, trigger: Trigger) -> u64 {
        let seq = self.next();
        let sites = self.view.lock().unwrap().values().cloned().collect();
        let scis = self.scis.lock().unwrap().values().cloned().collect();
        let _ = self.tx.send(Arc::new(Advertisement {
            seq,
            kind: AdvertisementKind::Full,
            audience,
            trigger,
            sites,
            withdrawn: vec![],
            sci_withdrawn: vec![],
            scis,
            generated_at: chrono::Utc::now(),
        }));
        seq
    }

    /// A delta changing one SCI's row (and its service's aggregate to the same GAS).
    pub fn sci_delta(&self, csci: &str, cs: &str, gas: u32) -> u64 {
        let row = sci_row(csci, cs, gas);
        self.scis.lock().unwrap().insert(csci.into(), row.clone());
        let s = site(cs, gas);
        self.view.lock().unwrap().insert(cs.into(), s.clone());
        self.send_delta(s, vec![row])
    }

    pub fn hooks(self: &Arc<Self>) -> Hooks {
        let me = self.clone();
        let me2 = self.clone();
        let me3 = self.clone();
        let me4 = self.clone();
        Hooks {
            refresh_hint: Arc::new(move |peer: &str, d| me3.hints.lock().unwrap().push((peer.to_owned(), d))),
            sci_detail: Arc::new(move |on| me4.sci_detail.lock().unwrap().push(on)),
            resync: Arc::new(move |peer: &str| {
                me.resyncs.lock().unwrap().push(peer.to_owned());
                me.full_for(peer);
            }),
            unreachable: Arc::new(move |u: &Unreachable| me2.unreachable.lock().unwrap().push(u.clone())),
        }
    }

    pub fn start_adapters(self: &Arc<Self>) -> Arc<Adapters> {
        Adapters::start(Identity { csma_id: CSMA.into(), site_id: SITE.into() }, self.tx.subscribe(), self.hooks())
    }
}

pub fn settings(name: &str, addr: SocketAddr, role: Role, buffer: usize) -> PeerSettings {
    PeerSettings {
        name: name.into(),
        url: format!("http://{addr}"),
        role,
        priority: 100,
        allowed: ["AR1", "AR2", "LLM1"].iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
        psk: Some(Psk { key_id: KEY_ID.into(), secret: SECRET.to_vec() }),
        gzip: true,
        buffer_size: buffer,
        batch_size: 8,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        encoding: Encoding::Json,
        granularity: Granularity::Site,
        source_id: None,
    }
}

pub fn transport(addr: SocketAddr) -> Arc<HttpTransport> {
    Arc::new(
        HttpTransport::new(Endpoint::parse(&format!("http://{addr}")).unwrap(), None, Duration::from_secs(2)).unwrap(),
    )
}

pub fn cps_config() -> CpsConfig {
    CpsConfig {
        keys: vec![cats_sma::cps::reference::config::KeyConfig {
            id: KEY_ID.into(),
            secret: cats_sma::cps::auth::hex(SECRET),
        }],
        ..CpsConfig::default()
    }
}

/// A free loopback port (bound then released).
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub async fn start_cps(addr: SocketAddr, state: Option<Arc<CpsState>>) -> RefCps {
    let state = state.unwrap_or_else(|| CpsState::new(cps_config()).unwrap());
    RefCps::start(addr, state).await.unwrap()
}

/// Polls `cond` every 10 ms; panics with `what` after 20 s (a hang, not a timing assertion).
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The sequence numbers the C-PS applied for SITE, in order.
pub fn applied(state: &CpsState) -> Vec<u64> {
    state.cst.lock().unwrap().sites.get(SITE).map(|e| e.applied.iter().copied().collect()).unwrap_or_default()
}

pub fn acked(state: &CpsState) -> u64 {
    state.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.acked_sequence)
}

/// The C-PS's services for SITE as (cs-id, gas).
pub fn cst_services(state: &CpsState) -> Vec<(String, u32)> {
    state
        .cst
        .lock()
        .unwrap()
        .sites
        .get(SITE)
        .map(|e| e.services.values().map(|s| (s.cs_id.clone(), s.gas)).collect())
        .unwrap_or_default()
}

pub fn view_services(c: &Controller) -> Vec<(String, u32)> {
    c.view.lock().unwrap().values().map(|s| (s.cs_id.clone(), s.gas)).collect()
}

/// Any PSK-signed request to the reference C-PS, with extra headers. `nonce` must be above
/// every nonce the C-PS accepted from CSMA (take it from the adapters' source when a
/// session runs too).
pub fn signed_request(
    nonce: u64,
    method: &'static str,
    path: &str,
    csma: &str,
    body: &[u8],
    extra: &[(&'static str, &str)],
) -> cats_sma::cps::transport::Request {
    use cats_sma::cps::auth::{sign, Signed};
    let ts = chrono::Utc::now().timestamp_millis();
    let s = Signed { method, path, csma_id: csma, timestamp_ms: ts, nonce };
    let mut headers = vec![
        ("x-cats-csma-id", csma.to_owned()),
        ("x-cats-site-id", SITE.to_owned()),
        ("x-cats-key-id", KEY_ID.into()),
        ("x-cats-timestamp", ts.to_string()),
        ("x-cats-nonce", nonce.to_string()),
        ("x-cats-signature", sign(SECRET, &s, body)),
    ];
    headers.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    cats_sma::cps::transport::Request { method, path: path.into(), headers, body: body.to_vec() }
}

/// The reference C-PS's counters (`GET /cats/stats` holds the same).
pub fn keepalives(state: &CpsState) -> u64 {
    state.cst.lock().unwrap().keepalives
}

pub fn full_snapshots(state: &CpsState) -> u64 {
    state.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.full_snapshots)
}

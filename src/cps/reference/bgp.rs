//! The reference C-PS's BGP-LS channel (seed 004, hybrid model): a passive BGP speaker
//! that configured C-SMAs peer with. Each UPDATE's CATS TLVs (`routing::bgp::encode`) are
//! applied to the same Computing Service Table as the REST and gRPC channels, field by
//! field with newest-wins on the advertisement sequence (the `generation` TLV); a
//! withdrawn NLRI, or the end of the session, removes its service unless another channel
//! has newer values of it. A peer is known by its address (and must announce its AS); the
//! table refuses a site another C-SMA owns.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use netgauze_bgp_pkt::capabilities::BgpCapability;
use netgauze_bgp_pkt::codec::BgpCodec;
use netgauze_bgp_pkt::BgpMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::cst::Field;
use super::server::{lock, CpsState};
use crate::cps::wire::ServiceMetrics;
use crate::engine::model::Health;
use crate::routing::bgp::encode::{decode_attribute, ls_contents, open, to_bytes, CodePoints, DecodedMetrics};

/// A C-SMA allowed to peer: its address, AS and csma-id.
#[derive(Clone, Debug)]
pub struct BgpPeer {
    pub address: IpAddr,
    pub remote_as: u32,
    pub csma_id: String,
}

pub struct RefBgp {
    pub addr: SocketAddr,
    /// UPDATEs with a route taken in (applied or kept out as older).
    pub routes_received: Arc<std::sync::atomic::AtomicU64>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RefBgp {
    pub async fn start(
        addr: SocketAddr,
        state: Arc<CpsState>,
        local_as: u32,
        router_id: Ipv4Addr,
        peers: Vec<BgpPeer>,
    ) -> Result<RefBgp, String> {
        let l = TcpListener::bind(addr).await.map_err(|e| format!("reference C-PS BGP listener {addr}: {e}"))?;
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        let (stop, mut stop_rx) = watch::channel(false);
        let routes_received = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = routes_received.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let s = tokio::select! {
                    s = super::server::next_connection(&l, &mut conns) => s,
                    _ = stop_rx.changed() => break,
                };
                let Ok(from) = s.peer_addr() else { continue };
                let Some(peer) = peers.iter().find(|p| p.address == from.ip()).cloned() else {
                    tracing::warn!(from = %from, "reference C-PS: BGP connection from an unknown peer: closed");
                    continue;
                };
                let (state, counter) = (state.clone(), counter.clone());
                conns.spawn(async move {
                    if let Err(e) = session(s, &state, &peer, local_as, router_id, &counter).await {
                        tracing::info!(peer = %peer.address, "reference C-PS: BGP session ended: {e}");
                    }
                });
            }
        });
        Ok(RefBgp { addr, routes_received, stop, task })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn health(h: Option<u8>) -> Health {
    match h {
        Some(0) => Health::Healthy,
        Some(1) => Health::Degraded,
        _ => Health::Unhealthy,
    }
}

/// The service and the fields the TLVs carry.
fn service(d: &DecodedMetrics) -> Option<(ServiceMetrics, u8)> {
    let cs_id = d.cs_id.clone()?;
    let mut fields = 0;
    let mut f = |present: bool, field: Field| {
        if present {
            fields |= field.bit();
        }
    };
    f(d.gas.is_some(), Field::Gas);
    f(d.computing_time_ms.is_some(), Field::ComputingTime);
    f(d.health.is_some(), Field::Health);
    f(d.sci_count.is_some(), Field::SciCount);
    f(d.cost.is_some() || d.cleared & (1 << 4) != 0, Field::Cost);
    f(d.reputation.is_some() || d.cleared & (1 << 5) != 0, Field::Reputation);
    f(d.security_label.is_some() || d.cleared & (1 << 6) != 0, Field::SecurityLabel);
    let s = ServiceMetrics {
        cs_id,
        gas: d.gas.unwrap_or(0),
        computing_time: d.computing_time_ms.unwrap_or(0),
        health: health(d.health),
        cost: d.cost,
        reputation: d.reputation,
        security_label: d.security_label,
        sci_count: d.sci_count.unwrap_or(0),
    };
    Some((s, fields))
}

async fn next(
    s: &mut TcpStream,
    codec: &mut BgpCodec,
    buf: &mut BytesMut,
    deadline: tokio::time::Instant,
) -> Result<BgpMessage, String> {
    loop {
        match crate::routing::bgp::session::next_message(codec, buf) {
            Ok(Some(m)) => return Ok(m),
            Ok(None) => {}
            Err(_) => return Err("malformed message".into()),
        }
        let n = tokio::time::timeout_at(deadline, s.read_buf(buf)).await.map_err(|_| "hold timer expired")?;
        match n {
            Ok(0) => return Err("closed".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What a session learned: per NLRI (as encoded), the site, CS-ID and generation of its
/// route.
type Learned = BTreeMap<Vec<u8>, (String, String, u64)>;

async fn session(
    s: TcpStream,
    state: &CpsState,
    peer: &BgpPeer,
    local_as: u32,
    router_id: Ipv4Addr,
    counter: &std::sync::atomic::AtomicU64,
) -> Result<(), String> {
    let mut routes = Learned::new();
    let r = exchange(s, state, peer, local_as, router_id, counter, &mut routes).await;
    // RFC 4271: the routes of a session that ended go with it (unless another channel has
    // newer values of them).
    let mut cst = lock(&state.cst);
    for (site, cs, generation) in routes.into_values() {
        let _ = cst.withdraw_routed(&site, &peer.csma_id, &cs, generation);
    }
    r
}

async fn exchange(
    mut s: TcpStream,
    state: &CpsState,
    peer: &BgpPeer,
    local_as: u32,
    router_id: Ipv4Addr,
    counter: &std::sync::atomic::AtomicU64,
    routes: &mut Learned,
) -> Result<(), String> {
    const OFFER: u16 = 90;
    let mut codec = BgpCodec::new(true);
    let mut buf = BytesMut::new();
    let send = |m: &BgpMessage| to_bytes(m);
    s.write_all(&send(&open(local_as, OFFER, router_id))?).await.map_err(|e| e.to_string())?;
    let open_wait = tokio::time::Instant::now() + Duration::from_secs(240);
    let BgpMessage::Open(o) = next(&mut s, &mut codec, &mut buf, open_wait).await? else {
        return Err("no OPEN".into());
    };
    let asn = o
        .capabilities()
        .iter()
        .find_map(|c| match c {
            BgpCapability::FourOctetAs(a) => Some(a.asn4()),
            _ => None,
        })
        .unwrap_or(o.my_as().into());
    if asn != peer.remote_as {
        return Err(format!("peer announced AS {asn}, not {}", peer.remote_as));
    }
    // RFC 4271 section 4.2: the smaller hold time; 0 turns the timers off.
    let hold = match OFFER.min(o.hold_time()) {
        0 => Duration::from_secs(86_400 * 365),
        h => Duration::from_secs(h.max(3).into()),
    };
    s.write_all(&send(&BgpMessage::KeepAlive)?).await.map_err(|e| e.to_string())?;
    let cp = CodePoints::default();
    let mut keepalive = tokio::time::interval(hold / 3);
    let mut hold_at = tokio::time::Instant::now() + hold;
    loop {
        let m = tokio::select! {
            m = next(&mut s, &mut codec, &mut buf, hold_at) => m?,
            _ = keepalive.tick() => {
                s.write_all(&send(&BgpMessage::KeepAlive)?).await.map_err(|e| e.to_string())?;
                continue;
            }
        };
        hold_at = tokio::time::Instant::now() + hold;
        let BgpMessage::Update(u) = m else { continue };
        let (ls, reach, unreach) = ls_contents(&u);
        let key = |n: &netgauze_bgp_pkt::nlri::BgpLsNlri| format!("{n:?}").into_bytes();
        for n in &unreach {
            if let Some((site, cs, generation)) = routes.remove(&key(n)) {
                let r = lock(&state.cst).withdraw_routed(&site, &peer.csma_id, &cs, generation);
                if let Err(e) = r {
                    tracing::warn!("reference C-PS: BGP-LS withdrawal refused: {e}");
                }
            }
        }
        let Some(ls) = ls else { continue };
        let d = match decode_attribute(&cp, &ls) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(peer = %peer.address, "reference C-PS: BGP-LS attribute not understood: {e}");
                continue;
            }
        };
        let (Some((svc, fields)), Some(site), Some(generation)) = (service(&d), d.site_id.clone(), d.generation) else {
            tracing::warn!(peer = %peer.address, "reference C-PS: BGP-LS route without cs-id, site-id or generation");
            continue;
        };
        let mut cst = lock(&state.cst);
        for n in &reach {
            // The NLRI now carries this service: one it carried before is withdrawn.
            if let Some((old_site, old_cs, old_gen)) =
                routes.insert(key(n), (site.clone(), svc.cs_id.clone(), generation))
            {
                if old_cs != svc.cs_id || old_site != site {
                    let _ = cst.withdraw_routed(&old_site, &peer.csma_id, &old_cs, old_gen);
                }
            }
        }
        if let Err(e) = cst.apply_routed(&site, &peer.csma_id, &svc, fields, generation) {
            tracing::warn!(peer = %peer.address, "reference C-PS: BGP-LS route refused: {e}");
        }
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

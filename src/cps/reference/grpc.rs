//! The reference C-PS's side of the gRPC stream (`cats.sma.v1.CpsLink/Session`,
//! docs/cps-protocol.md "gRPC stream"): each C-SMA message checked as a REST request is
//! (the PSK MAC with its timestamp window and nonce, the C-SMA's JWS, when configured),
//! Advertisements and Keepalives applied to the same Computing Service Table as
//! `POST /cats/metrics` and `POST /cats/keepalive`, Hello answered with what the table holds
//! for the site. [`RefGrpc::send`] puts a full-sync request, a query or a policy update on a
//! C-SMA's stream (what `POST /cats/sync/{site}` does for REST); what the C-SMA answers is
//! kept in [`Streams::answers`]. Server reflection (v1 and v1alpha) lists
//! `cats.sma.v1.CpsLink`, so grpcurl and grpcio-reflection can discover it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tower::ServiceExt as _;

use super::cst::CstError;
use super::server::{lock, CpsState};
use crate::cps::auth::{sign_stream, Presented};
use crate::cps::grpc::pb::{self, cps_body::Kind as CpsKind, csma_body::Kind as CsmaKind};
use crate::cps::grpc::wire::SESSION_PATH;
use crate::cps::wire::{Ack, MetricReport, ReportKind, SciRow, ServiceMetrics, MAX_BODY};
use crate::engine::model::Health;

/// Messages queued towards one C-SMA.
const OUTBOUND: usize = 64;

/// One C-SMA's open stream.
struct Peer {
    tx: mpsc::Sender<Result<pb::CpsMessage, Status>>,
    counter: u64,
    csma: String,
    hello_nonce: u64,
    /// The PSK its Hello was proven with.
    psk: Option<Vec<u8>>,
    /// Seed 003: what its Hello announced.
    announced: Option<crate::overload::wire::Supported>,
}

/// The open streams by site, and what the C-SMAs answered.
#[derive(Default)]
pub struct Streams {
    peers: Mutex<BTreeMap<String, Peer>>,
    /// QueryAnswer, PolicyResult and Rejected messages received, oldest first (at most
    /// [`Streams::KEPT`]).
    pub answers: Mutex<Vec<CsmaKind>>,
    /// Streams opened so far.
    pub opened: std::sync::atomic::AtomicU64,
}

impl Streams {
    const KEPT: usize = 1024;

    fn keep(&self, k: CsmaKind) {
        let mut a = lock(&self.answers);
        if a.len() >= Self::KEPT {
            a.remove(0);
        }
        a.push(k);
    }

    /// Seals `kind` for the site's stream (counter, and the MAC when the C-SMA proved its
    /// Hello with a PSK) and queues it. False when the site has no stream open.
    pub fn send(&self, site: &str, kind: CpsKind) -> bool {
        let mut peers = lock(&self.peers);
        let Some(p) = peers.get_mut(site) else { return false };
        p.counter += 1;
        let body = pb::CpsBody { kind: Some(kind) }.encode_to_vec();
        let mac = p.psk.as_ref().map(|s| sign_stream(s, &p.csma, p.hello_nonce, p.counter, &body)).unwrap_or_default();
        p.tx.try_send(Ok(pb::CpsMessage { body, counter: p.counter, mac })).is_ok()
    }

    /// Seed 003: sends `olr` as a control message (CpsBody.overload) on every stream whose
    /// Hello announced the peer report (RFC 8581 section 5.1.2: only to those).
    fn push_overload(&self, olr: &crate::overload::wire::Olr) {
        let sites: Vec<String> =
            lock(&self.peers).iter().filter(|(_, p)| p.announced.is_some()).map(|(s, _)| s.clone()).collect();
        for site in sites {
            self.send(&site, CpsKind::Overload(crate::cps::grpc::wire::pb_olr(olr)));
        }
    }

    /// Whether the site has a stream open.
    pub fn is_open(&self, site: &str) -> bool {
        lock(&self.peers).get(site).is_some_and(|p| !p.tx.is_closed())
    }
}

fn health(v: i32) -> Result<Health, String> {
    match pb::MetricHealth::try_from(v) {
        Ok(pb::MetricHealth::Healthy) => Ok(Health::Healthy),
        Ok(pb::MetricHealth::Degraded) => Ok(Health::Degraded),
        Ok(pb::MetricHealth::Unhealthy) => Ok(Health::Unhealthy),
        _ => Err(format!("health {v} is not HEALTHY, DEGRADED or UNHEALTHY")),
    }
}

fn small(v: Option<u32>, what: &str) -> Result<Option<u8>, String> {
    v.map(|x| u8::try_from(x).ok().filter(|x| *x <= 10).ok_or_else(|| format!("{what} {x} is above 10"))).transpose()
}

/// A protobuf report as the REST model (what the table applies).
fn report(r: &pb::MetricReport) -> Result<(MetricReport, Vec<SciRow>), String> {
    let kind = match pb::ReportKind::try_from(r.kind) {
        Ok(pb::ReportKind::Delta) => ReportKind::Delta,
        Ok(pb::ReportKind::Full) => ReportKind::Full,
        _ => return Err(format!("report {}: kind {} is not DELTA or FULL", r.sequence, r.kind)),
    };
    let ts = r.generated_at.as_ref().ok_or_else(|| format!("report {}: no generated_at", r.sequence))?;
    let generated_at = chrono::DateTime::from_timestamp(ts.seconds, ts.nanos.clamp(0, 999_999_999) as u32)
        .ok_or_else(|| format!("report {}: generated_at out of range", r.sequence))?;
    let services = r
        .services
        .iter()
        .map(|s| {
            Ok(ServiceMetrics {
                cs_id: s.cs_id.clone(),
                gas: s.gas,
                computing_time: s.computing_time,
                health: health(s.health)?,
                cost: s.cost,
                reputation: small(s.reputation, "reputation")?,
                security_label: small(s.security_label, "security_label")?,
                sci_count: s.sci_count,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let rows = r
        .scis
        .iter()
        .map(|s| {
            Ok(SciRow {
                csci_id: s.csci_id.clone(),
                cs_id: s.cs_id.clone(),
                state: s.state.clone(),
                gas: s.gas,
                computing_time: s.computing_time,
                health: health(s.health)?,
                cost: s.cost,
                reputation: small(s.reputation, "reputation")?,
                security_label: small(s.security_label, "security_label")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((
        MetricReport {
            sequence: r.sequence,
            kind,
            trigger: r.trigger.clone(),
            generated_at,
            services,
            withdrawn: r.withdrawn.clone(),
            sci_withdrawn: r.sci_withdrawn.clone(),
        },
        rows,
    ))
}

/// The service, shared by every connection.
#[derive(Clone)]
struct Service {
    state: Arc<CpsState>,
    streams: Arc<Streams>,
}

type SessionStream = Pin<Box<dyn Stream<Item = Result<pb::CpsMessage, Status>> + Send>>;

#[tonic::async_trait]
impl pb::cps_link_server::CpsLink for Service {
    type SessionStream = SessionStream;

    async fn session(&self, req: Request<Streaming<pb::CsmaMessage>>) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(OUTBOUND);
        let me = self.clone();
        tokio::spawn(async move {
            let mut site = None;
            let end = loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break None,
                    Err(s) => break Some(s),
                };
                if me.state.config.ack_delay_ms > 0 && site.is_some() {
                    tokio::time::sleep(std::time::Duration::from_millis(me.state.config.ack_delay_ms)).await;
                }
                match me.one(&msg, &mut site, &tx) {
                    Ok(()) => {}
                    // The stream ends with the status: a C-SMA that cannot prove itself or
                    // sends nonsense gets nothing more.
                    Err(s) => break Some(s),
                }
            };
            if let Some(s) = end {
                tracing::warn!(site = ?site, code = ?s.code(), message = %s.message(), "reference C-PS: stream ended");
                let _ = tx.send(Err(s)).await;
            }
            if let Some(site) = site {
                let mut peers = lock(&me.streams.peers);
                if peers.get(&site).is_some_and(|p| p.tx.same_channel(&tx)) {
                    peers.remove(&site);
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

impl Service {
    /// Checks and applies one C-SMA message; an error ends the stream with that status.
    fn one(
        &self,
        msg: &pb::CsmaMessage,
        site: &mut Option<String>,
        tx: &mpsc::Sender<Result<pb::CpsMessage, Status>>,
    ) -> Result<(), Status> {
        let state = &self.state;
        state.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = pb::CsmaBody::decode(msg.body.as_slice()).map_err(|e| {
            state.count("malformed");
            Status::invalid_argument(format!("CsmaBody: {e}"))
        })?;
        let kind = body.kind.ok_or_else(|| Status::invalid_argument("CsmaBody without a kind"))?;
        let csma = match (&kind, site.as_ref()) {
            (CsmaKind::Hello(h), None) => h.csma_id.clone(),
            (CsmaKind::Hello(_), Some(_)) => return Err(Status::invalid_argument("a second Hello")),
            (_, None) => return Err(Status::failed_precondition("the first message must be Hello")),
            (_, Some(s)) => lock(&self.streams.peers).get(s).map(|p| p.csma.clone()).unwrap_or_default(),
        };
        let psk = self.authenticate(msg, &csma)?;
        state.tick();
        let reply = |kind: CpsKind, site: &str| {
            if self.streams.send(site, kind) {
                Ok(())
            } else {
                Err(Status::resource_exhausted("the C-SMA does not read its stream"))
            }
        };
        match kind {
            CsmaKind::Hello(h) => {
                let mut c = lock(&state.cst);
                c.expire(std::time::Instant::now(), state.config.ttl());
                let held = c.site_state(&h.site_id);
                if let Some(s) = &held {
                    if s.csma_id != h.csma_id {
                        state.count("wrong-owner");
                        return Err(Status::permission_denied(format!(
                            "site {} is reported by another C-SMA",
                            crate::text::printable(&h.site_id, 64)
                        )));
                    }
                }
                drop(c);
                let announced = h.oc_supported.as_ref().and_then(|s| crate::cps::grpc::wire::supported_of(s).ok());
                let (oc_supported, olr) = state.overload_answer(announced.as_ref(), Some(&h.csma_id));
                let w = pb::Welcome {
                    acked_sequence: held.as_ref().map_or(0, |s| s.acked_sequence),
                    full_sync_requested: held.as_ref().is_some_and(|s| s.full_sync_requested),
                    keepalive: state.config.keepalive,
                    entry_ttl: state.config.entry_ttl,
                    refresh_interval: state.config.refresh_interval(state.load()).unwrap_or(0),
                    oc_supported: oc_supported.as_ref().map(crate::cps::grpc::wire::pb_supported),
                    olr: olr.as_ref().map(crate::cps::grpc::wire::pb_olr),
                };
                let peer = Peer {
                    tx: tx.clone(),
                    counter: 0,
                    csma: h.csma_id.clone(),
                    hello_nonce: msg.nonce,
                    psk,
                    announced,
                };
                lock(&self.streams.peers).insert(h.site_id.clone(), peer);
                self.streams.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *site = Some(h.site_id.clone());
                reply(CpsKind::Welcome(w), &h.site_id)?;
            }
            CsmaKind::Advertisement(a) => {
                let s = site.clone().unwrap_or_default();
                if a.site_id != s || a.csma_id != csma {
                    return Err(Status::invalid_argument("an Advertisement for another site or C-SMA"));
                }
                let mut parsed = Vec::with_capacity(a.reports.len());
                for r in &a.reports {
                    parsed.push(report(r).map_err(|e| {
                        state.count("malformed");
                        Status::invalid_argument(e)
                    })?);
                }
                let answer = self.apply(&s, &csma, &parsed);
                reply(answer, &s)?;
            }
            CsmaKind::Keepalive(k) => {
                let s = site.clone().unwrap_or_default();
                let r = lock(&state.cst).keepalive(&s, &csma, k.sequence);
                let answer = match r {
                    Ok(a) if state.config.keepalive => CpsKind::Ack(self.hints(a, &s)),
                    Ok(_) => refusal("not-offered", "this C-PS takes no keepalive"),
                    Err(e) => self.refusal_of(e),
                };
                reply(answer, &s)?;
            }
            k @ (CsmaKind::Answer(_) | CsmaKind::PolicyResult(_) | CsmaKind::Rejected(_)) => {
                if let CsmaKind::Rejected(r) = &k {
                    tracing::warn!(reason = %r.reason, detail = %r.detail, "reference C-PS: the C-SMA rejected a message");
                }
                self.streams.keep(k);
            }
        }
        Ok(())
    }

    /// The PSK MAC and the JWS, when configured, as for a REST request (method STREAM,
    /// path the call's); the PSK a valid MAC was made with.
    fn authenticate(&self, msg: &pb::CsmaMessage, csma: &str) -> Result<Option<Vec<u8>>, Status> {
        let (ts, nonce) = (msg.timestamp_ms.to_string(), msg.nonce.to_string());
        let p = Presented {
            key_id: Some(&msg.key_id).filter(|k| !k.is_empty()).map(String::as_str),
            timestamp: Some(&ts),
            nonce: Some(&nonce),
            signature: Some(&msg.mac).filter(|k| !k.is_empty()).map(String::as_str),
        };
        let jws = Some(msg.jws.as_str()).filter(|j| !j.is_empty());
        match self.state.authenticate("STREAM", SESSION_PATH, csma, &p, jws, &msg.body) {
            Ok(reply) => Ok(reply.map(|k| k.secret)),
            Err((e, _)) => {
                self.state.count(e.reason());
                Err(Status::unauthenticated(format!("{}: {e}", e.reason())))
            }
        }
    }

    fn hints(&self, mut a: Ack, site: &str) -> pb::Ack {
        let state = &self.state;
        a.keepalive = state.config.keepalive;
        let (announced, csma) = match lock(&self.streams.peers).get(site) {
            Some(p) => (p.announced.clone(), p.csma.clone()),
            None => (None, String::new()),
        };
        let (_, olr) = state.overload_answer(announced.as_ref(), Some(&csma));
        pb::Ack {
            olr: olr.as_ref().map(crate::cps::grpc::wire::pb_olr),
            acked_sequence: a.acked_sequence,
            applied: a.applied,
            stale: a.stale,
            full_sync_requested: a.full_sync_requested,
            keepalive: a.keepalive,
            entry_ttl: state.config.entry_ttl,
            refresh_interval: state.config.refresh_interval(state.load()).unwrap_or(0),
        }
    }

    fn refusal_of(&self, e: CstError) -> CpsKind {
        let reason = match &e {
            CstError::UnknownSite(_) => "unknown-site",
            CstError::SequenceMismatch { .. } => "sequence-mismatch",
            CstError::WrongOwner { .. } | CstError::SciOfOtherSite { .. } => "forbidden",
            _ => "malformed",
        };
        self.state.count(reason);
        refusal(reason, &e.to_string())
    }

    /// An Advertisement applied as `POST /cats/metrics` (+ the PUTs and DELETEs of its SCI
    /// rows and withdrawals) would be.
    fn apply(&self, site: &str, csma: &str, reports: &[(MetricReport, Vec<SciRow>)]) -> CpsKind {
        let mut c = lock(&self.state.cst);
        c.expire(std::time::Instant::now(), self.state.config.ttl());
        for (r, rows) in reports {
            for w in &r.sci_withdrawn {
                if let Err(e) = c.withdraw_sci(site, csma, w, r.sequence) {
                    drop(c);
                    return self.refusal_of(e);
                }
            }
            for row in rows {
                if let Err(e) = c.put_sci(site, csma, r.sequence, row) {
                    drop(c);
                    return self.refusal_of(e);
                }
            }
        }
        let only: Vec<MetricReport> = reports.iter().map(|(r, _)| r.clone()).collect();
        let r = match only.as_slice() {
            [full] if full.kind == ReportKind::Full => c.apply_snapshot(site, csma, full),
            _ => c.apply_batch(site, csma, &only),
        };
        drop(c);
        match r {
            Ok(a) => CpsKind::Ack(self.hints(a, site)),
            Err(e) => self.refusal_of(e),
        }
    }
}

fn refusal(reason: &str, detail: &str) -> CpsKind {
    CpsKind::Refusal(pb::Refusal { reason: reason.into(), detail: detail.into() })
}

/// The running gRPC listener of a reference C-PS.
pub struct RefGrpc {
    pub addr: SocketAddr,
    pub streams: Arc<Streams>,
    state: Arc<CpsState>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RefGrpc {
    /// Binds `addr` (SO_REUSEADDR) and serves the stream in plain HTTP/2, or over TLS when
    /// the configuration has `tls_cert` / `tls_key` (ALPN h2).
    pub async fn start(addr: SocketAddr, state: Arc<CpsState>) -> Result<RefGrpc, String> {
        let (listener, addr) = super::server::listen_reusable(addr)?;
        let tls = super::server::tls_acceptor_with_alpn(&state.config, &[b"h2"])?;
        let streams = Arc::new(Streams::default());
        let svc = Service { state: state.clone(), streams: streams.clone() };
        let (stop, mut stop_rx) = watch::channel(false);
        type Boxed = tower::util::BoxCloneService<
            hyper::Request<hyper::body::Incoming>,
            hyper::Response<tonic::body::Body>,
            std::convert::Infallible,
        >;
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(crate::cps::grpc::DESCRIPTOR_SET)
        };
        let v1 = Boxed::new(reflection().build_v1().map_err(|e| e.to_string())?);
        let v1alpha = Boxed::new(reflection().build_v1alpha().map_err(|e| e.to_string())?);
        let link = Boxed::new(pb::cps_link_server::CpsLinkServer::new(svc).max_decoding_message_size(MAX_BODY));
        let route = move |req: hyper::Request<hyper::body::Incoming>| {
            let path = req.uri().path();
            let svc = if path.starts_with("/grpc.reflection.v1.ServerReflection/") {
                v1.clone()
            } else if path.starts_with("/grpc.reflection.v1alpha.ServerReflection/") {
                v1alpha.clone()
            } else {
                // CpsLink, or its UNIMPLEMENTED for an unknown method or service.
                link.clone()
            };
            svc.oneshot(req)
        };
        // Seed 003: a new report goes out at once as a control message, not only in the
        // next Ack (a C-SMA with nothing to send would not hear of it before it expired).
        {
            let (state, streams, mut stop_rx) = (state.clone(), streams.clone(), stop.subscribe());
            tokio::spawn(async move {
                let mut last = None;
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stop_rx.changed() => break,
                    }
                    let olr = state.overload_report();
                    let seq = olr.as_ref().map(|o| o.sequence);
                    if seq.is_some() && seq != last {
                        if let Some(o) = &olr {
                            streams.push_overload(o);
                        }
                    }
                    last = seq;
                }
            });
        }
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let tcp = tokio::select! {
                    t = super::server::next_connection(&listener, &mut conns) => t,
                    _ = stop_rx.changed() => break,
                };
                let route = route.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(route);
                    let http = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(acceptor) => {
                            if let Some(s) = super::server::handshake(&acceptor, tcp).await {
                                let _ = http.serve_connection(TokioIo::new(s), svc).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                        }
                    }
                });
            }
            // Dropping the connections: the C-PS is gone, as a crash would have it.
            conns.shutdown().await;
        });
        Ok(RefGrpc { addr, streams, state, stop, task })
    }

    /// The table and counters it shares with the REST server.
    pub fn state(&self) -> &Arc<CpsState> {
        &self.state
    }

    /// Puts `kind` on the stream of `site` (false when none is open).
    pub fn send(&self, site: &str, kind: CpsKind) -> bool {
        self.streams.send(site, kind)
    }

    /// Stops listening and closes every stream.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

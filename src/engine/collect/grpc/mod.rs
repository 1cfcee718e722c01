//! gRPC push (seed 004, SCI Collection Interface, push mode: "gRPC streaming
//! (bidirectional)"): the `cats.sma.v1.SciCollector` service of `proto/cats/sma/v1/sci.proto`,
//! documented in `docs/sci-protocol.md` ("gRPC push"). `Stream` answers each report with a
//! verdict as it is ingested; `Batch` answers a batch at once. Reports go through the
//! engine entry point HTTP push uses (`Engine::ingest_message`, transport `grpc`): the same
//! proofs (a client certificate cert-to-name maps to a CSCI-ID, an HMAC or a JWT), checks,
//! per-source and per-SCI rate limits and counters.
//!
//! The listener is ours, not tonic's: connections pass the SCI gate of
//! [`crate::mgmt::auth_limits`] (`sci-grpc`: caps at accept, the TLS handshake deadline, a
//! deadline for the first accepted report), TLS is [`crate::tls`] (ALPN h2), and each
//! connection is served by hyper's HTTP/2 with a service that knows the connection's
//! permit and certified CSCI-ID. Server reflection (v1 and v1alpha) lists the service.
//!
//! Bad input: a message that is not a valid `Report` is a `malformed` verdict and the stream
//! goes on (its gRPC framing is intact); a message over `max-message-size` ends the stream
//! (or the Batch call) with RESOURCE_EXHAUSTED, a `ReportBatch` that does not decode ends the
//! call with INVALID_ARGUMENT; each is counted as `malformed`.

pub mod codec;
pub mod pull;
pub mod wire;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tower::ServiceExt as _;
use tracing::{debug, error, info, warn};

use super::tls_status::{TlsNow, TlsStatus};
use crate::engine::core::{Proof, Sender};
use crate::engine::model::CsciId;
use crate::engine::report::{self, IdKind, RawReport};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::mgmt::auth_limits::{Gate, Permit, Timeout};
use crate::tls::{ClientAuth, Failure, Refused, ServerTls, TlsSettings};

/// The messages, clients (for SCIs, tests and the load generator; the SciAgent client's
/// call is made in `pull.rs`), the collector's server side and the SciAgent server an SCI
/// runs for gRPC pull, generated from `proto/cats/sma/v1/sci.proto` by `build.rs`.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/cats.sma.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/cats.sma.v1.SciCollector.rs"));
    include!(concat!(env!("OUT_DIR"), "/cats.sma.v1.SciAgent.rs"));
}

/// The encoded FileDescriptorSet of `proto/` (with its imports), for server reflection.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sci_descriptor.bin"));

/// The transport name in counters, audit records and notifications.
const TRANSPORT: &str = "grpc";

/// Concurrent calls one connection may have open (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_CONCURRENT_STREAMS: u32 = 32;
/// Largest header block a call may send (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE).
pub const MAX_HEADER_LIST: u32 = 16 * 1024;
/// Verdicts a stream keeps while the SCI does not read them; past that the stream stops
/// reading reports (HTTP/2 flow control holds the SCI back).
const VERDICT_QUEUE: usize = 16;

/// Where and how the gRPC collector listens (YANG collection/grpc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcSettings {
    pub enabled: bool,
    pub listen: SocketAddr,
    /// Largest gRPC message (one Report of a stream, or a ReportBatch).
    pub max_message: usize,
    /// TLS (collection/grpc/tls); None serves plain HTTP/2 (h2c).
    pub tls: Option<TlsSettings>,
    /// Why the tls container cannot be used.
    pub tls_error: Option<String>,
}

/// The collection/grpc settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> GrpcSettings {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let base = format!("{ROOT}/collection/grpc");
    let enabled = leaf(t, &format!("{base}/enabled")).as_deref() == Some("true");
    let ip = leaf(t, &format!("{base}/listen-address"))
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let port = leaf_u64(t, &format!("{base}/port")).map(|p| p as u16).unwrap_or(8471);
    let max_message = leaf_u64(t, &format!("{base}/max-message-size")).map(|m| m as usize).unwrap_or(65536);
    let (tls, tls_error) = match tls_settings(t, &format!("{base}/tls")) {
        Ok(tls) => (tls, None),
        Err(e) => (None, Some(format!("collection/grpc/tls: {e}"))),
    };
    GrpcSettings { enabled, listen: SocketAddr::new(ip, port), max_message, tls, tls_error }
}

fn tls_settings(t: &yang2::data::DataTree<'static>, base: &str) -> Result<Option<TlsSettings>, String> {
    if crate::engine::northbound::leaf(t, &format!("{base}/enabled")).as_deref() == Some("false") {
        return Ok(None);
    }
    let s = crate::tls::yang::settings(t, base)?;
    s.check()?;
    Ok(Some(s))
}

/// What a commit touching collection/grpc must pass before it is applied: TLS files that
/// cannot be used are refused rather than closing the listener.
pub fn check(t: &yang2::data::DataTree<'static>) -> Result<(), String> {
    let g = settings(t);
    if let Some(e) = g.tls_error {
        return Err(e);
    }
    if let Some(tls) = g.tls.filter(|_| g.enabled) {
        crate::tls::server::check_files(&tls).map_err(|e| format!("collection/grpc/tls: {e}"))?;
    }
    Ok(())
}

// ----- the service ---------------------------------------------------------------------

/// Set by a handler when a call reaches it: a call refused before (by tonic's framing: a
/// message over the size limit, an unsupported compression) is counted by the dispatch.
#[derive(Clone)]
struct Reached(Arc<AtomicBool>);

fn reached<T>(req: &Request<T>) {
    if let Some(r) = req.extensions().get::<Reached>() {
        r.0.store(true, Ordering::Release);
    }
}

/// The collector as one connection sees it.
#[derive(Clone)]
struct Collector {
    engine: Engine,
    permit: Arc<Permit>,
    /// The CSCI-ID the connection's client certificate proved.
    certified: Option<CsciId>,
}

/// Seed 003: what a call announced in its metadata (`x-cats-oc-supported-features`).
fn announced<T>(req: &Request<T>) -> Option<crate::overload::wire::Supported> {
    let v = req.metadata().get(crate::overload::wire::H_OC_SUPPORTED)?.to_str().ok()?;
    crate::overload::wire::Supported::decode(v).ok()
}

/// Puts the C-SMA's answer and report in the verdict of an accepted report whose CSCI-ID
/// is the SourceID the call announced (seed 003).
fn answer(engine: &Engine, announced: Option<&crate::overload::wire::Supported>, csci_id: &str, v: &mut pb::Verdict) {
    let Some(a) = announced.filter(|a| v.accepted && a.source_id == csci_id) else { return };
    if let Some((answer, report)) = engine.doic.answer(csci_id, a, TRANSPORT) {
        v.oc_supported_features = answer.to_string();
        v.oc_olr = report.map(|r| r.to_string()).unwrap_or_default();
    }
}

async fn count(engine: &Engine, reason: Rejection) {
    engine.submit_peer(move |core| core.count_rejection(reason, TRANSPORT, TRANSPORT)).await;
}

fn verdict(raw: Option<&RawReport>, correlation_id: String) -> pb::Verdict {
    pb::Verdict {
        sequence: raw.map_or(0, |r| r.sequence),
        csci_id: raw.map(|r| report::display_id(IdKind::CsciId, &r.csci_id)).unwrap_or_default(),
        correlation_id,
        ..pb::Verdict::default()
    }
}

fn refused(mut v: pb::Verdict, reason: Rejection, detail: String) -> pb::Verdict {
    v.accepted = false;
    v.reason = reason.identity().to_owned();
    v.detail = detail;
    v
}

fn seconds(d: Duration) -> u32 {
    d.as_secs().clamp(1, u64::from(u32::MAX)) as u32
}

impl Collector {
    fn sender(&self) -> Sender {
        Sender {
            proof: self.certified.as_ref().map(|_| Proof::Certificate),
            csci_id: self.certified.clone(),
            transport: TRANSPORT,
            address: Some(self.permit.peer.ip()),
            ..Sender::default()
        }
    }

    /// The verdict of one stream message.
    async fn one(&self, msg: Bytes, announced: Option<&crate::overload::wire::Supported>) -> pb::Verdict {
        let peer = self.permit.peer.ip();
        if let Err(wait) = self.engine.ingress.admit(peer, TRANSPORT) {
            let mut v =
                refused(verdict(None, String::new()), Rejection::RateLimited, format!("too many messages from {peer}"));
            v.retry_after_seconds = seconds(wait);
            return v;
        }
        let s = match wire::decode_stream_report(msg) {
            Ok(s) => s,
            Err(e) => {
                count(&self.engine, Rejection::Malformed).await;
                return refused(verdict(None, String::new()), Rejection::Malformed, e.to_string());
            }
        };
        let v = verdict(Some(&s.raw), s.correlation_id);
        let id = s.raw.csci_id.clone();
        let proof = (!s.authorization.is_empty()).then_some(s.authorization.as_str());
        let results = match self.engine.ingest_message(vec![s.raw], proof, &s.signed, self.sender()).await {
            Ok(r) => r,
            Err(f) => return refused(v, Rejection::Unauthenticated, f.detail),
        };
        match results.into_iter().next() {
            Some(Ok(())) => {
                // An accepted report authenticates the connection.
                self.permit.establish();
                let mut v = pb::Verdict { accepted: true, ..v };
                answer(&self.engine, announced, &id, &mut v);
                v
            }
            Some(Err((reason, detail))) => {
                let mut v = refused(v, reason, detail);
                if reason == Rejection::RateLimited {
                    let wait = self.engine.query(move |core| core.rate.retry_after(&id)).await.flatten();
                    v.retry_after_seconds = seconds(wait.unwrap_or(Duration::from_secs(1)));
                }
                v
            }
            None => refused(v, Rejection::Malformed, "the engine returned no verdict".into()),
        }
    }
}

/// A framing error of a stream as the call's final status: over the size limit is
/// RESOURCE_EXHAUSTED (tonic says OUT_OF_RANGE); counted as `malformed` unless the SCI or
/// the connection ended the call.
fn framing_status(s: Status, max: usize) -> (Status, bool) {
    match s.code() {
        tonic::Code::OutOfRange => (too_large(max), true),
        tonic::Code::Internal | tonic::Code::Unimplemented | tonic::Code::InvalidArgument => (s, true),
        _ => (s, false),
    }
}

fn too_large(max: usize) -> Status {
    Status::resource_exhausted(format!(
        "message larger than {max} bytes (collection/grpc/max-message-size); counted as malformed"
    ))
}

#[tonic::async_trait]
impl pb::sci_collector_server::SciCollector for Arc<Collector> {
    type StreamStream = ReceiverStream<Result<pb::Verdict, Status>>;

    async fn stream(&self, req: Request<Streaming<Bytes>>) -> Result<Response<Self::StreamStream>, Status> {
        reached(&req);
        if req.metadata().contains_key("authorization") {
            count(&self.engine, Rejection::Malformed).await;
            return Err(Status::invalid_argument(
                "a Stream call carries no authorization metadata: each Report carries its own proof \
                 (Report.authorization, over the Report without field 15); the metadata proves a Batch",
            ));
        }
        let max = req.extensions().get::<MaxMessage>().map_or(0, |m| m.0);
        let oc = announced(&req);
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(VERDICT_QUEUE);
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(s) => {
                        let (s, malformed) = framing_status(s, max);
                        if malformed {
                            count(&me.engine, Rejection::Malformed).await;
                        }
                        let _ = tx.send(Err(s)).await;
                        break;
                    }
                };
                let v = me.one(msg, oc.as_ref()).await;
                if tx.send(Ok(v)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn batch(&self, req: Request<Bytes>) -> Result<Response<pb::BatchVerdict>, Status> {
        reached(&req);
        let peer = self.permit.peer.ip();
        if let Err(wait) = self.engine.ingress.admit(peer, TRANSPORT) {
            let mut s = Status::resource_exhausted(format!("too many messages from {peer} (rate-limited)"));
            if let Ok(v) = seconds(wait).to_string().parse() {
                s.metadata_mut().insert("retry-after", v);
            }
            return Err(s);
        }
        let proof = match req.metadata().get("authorization").map(|v| v.to_str()) {
            None => None,
            Some(Ok(p)) => Some(p.to_owned()),
            Some(Err(_)) => {
                count(&self.engine, Rejection::Malformed).await;
                return Err(Status::invalid_argument("the authorization metadata is not visible ASCII"));
            }
        };
        let oc = announced(&req);
        let body = req.into_inner();
        let reports = match wire::decode_batch(&body) {
            Ok(r) => r,
            Err(e) => {
                count(&self.engine, Rejection::Malformed).await;
                return Err(Status::invalid_argument(e.to_string()));
            }
        };
        let mut verdicts: Vec<pb::Verdict> = Vec::with_capacity(reports.len());
        let mut raws = Vec::with_capacity(reports.len());
        for r in reports {
            verdicts.push(verdict(Some(&r.raw), r.correlation_id));
            raws.push(r.raw);
        }
        let ids: Vec<String> = raws.iter().map(|r| r.csci_id.clone()).collect();
        let results = self
            .engine
            .ingest_message(raws, proof.as_deref(), &body, self.sender())
            .await
            .map_err(|f| Status::unauthenticated(format!("{} (unauthenticated)", f.detail)))?;
        let mut accepted = 0;
        let mut limited = Vec::new();
        for (i, (v, r)) in verdicts.iter_mut().zip(results).enumerate() {
            match r {
                Ok(()) => {
                    v.accepted = true;
                    accepted += 1;
                    answer(&self.engine, oc.as_ref(), &ids[i], v);
                }
                Err((reason, detail)) => {
                    *v = refused(std::mem::take(v), reason, detail);
                    if reason == Rejection::RateLimited {
                        limited.push((i, ids[i].clone()));
                    }
                }
            }
        }
        if !limited.is_empty() {
            // One engine query for every rate-limited report of the batch.
            let waits = self
                .engine
                .query(move |core| {
                    limited.into_iter().map(|(i, id)| (i, core.rate.retry_after(&id))).collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
            for (i, wait) in waits {
                verdicts[i].retry_after_seconds = seconds(wait.unwrap_or(Duration::from_secs(1)));
            }
        }
        if accepted > 0 {
            self.permit.establish();
        }
        Ok(Response::new(pb::BatchVerdict { accepted, verdicts }))
    }
}

/// The configured message limit, for the stream's final status.
#[derive(Clone, Copy)]
struct MaxMessage(usize);

type Reply = http::Response<tonic::body::Body>;
type ReplyFuture = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

type Service = tower::util::BoxCloneService<http::Request<hyper::body::Incoming>, Reply, Infallible>;

/// gRPC server reflection (v1, and v1alpha for older clients such as grpcio-reflection),
/// listing `cats.sma.v1.SciCollector` (not `SciAgent`, which SCIs serve); built once,
/// shared by every connection.
#[derive(Clone)]
struct Reflection {
    v1: Option<Service>,
    v1alpha: Option<Service>,
}

impl Reflection {
    fn new() -> Reflection {
        // proto/ also declares SciAgent, which SCIs serve and the C-SMA calls: the
        // collector's listener advertises what it serves.
        let b = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(DESCRIPTOR_SET)
                .with_service_name("cats.sma.v1.SciCollector")
                .with_service_name("grpc.reflection.v1.ServerReflection")
                .with_service_name("grpc.reflection.v1alpha.ServerReflection")
        };
        let v1 = b().build_v1().map(Service::new);
        let v1alpha = b().build_v1alpha().map(Service::new);
        if let Err(e) = v1.as_ref().and(v1alpha.as_ref()) {
            error!("SCI gRPC collection: server reflection unavailable: {e}");
        }
        Reflection { v1: v1.ok(), v1alpha: v1alpha.ok() }
    }
}

const COLLECTOR_PREFIX: &str = "/cats.sma.v1.SciCollector/";

/// One connection's requests: the collector, reflection, or UNIMPLEMENTED.
fn dispatch(
    collector: Arc<Collector>,
    max: usize,
    reflection: Reflection,
) -> impl Fn(http::Request<hyper::body::Incoming>) -> ReplyFuture + Clone {
    let server = pb::sci_collector_server::SciCollectorServer::new(collector.clone()).max_decoding_message_size(max);
    move |mut req| {
        let path = req.uri().path();
        if path.starts_with(COLLECTOR_PREFIX) {
            let flag = Arc::new(AtomicBool::new(false));
            req.extensions_mut().insert(Reached(flag.clone()));
            req.extensions_mut().insert(MaxMessage(max));
            let call = server.clone().oneshot(req);
            let engine = collector.engine.clone();
            return Box::pin(async move {
                let reply = call.await?;
                if flag.load(Ordering::Acquire) {
                    return Ok(reply);
                }
                // Refused before a handler saw it: by the framing (over the size limit,
                // compressed, cut short) or for an unknown method.
                let code = reply
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map(tonic::Code::from);
                match code {
                    None | Some(tonic::Code::Ok) => Ok(reply),
                    Some(tonic::Code::OutOfRange) => {
                        count(&engine, Rejection::Malformed).await;
                        Ok(too_large(max).into_http())
                    }
                    Some(_) => {
                        count(&engine, Rejection::Malformed).await;
                        Ok(reply)
                    }
                }
            });
        }
        let svc = if path.starts_with("/grpc.reflection.v1.ServerReflection/") {
            reflection.v1.clone()
        } else if path.starts_with("/grpc.reflection.v1alpha.ServerReflection/") {
            reflection.v1alpha.clone()
        } else {
            None
        };
        match svc {
            Some(s) => Box::pin(s.oneshot(req)),
            None => {
                let shown = crate::text::printable(path, 128);
                Box::pin(async move { Ok(Status::unimplemented(format!("no service at {shown}")).into_http()) })
            }
        }
    }
}

// ----- the listener --------------------------------------------------------------------

/// Serves until the settings change to disabled / another address (then rebinds) or the
/// sender is dropped. `bound` reports the address actually bound (port 0 resolved); the
/// generated server certificate, when one is needed, goes into `state_dir`.
pub async fn serve(
    engine: Engine,
    mut settings: watch::Receiver<GrpcSettings>,
    bound: watch::Sender<Option<SocketAddr>>,
    gate: Arc<Gate>,
    state_dir: PathBuf,
    status: Arc<TlsStatus>,
) {
    let reflection = Reflection::new();
    loop {
        let current = settings.borrow_and_update().clone();
        let opened = super::tls_status::open(
            crate::tls::server::SCI_GRPC,
            current.enabled,
            current.listen,
            (&current.tls, &current.tls_error),
            &state_dir,
            &status,
            &bound,
        )
        .await;
        let Some((tls, listener)) = opened else {
            if settings.changed().await.is_err() {
                return;
            }
            continue;
        };
        let addr = listener.local_addr().ok();
        let shown = addr.map(|a| a.to_string()).unwrap_or_default();
        let reloader = match &tls {
            Some(t) => {
                let st = t.status();
                info!(
                    "SCI collection over gRPC (TLS) accepting reports at {shown} (certificate {}, client certificates {})",
                    st.certificate_file.display(),
                    if st.client_ca.is_some() { st.client_auth.as_str() } else { "not asked for" }
                );
                status.set(TlsNow::Tls(t.clone()));
                Some(t.spawn_reloader())
            }
            None => {
                warn!(
                    "SCI collection over gRPC without TLS (h2c) accepting reports at {shown}: reports and their \
                     proofs travel in clear and no client certificate can authenticate an SCI \
                     (collection/grpc/tls/enabled is false)"
                );
                status.set(TlsNow::Plain);
                None
            }
        };
        let _ = bound.send(addr);
        loop {
            tokio::select! {
                changed = settings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *settings.borrow() != current {
                        break;
                    }
                }
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    // Over a cap: closed at once, before any TLS (counted and logged by the gate).
                    let Ok(permit) = gate.admit(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let (engine, max, refl) = (engine.clone(), current.max_message, reflection.clone());
                    match &tls {
                        Some(t) => tokio::spawn(serve_tls(stream, engine, max, permit, t.clone(), refl)),
                        None => tokio::spawn(serve_connection(TokioIo::new(stream), engine, max, permit, None, refl)),
                    };
                }
            }
        }
        if let Some(r) = reloader {
            r.abort();
        }
    }
}

/// One TLS connection: the handshake within the gate's deadline, the client certificate's
/// CSCI-ID, then HTTP/2 until done, or until a reload (a new CRL) makes the certificate
/// unacceptable.
async fn serve_tls(
    stream: tokio::net::TcpStream,
    engine: Engine,
    max: usize,
    permit: Arc<Permit>,
    tls: Arc<ServerTls>,
    reflection: Reflection,
) {
    let (stream, peer) = match tls.accept(stream, permit.limits().handshake_timeout()).await {
        Ok(x) => x,
        Err(r) => return refused_connection(&engine, &tls, &permit, None, r).await,
    };
    let mapped = peer.mapped.as_ref().map(|m| m.name.clone());
    let csci = mapped.clone().filter(|n| report::check_id(IdKind::CsciId, n).is_ok());
    if csci.is_none() && mapped.is_some() {
        let shown = report::display_id(IdKind::CsciId, mapped.as_deref().unwrap_or(""));
        let detail = format!("the client certificate maps to {shown}, which is not a CSCI-ID");
        if tls.settings().client_auth == ClientAuth::Required {
            let r = Refused { failure: Failure::Unmapped, detail };
            return refused_connection(&engine, &tls, &permit, None, r).await;
        }
        debug!(peer = %permit.peer, "{detail}; the connection is not certificate-authenticated");
    }
    if csci.is_some() {
        // A verified certificate with a CSCI-ID is authentication: out of the pending pools.
        permit.establish();
    }
    let invalidated = tls.invalidated(&peer.chain);
    tokio::select! {
        _ = serve_connection(TokioIo::new(stream), engine.clone(), max, permit.clone(), csci.clone(), reflection) => {}
        r = invalidated => refused_connection(&engine, &tls, &permit, csci, r).await,
    }
}

/// A connection refused at (or after) the handshake, as HTTP push counts it: by reason; a
/// certificate problem is also an SCI authentication failure (logged, notified, audited).
async fn refused_connection(engine: &Engine, tls: &ServerTls, permit: &Permit, claimed: Option<CsciId>, r: Refused) {
    tls.record(r.failure);
    if r.failure == Failure::Timeout {
        permit.gate().timed_out(permit.peer, Timeout::Handshake);
        return;
    }
    if !r.failure.is_authentication() {
        debug!(peer = %permit.peer, "SCI gRPC collection: TLS handshake failed: {}", r.detail);
        return;
    }
    let sender = Sender { transport: TRANSPORT, address: Some(permit.peer.ip()), ..Sender::default() };
    let detail = format!("TLS client certificate refused ({}): {}", r.failure.as_str(), r.detail);
    engine.submit_peer(move |core| core.connection_auth_failure(&sender, claimed, detail)).await;
}

/// HTTP/2 on one connection (plain: prior knowledge, as gRPC clients speak h2c), bounded in
/// streams and header size, dropped when the authentication deadline passes with no
/// accepted report.
async fn serve_connection<I>(
    io: I,
    engine: Engine,
    max: usize,
    permit: Arc<Permit>,
    certified: Option<CsciId>,
    reflection: Reflection,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let collector = Arc::new(Collector { engine, permit: permit.clone(), certified });
    let svc = hyper::service::service_fn(dispatch(collector, max, reflection));
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let conn = builder.serve_connection(io, svc);
    tokio::select! {
        r = conn => if let Err(e) = r {
            debug!(peer = %permit.peer, "SCI gRPC connection ended: {e}");
        },
        // No accepted report (nor certificate) in time: dropped.
        _ = permit.auth_deadline() => {}
    }
}

//! The gRPC stream to a C-PS (seed 004, Protocol Adapter, centralized model: "the C-SMA
//! establishes a gRPC stream to the C-PS for bidirectional communication"): the
//! `cats.sma.v1.CpsLink/Session` call of `proto/cats/sma/v1/cps.proto`, documented in
//! `docs/cps-protocol.md` ("gRPC stream").
//!
//! A peer whose url is `grpc://` (HTTP/2 without TLS) or `grpcs://` (TLS with the peer's
//! trusted CA and optional client certificate, ALPN h2) is driven by the same session as a
//! REST peer (`session.rs`: sequence numbers, the bounded buffer and its drops, backoff,
//! fallback, full sync): opening the stream (Hello → Welcome) is the reconciliation, an
//! Advertisement or Keepalive waits for its Ack (or Refusal) as a POST waits for its reply.
//! One reader task per stream takes what the C-PS sends on its own: full-sync requests
//! (handed to the session), queries (answered from the site as last advertised) and policy
//! updates (one worker applies them through the datastore, `policy.rs`).
//!
//! Bad input from the C-PS: a message that does not decode, fails its MAC or replays a
//! counter is refused with a `Rejected` message and counted by reason; the stream goes on.
//! A message over the size limit, or a stream the C-PS ends, ends the stream: the session
//! backs off and opens a new one.

pub mod policy;
pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use self::policy::{Northbound, PolicyOutcome};
use self::wire::{CpsEvent, PolicyUpdate, Verifier, Welcome};
use super::auth::{sign, NonceSource, Psk, Signed};
use super::session::{lock, DeliveryError, Peer, Registry};
use super::signing::{RequestBinding, SigningKey};
use super::transport::TransportError;
use crate::engine::collect::grpc::codec::RawCodec;

/// The messages and the C-PS side's server trait, generated from
/// `proto/cats/sma/v1/cps.proto` by `build.rs`.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/cps/cats.sma.v1.rs"));
}

/// The encoded FileDescriptorSet of `cps.proto`, for a C-PS's server reflection.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cps/cps_descriptor.bin"));

/// C-SMA messages queued towards the stream (HTTP/2 flow control holds the rest back).
const OUTBOUND: usize = 16;
/// Policy updates waiting for the worker; past that one is refused (resource-denied).
const POLICY_QUEUE: usize = 4;
/// Rejected C-PS messages logged at warn per stream; the rest at debug (the counters have
/// them all), so a C-PS cannot fill the log at the rate it sends.
const REJECTIONS_LOGGED: u32 = 8;

/// Whether `url` names a gRPC peer.
pub fn is_grpc_url(url: &str) -> bool {
    let l = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    l.starts_with("grpc://") || l.starts_with("grpcs://")
}

/// Where a gRPC C-PS is: `grpc://host:port` or `grpcs://host:port` (no path, no query).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcEndpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl GrpcEndpoint {
    pub fn parse(url: &str) -> Result<GrpcEndpoint, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("url '{url}': {e}"))?;
        let tls = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("grpcs") => true,
            Some("grpc") => false,
            _ => return Err(format!("url '{url}': the scheme must be grpc or grpcs")),
        };
        let host = uri.host().ok_or_else(|| format!("url '{url}': no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().ok_or_else(|| format!("url '{url}': a grpc url needs a port"))?;
        if uri.query().is_some() || !matches!(uri.path(), "" | "/") {
            return Err(format!("url '{url}': a grpc url has no path or query (the call is {})", wire::SESSION_PATH));
        }
        Ok(GrpcEndpoint { tls, host, port })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// What seals the C-SMA's messages: the JWS under the signing key and, with a PSK, the
/// HMAC, both over the body bytes with a fresh timestamp and nonce (as REST's headers).
#[derive(Clone)]
pub struct Signer {
    pub nonces: Arc<NonceSource>,
    pub signing: Option<Arc<SigningKey>>,
    pub psk: Option<Psk>,
    pub csma_id: String,
}

impl Signer {
    pub fn seal(&self, kind: pb::csma_body::Kind) -> pb::CsmaMessage {
        let body = wire::body(kind);
        let timestamp_ms = Utc::now().timestamp_millis();
        let nonce = self.nonces.next();
        let jws = self
            .signing
            .as_ref()
            .map(|k| {
                let binding = RequestBinding {
                    method: wire::SIGNED_METHOD.into(),
                    path: wire::SESSION_PATH.into(),
                    csma_id: self.csma_id.clone(),
                    timestamp: timestamp_ms,
                    nonce,
                };
                k.sign(&binding, &body)
            })
            .unwrap_or_default();
        let (key_id, mac) = self
            .psk
            .as_ref()
            .map(|p| {
                let s = Signed {
                    method: wire::SIGNED_METHOD,
                    path: wire::SESSION_PATH,
                    csma_id: &self.csma_id,
                    timestamp_ms,
                    nonce,
                };
                (p.key_id.clone(), sign(&p.secret, &s, &body))
            })
            .unwrap_or_default();
        pb::CsmaMessage { body, timestamp_ms, nonce, jws, key_id, mac }
    }
}

/// Counters of the stream (YANG `session/grpc`).
#[derive(Debug, Default)]
pub struct Counters {
    pub streams_opened: AtomicU64,
    pub full_sync_requests: AtomicU64,
    pub queries_answered: AtomicU64,
    pub policy_applied: AtomicU64,
    pub policy_refused: AtomicU64,
    pub rejected_malformed: AtomicU64,
    pub rejected_unauthenticated: AtomicU64,
    pub rejected_replayed: AtomicU64,
    pub rejected_unsolicited: AtomicU64,
}

impl Counters {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the stream's tasks share with the link.
struct Shared {
    counters: Arc<Counters>,
    /// The C-PS asked for a full sync; the session takes it.
    full_sync: AtomicBool,
    /// The session waits for a reply (Welcome, Ack, Refusal): any other is unsolicited.
    awaiting: AtomicBool,
    /// Why the current stream ended, with the generation of the stream it belongs to.
    broken: Mutex<(u64, Option<String>)>,
    generation: AtomicU64,
    policy_user: Option<String>,
    northbound: RwLock<Option<Arc<dyn Northbound>>>,
    /// Held while a policy update is applied: a stream that replaced a broken one waits for
    /// the old stream's update to finish before it looks at [`Shared::applied`].
    applying: Arc<tokio::sync::Mutex<()>>,
    /// The last updates applied over any of this peer's streams, so that one sent again
    /// (the C-PS did not get its result before the stream broke) is answered, not applied
    /// twice.
    applied: Arc<Mutex<AppliedUpdates>>,
}

/// The policy updates applied in the last [`AppliedUpdates::FOR`], at most
/// [`AppliedUpdates::KEEP`]: `update_id`, a SHA-256 of the format and edit, the outcome and
/// when. Only applied updates are kept: a refused one sent again is tried again (the NACM
/// rule, the lock or the free identity it lacked may be there now). The same id with
/// another edit is a new update; the time bound keeps a C-PS that restarted and numbers
/// from 1 again from being answered from memory for long.
#[derive(Default)]
struct AppliedUpdates(std::collections::VecDeque<(u64, [u8; 32], PolicyOutcome, std::time::Instant)>);

impl AppliedUpdates {
    const KEEP: usize = 256;
    /// Longer than the stream's longest reconnect backoff (60 s), with room.
    const FOR: Duration = Duration::from_secs(300);

    fn digest(u: &PolicyUpdate) -> [u8; 32] {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update([u.format as u8]);
        h.update(u.config.as_bytes());
        h.finalize().into()
    }

    fn find(&mut self, id: u64, digest: &[u8; 32]) -> Option<PolicyOutcome> {
        while self.0.front().is_some_and(|(.., at)| at.elapsed() > Self::FOR) {
            self.0.pop_front();
        }
        self.0.iter().rev().find(|(i, d, ..)| *i == id && d == digest).map(|(_, _, o, _)| o.clone())
    }

    fn record(&mut self, id: u64, digest: [u8; 32], o: &PolicyOutcome) {
        if !o.applied {
            return;
        }
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back((id, digest, o.clone(), std::time::Instant::now()));
    }
}

/// One open stream; dropping it ends the stream (its request side closes, its tasks stop).
struct Open {
    tx: mpsc::Sender<pb::CsmaMessage>,
    replies: mpsc::Receiver<CpsEvent>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Open {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// What a stream's tasks need of the session.
#[derive(Clone)]
pub struct StreamContext {
    pub peer: Arc<Peer>,
    pub registry: Arc<Registry>,
    pub signer: Signer,
}

/// The gRPC transport of one peer.
pub struct GrpcLink {
    endpoint: GrpcEndpoint,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    timeout: Duration,
    max_message: usize,
    shared: Arc<Shared>,
    open: tokio::sync::Mutex<Option<Open>>,
}

fn closed(why: impl Into<String>) -> DeliveryError {
    DeliveryError::Transport(TransportError::Grpc(why.into()))
}

fn status_text(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), crate::text::printable(s.message(), 200))
}

impl GrpcLink {
    /// `tls`: the peer's client configuration (trusted CA, client certificate) and server
    /// name; required for grpcs, refused for grpc. `policy_user`: the NACM user the C-PS
    /// acts as (None: its policy updates are refused).
    pub fn new(
        endpoint: GrpcEndpoint,
        tls: Option<(Arc<rustls::ClientConfig>, Option<String>)>,
        timeout: Duration,
        policy_user: Option<String>,
    ) -> Result<GrpcLink, String> {
        let tls = match (endpoint.tls, tls) {
            (true, Some((cfg, name))) => {
                let name = name.unwrap_or_else(|| endpoint.host.clone());
                let sn = ServerName::try_from(name.clone()).map_err(|e| format!("server name '{name}': {e}"))?;
                let mut cfg = (*cfg).clone();
                cfg.alpn_protocols = vec![b"h2".to_vec()];
                Some((tokio_rustls::TlsConnector::from(Arc::new(cfg)), sn))
            }
            (true, None) => return Err("a grpcs url needs the 'tls' container (trusted-ca-file)".into()),
            (false, Some(_)) => return Err("'tls' is configured but the url is not grpcs".into()),
            (false, None) => None,
        };
        Ok(GrpcLink {
            endpoint,
            tls,
            timeout,
            max_message: super::transport::reply_limit(),
            shared: Arc::new(Shared {
                counters: Arc::new(Counters::default()),
                full_sync: AtomicBool::new(false),
                awaiting: AtomicBool::new(false),
                broken: Mutex::new((0, None)),
                generation: AtomicU64::new(0),
                policy_user,
                northbound: RwLock::new(None),
                applying: Default::default(),
                applied: Default::default(),
            }),
            open: tokio::sync::Mutex::new(None),
        })
    }

    /// Where policy updates go (the agent's management core).
    pub fn set_northbound(&self, nb: Option<Arc<dyn Northbound>>) {
        *self.shared.northbound.write().unwrap_or_else(|e| e.into_inner()) = nb;
    }

    /// The stream's counters (the peer keeps them for the operational state; it must not
    /// keep the link: the stream's tasks hold the peer).
    pub fn counters(&self) -> Arc<Counters> {
        self.shared.counters.clone()
    }

    /// Whether the C-PS asked for a full sync since the last call.
    pub fn take_full_sync(&self) -> bool {
        self.shared.full_sync.swap(false, Ordering::AcqRel)
    }

    /// Why the open stream ended, if it did.
    pub fn broken(&self) -> Option<String> {
        let g = self.shared.generation.load(Ordering::Acquire);
        let b = lock(&self.shared.broken);
        (b.0 == g).then(|| b.1.clone()).flatten()
    }

    /// Ends the stream (the session stops, or starts over).
    pub async fn close(&self) {
        self.open.lock().await.take();
    }

    /// Opens a new stream (ending any previous one): Hello, then the C-PS's Welcome.
    pub async fn open(&self, ctx: StreamContext) -> Result<Welcome, DeliveryError> {
        let mut guard = self.open.lock().await;
        guard.take();
        self.shared.full_sync.store(false, Ordering::Release);
        let generation = self.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut open = match tokio::time::timeout(self.timeout, self.connect(ctx, generation)).await {
            Ok(r) => r?,
            Err(_) => return Err(DeliveryError::Transport(TransportError::Timeout(self.timeout))),
        };
        Counters::bump(&self.shared.counters.streams_opened);
        match self.reply(&mut open).await? {
            CpsEvent::Welcome(w) => {
                *guard = Some(open);
                Ok(w)
            }
            CpsEvent::Refusal { reason, detail } => Err(refused("Hello", &reason, &detail)),
            other => Err(DeliveryError::BadReply("STREAM", format!("the C-PS answered Hello with {other:?}"))),
        }
    }

    /// Sends one message the C-PS answers (Advertisement, Keepalive) and waits for the
    /// answer: an Ack, or a Refusal as [`DeliveryError::Rejected`]. A stream that fails
    /// here is dropped.
    pub async fn exchange(
        &self,
        signer: &Signer,
        what: &'static str,
        kind: pb::csma_body::Kind,
    ) -> Result<super::wire::Ack, DeliveryError> {
        let mut guard = self.open.lock().await;
        let Some(open) = guard.as_mut() else { return Err(closed("no stream open")) };
        self.shared.awaiting.store(true, Ordering::Release);
        let sent = tokio::time::timeout(self.timeout, open.tx.send(signer.seal(kind))).await;
        let result = match sent {
            Err(_) => Err(DeliveryError::Transport(TransportError::Timeout(self.timeout))),
            Ok(Err(_)) => Err(closed(self.broken().unwrap_or_else(|| "the stream ended".into()))),
            Ok(Ok(())) => match self.reply(open).await {
                Ok(CpsEvent::Ack(a)) => Ok(a),
                Ok(CpsEvent::Refusal { reason, detail }) => Err(refused(what, &reason, &detail)),
                Ok(other) => Err(DeliveryError::BadReply("STREAM", format!("the C-PS answered {what} with {other:?}"))),
                Err(e) => Err(e),
            },
        };
        // A refusal is an answer: the stream itself is fine.
        if matches!(&result, Err(e) if !matches!(e, DeliveryError::Rejected { .. })) {
            guard.take();
        }
        result
    }

    async fn reply(&self, open: &mut Open) -> Result<CpsEvent, DeliveryError> {
        let r = tokio::select! {
            r = open.replies.recv() => r.ok_or_else(|| closed(self.broken().unwrap_or_else(|| "the stream ended".into()))),
            _ = tokio::time::sleep(self.timeout) => Err(DeliveryError::Transport(TransportError::Timeout(self.timeout))),
        };
        self.shared.awaiting.store(false, Ordering::Release);
        r
    }

    /// TCP (and TLS), HTTP/2, the call with Hello as its first message, the reader and the
    /// policy worker.
    async fn connect(&self, ctx: StreamContext, generation: u64) -> Result<Open, DeliveryError> {
        let authority = self.endpoint.authority();
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(|e| DeliveryError::Transport(TransportError::Connect(format!("{authority}: {e}"))))?;
        let _ = tcp.set_nodelay(true);
        let h2 = |e: hyper::Error| DeliveryError::Transport(TransportError::Http(e.to_string()));
        let (send, conn): (_, JoinHandle<()>) = match &self.tls {
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| DeliveryError::Transport(TransportError::Tls(e.to_string())))?;
                let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await
                    .map_err(h2)?;
                (send, tokio::spawn(async move { drop(conn.await) }))
            }
            None => {
                let (send, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.map_err(h2)?;
                (send, tokio::spawn(async move { drop(conn.await) }))
            }
        };
        let scheme = if self.endpoint.tls { "https" } else { "http" };
        let origin = format!("{scheme}://{authority}");
        let svc = tower::service_fn(move |mut req: hyper::Request<tonic::body::Body>| {
            let mut send = send.clone();
            let uri = format!("{origin}{}", req.uri().path());
            async move {
                *req.uri_mut() = uri.parse().map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
                send.ready().await.map_err(|e| e.to_string())?;
                send.send_request(req).await.map_err(|e| e.to_string())
            }
        });
        let mut grpc = tonic::client::Grpc::new(svc)
            .max_decoding_message_size(self.max_message)
            .max_encoding_message_size(super::wire::MAX_BODY);
        let (tx, rx) = mpsc::channel(OUTBOUND);
        let id = ctx.registry.identity();
        let hello = ctx.signer.seal(pb::csma_body::Kind::Hello(pb::Hello {
            csma_id: id.csma_id.clone(),
            site_id: id.site_id.clone(),
            oc_supported: crate::cps::overload::announcement(&ctx.registry).as_ref().map(wire::pb_supported),
        }));
        let hello_nonce = hello.nonce;
        let _ = tx.try_send(hello);
        grpc.ready().await.map_err(|e| closed(format!("HTTP/2: {e}")))?;
        let path = hyper::http::uri::PathAndQuery::from_static(wire::SESSION_PATH);
        let resp = grpc
            .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, RawCodec::<pb::CsmaMessage>::default())
            .await
            .map_err(|s| closed(format!("the C-PS refused the stream: {}", status_text(&s))))?;
        let inbound = resp.into_inner();
        let (reply_tx, replies) = mpsc::channel(1);
        // The Welcome is awaited from before the reader exists: it may already be on its way
        // (sent right after the response headers) and must not be taken for unsolicited.
        self.shared.awaiting.store(true, Ordering::Release);
        let (policy_tx, policy_rx) = mpsc::channel(POLICY_QUEUE);
        let verifier = Verifier {
            psk: ctx.signer.psk.as_ref().map(|p| p.secret.clone()),
            csma_id: id.csma_id,
            hello_nonce,
            last_counter: 0,
        };
        let reader = Reader {
            shared: self.shared.clone(),
            ctx: ctx.clone(),
            out: tx.clone(),
            replies: reply_tx,
            policy: policy_tx,
            generation,
        };
        let reader = tokio::spawn(reader.run(inbound, verifier));
        let worker = tokio::spawn(policy_worker(self.shared.clone(), ctx, tx.clone(), policy_rx));
        Ok(Open { tx, replies, tasks: vec![conn, reader, worker] })
    }
}

/// A Refusal as REST's status: "unknown-site" 404, "sequence-mismatch" 409, else 400.
fn refused(what: &'static str, reason: &str, detail: &str) -> DeliveryError {
    let status = match reason {
        "unknown-site" => 404,
        "sequence-mismatch" => 409,
        _ => 400,
    };
    let reason = if detail.is_empty() { reason.to_owned() } else { format!("{reason}: {detail}") };
    DeliveryError::Rejected { method: "STREAM", path: what.to_owned(), status, reason }
}

struct Reader {
    shared: Arc<Shared>,
    ctx: StreamContext,
    out: mpsc::Sender<pb::CsmaMessage>,
    replies: mpsc::Sender<CpsEvent>,
    policy: mpsc::Sender<PolicyUpdate>,
    generation: u64,
}

impl Reader {
    async fn run(self, mut inbound: tonic::Streaming<Bytes>, mut v: Verifier) {
        let name = self.ctx.peer.settings.name.clone();
        let c = &self.shared.counters;
        let mut rejections = 0u32;
        let mut log_rejection = |reason: &str, detail: &str| {
            rejections = rejections.saturating_add(1);
            if rejections <= REJECTIONS_LOGGED {
                tracing::warn!(c_ps = %name, reason, error = %detail, "C-PS message rejected");
                if rejections == REJECTIONS_LOGGED {
                    tracing::warn!(c_ps = %name, "further rejections on this stream are logged at debug only \
                        (counted in session/grpc/rejected-*)");
                }
            } else {
                tracing::debug!(c_ps = %name, reason, error = %detail, "C-PS message rejected");
            }
        };
        let end = loop {
            let bytes = match inbound.message().await {
                Ok(Some(b)) => b,
                Ok(None) => break "the C-PS ended the stream".to_owned(),
                Err(s) => break format!("the stream ended: {}", status_text(&s)),
            };
            let decoded = wire::decode_with_oc(&bytes, &mut v).map(|(event, oc)| {
                // Seed 003: the answer and the report, from a message that authenticated.
                crate::cps::overload::take(&self.ctx.peer, &self.ctx.registry, oc.supported, oc.olr);
                event
            });
            let sent = match decoded {
                Ok(CpsEvent::Overload) => true,
                Ok(CpsEvent::FullSync { reason }) => {
                    tracing::info!(c_ps = %name, %reason, "C-PS asked for a full sync over its stream");
                    Counters::bump(&c.full_sync_requests);
                    self.shared.full_sync.store(true, Ordering::Release);
                    self.ctx.peer.notify.notify_one();
                    true
                }
                Ok(CpsEvent::Query { query_id, cs_id }) => {
                    let answer = self.answer(query_id, cs_id.as_deref());
                    Counters::bump(&c.queries_answered);
                    self.out.send(self.ctx.signer.seal(answer)).await.is_ok()
                }
                Ok(CpsEvent::Policy(u)) => match self.policy.try_send(u) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(u)) => {
                        let o = PolicyOutcome::refused("resource-denied", "too many policy updates pending");
                        Counters::bump(&c.policy_refused);
                        self.out.send(self.ctx.signer.seal(result(u.update_id, &o))).await.is_ok()
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                },
                Ok(reply) => {
                    if self.shared.awaiting.load(Ordering::Acquire) && self.replies.try_send(reply).is_ok() {
                        true
                    } else {
                        Counters::bump(&c.rejected_unsolicited);
                        log_rejection("unsolicited", "a reply nothing asked for");
                        self.reject("unsolicited", "a Welcome, Ack or Refusal that answers nothing").await
                    }
                }
                Err(e) => {
                    Counters::bump(match e {
                        wire::DecodeError::Malformed(_) => &c.rejected_malformed,
                        wire::DecodeError::Unauthenticated(_) => &c.rejected_unauthenticated,
                        wire::DecodeError::Replayed { .. } => &c.rejected_replayed,
                    });
                    log_rejection(e.reason(), &e.to_string());
                    self.reject(e.reason(), &e.to_string()).await
                }
            };
            if !sent {
                break "the stream ended".to_owned();
            }
        };
        tracing::info!(c_ps = %name, reason = %end, "C-PS stream ended");
        *lock(&self.shared.broken) = (self.generation, Some(end));
        self.ctx.peer.notify.notify_one();
    }

    async fn reject(&self, reason: &str, detail: &str) -> bool {
        let r = pb::Rejected { reason: reason.into(), detail: crate::text::printable(detail, 200) };
        self.out.send(self.ctx.signer.seal(pb::csma_body::Kind::Rejected(r))).await.is_ok()
    }

    fn answer(&self, query_id: u64, cs_id: Option<&str>) -> pb::csma_body::Kind {
        let peer = &self.ctx.peer;
        let view = lock(&self.ctx.registry.current);
        let allowed = |c: &str| peer.allowed(c);
        let a = match view.answer(&allowed, peer.settings.granularity, cs_id) {
            Ok((r, rows)) => pb::QueryAnswer { query_id, error: String::new(), state: Some(wire::report(&r, &rows)) },
            Err(e) => pb::QueryAnswer { query_id, error: e.reason().into(), state: None },
        };
        pb::csma_body::Kind::Answer(a)
    }
}

fn result(update_id: u64, o: &PolicyOutcome) -> pb::csma_body::Kind {
    pb::csma_body::Kind::PolicyResult(pb::PolicyResult {
        update_id,
        applied: o.applied,
        error_tag: o.error_tag.clone(),
        message: o.message.clone(),
        changes: o.changes,
    })
}

/// Applies the stream's policy updates one at a time, off the reader (a commit may take a
/// while; the stream goes on meanwhile).
async fn policy_worker(
    shared: Arc<Shared>,
    ctx: StreamContext,
    out: mpsc::Sender<pb::CsmaMessage>,
    mut rx: mpsc::Receiver<PolicyUpdate>,
) {
    let name = ctx.peer.settings.name.clone();
    while let Some(u) = rx.recv().await {
        let nb = shared.northbound.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut repeated = false;
        let outcome = match (&shared.policy_user, nb) {
            (None, _) => {
                crate::mgmt::audit::operation(
                    policy::AUDIT_TRANSPORT,
                    &format!("(c-ps {name})"),
                    0,
                    policy::AUDIT_OPERATION,
                    Some("access-denied"),
                );
                tracing::warn!(c_ps = %name, update_id = u.update_id, "policy update refused: the peer has no policy-user");
                PolicyOutcome::refused(
                    "access-denied",
                    "this C-PS acts as no NACM user (c-ps/peer/policy-user is not set): policy updates are refused",
                )
            }
            (Some(_), None) => {
                PolicyOutcome::refused("operation-not-supported", "no management datastore to apply it to")
            }
            (Some(user), Some(nb)) => {
                // The guard moves into the blocking apply: if this stream breaks meanwhile,
                // the apply still finishes and records its outcome before the next stream's
                // worker may look.
                let guard = shared.applying.clone().lock_owned().await;
                let digest = AppliedUpdates::digest(&u);
                let seen = lock(&shared.applied).find(u.update_id, &digest);
                match seen {
                    Some(o) => {
                        repeated = true;
                        tracing::info!(c_ps = %name, update_id = u.update_id,
                            "policy update sent again: answered with its first outcome, not applied twice");
                        o
                    }
                    None => {
                        let (user, name, u2, applied) = (user.clone(), name.clone(), u.clone(), shared.applied.clone());
                        tokio::task::spawn_blocking(move || {
                            let o = nb.apply_policy(&name, &user, &u2);
                            lock(&applied).record(u2.update_id, digest, &o);
                            drop(guard);
                            o
                        })
                        .await
                        .unwrap_or_else(|e| {
                            PolicyOutcome::refused("operation-failed", format!("policy update failed: {e}"))
                        })
                    }
                }
            }
        };
        if !repeated {
            Counters::bump(if outcome.applied {
                &shared.counters.policy_applied
            } else {
                &shared.counters.policy_refused
            });
        }
        if out.send(ctx.signer.seal(result(u.update_id, &outcome))).await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cps::reference::{CpsConfig, CpsState, RefGrpc};
    use crate::cps::session::{Identity, Role};

    fn context() -> StreamContext {
        let peer = Peer::new(crate::cps::session::tests::settings("ref", Role::Primary, 1));
        let registry = Registry::new(Identity { csma_id: "c".into(), site_id: "s".into() });
        let signer = Signer { nonces: Arc::new(NonceSource::new()), signing: None, psk: None, csma_id: "c".into() };
        StreamContext { peer: Arc::new(peer), registry, signer }
    }

    // Seed 004, Protocol Adapter (gRPC stream): the C-PS answers Hello with its Welcome as
    // soon as it likes; a Welcome the reader takes before the session waits for it is still
    // the answer, never an unsolicited reply (which cost a request-timeout and a new stream).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seed004_protocol_adapter_a_welcome_read_before_the_session_waits_is_its_answer() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let g = RefGrpc::start(addr, CpsState::new(CpsConfig::default()).unwrap()).await.unwrap();
        let ep = GrpcEndpoint::parse(&format!("grpc://{}", g.addr)).unwrap();
        let link = GrpcLink::new(ep, None, Duration::from_secs(2), None).unwrap();
        let mut open = link.connect(context(), 1).await.unwrap();
        // Let the reader take the Welcome first.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while open.replies.is_empty()
            && Counters::get(&link.shared.counters.rejected_unsolicited) == 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            Counters::get(&link.shared.counters.rejected_unsolicited),
            0,
            "the Welcome was taken as unsolicited"
        );
        assert!(matches!(link.reply(&mut open).await, Ok(CpsEvent::Welcome(_))));
        drop(open);
        g.stop().await;
    }

    #[test]
    fn grpc_urls() {
        assert!(is_grpc_url("grpcs://cps:8443") && is_grpc_url("GRPC://h:1") && !is_grpc_url("https://h"));
        assert_eq!(
            GrpcEndpoint::parse("grpcs://cps.example:8443").unwrap(),
            GrpcEndpoint { tls: true, host: "cps.example".into(), port: 8443 }
        );
        assert_eq!(GrpcEndpoint::parse("grpc://[::1]:9/").unwrap().authority(), "[::1]:9");
        assert!(GrpcEndpoint::parse("grpc://h").is_err(), "a port is required");
        assert!(GrpcEndpoint::parse("grpc://h:1/x").is_err());
        assert!(GrpcEndpoint::parse("https://h:1").is_err());
    }
}

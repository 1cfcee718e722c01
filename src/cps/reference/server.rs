//! The reference C-PS's HTTP(S) server: the seed 004 REST resources, checked (signature,
//! timestamp window, nonce replay, C-SMA owning the site), applied to the Computing
//! Service Table, plus the path-selection query of seed 000.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, ACCEPT, CONTENT_ENCODING, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::config::CpsConfig;
use super::cst::{Cst, CstError};
use crate::cps::auth::{sign_reply_oc, AuthError, Presented, ReplyOc, Verifier, H_REPLY_SIGNATURE};
use crate::cps::codec::Encoding;
use crate::cps::session::decode_segment;
use crate::cps::signing::{JwsVerifier, H_JWS};
use crate::cps::wire::{
    gunzip, Ack, ErrorBody, Keepalive, MetricBatch, ReportKind, SciUpdate, SiteState, H_CSMA_ID, H_KEY_ID, H_NONCE,
    H_SEQUENCE, H_SIGNATURE, H_SITE_ID, H_TIMESTAMP, KEEPALIVE_PATH, MAX_BODY, METRICS_PATH, ROOT_ACK, ROOT_BATCH,
    ROOT_ERROR, ROOT_KEEPALIVE, ROOT_SCI, ROOT_SCI_STATE, ROOT_SITE,
};
use crate::overload::wire::{Supported, H_OC_OLR, H_OC_SUPPORTED};

/// What the C-PS keeps; shared so a test can restart the server keeping it (a partition) or
/// start with a fresh one (a restart that lost state).
pub struct CpsState {
    pub cst: Mutex<Cst>,
    pub verifier: Mutex<Verifier>,
    /// Checks the C-SMAs' Ed25519 signatures (when trusted keys are configured).
    pub jws: Mutex<JwsVerifier>,
    psks: BTreeMap<String, Vec<u8>>,
    /// Refusals per reason (`bad-signature`, `stale-timestamp`, `replayed-nonce`, ...).
    pub refused: Mutex<BTreeMap<String, u64>>,
    pub requests: std::sync::atomic::AtomicU64,
    /// /cats requests in the current and the previous 10-second window (the load behind
    /// the refresh hint).
    load: Mutex<(std::time::Instant, u64, u64)>,
    /// Seed 003: the overload report this C-PS sends (`overload.rs`).
    pub(crate) overload: Mutex<super::overload::RefOverload>,
    pub config: CpsConfig,
}

impl CpsState {
    pub fn new(config: CpsConfig) -> Result<Arc<CpsState>, String> {
        config.check()?;
        let verifier = Verifier::new(config.psks()?, i64::from(config.timestamp_window) * 1000);
        let jws = JwsVerifier::new(config.csma_keys()?, i64::from(config.timestamp_window) * 1000);
        let psks = config.psks()?.into_iter().map(|k| (k.key_id, k.secret)).collect();
        Ok(Arc::new(CpsState {
            cst: Mutex::new(Cst::default()),
            verifier: Mutex::new(verifier),
            jws: Mutex::new(jws),
            psks,
            refused: Mutex::new(BTreeMap::new()),
            requests: Default::default(),
            load: Mutex::new((std::time::Instant::now(), 0, 0)),
            overload: Mutex::new(Default::default()),
            config,
        }))
    }

    const LOAD_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

    pub(crate) fn tick(&self) {
        let mut l = lock(&self.load);
        let now = std::time::Instant::now();
        let elapsed = now.saturating_duration_since(l.0);
        if elapsed >= Self::LOAD_WINDOW * 2 {
            *l = (now, 0, 0);
        } else if elapsed >= Self::LOAD_WINDOW {
            *l = (l.0 + Self::LOAD_WINDOW, 0, l.1);
        }
        l.1 += 1;
    }

    /// Requests per second over the last full window (or the current one while the first).
    pub fn load(&self) -> f64 {
        let l = lock(&self.load);
        let secs = Self::LOAD_WINDOW.as_secs_f64();
        if l.2 > 0 {
            l.2 as f64 / secs
        } else {
            l.1 as f64 / secs
        }
    }

    pub fn refused(&self, reason: &str) -> u64 {
        lock(&self.refused).get(reason).copied().unwrap_or(0)
    }

    /// The proofs of one C-SMA message over `body`, as sent (seed 004, Metric Integrity):
    /// the PSK MAC and the C-SMA's JWS, each when configured, for REST (the request's method
    /// and path) and the gRPC stream (`STREAM` and the call's path). Both verifiers are held
    /// (always in this order) from check to accept, and the nonces are recorded only once
    /// every proof passed: two copies of one message cannot both pass, and a message with
    /// one good proof and one forged cannot burn a nonce. Returns the PSK a valid MAC was
    /// made with, as the reply's key, or the error and what it refused.
    pub(crate) fn authenticate(
        &self,
        method: &str,
        path: &str,
        csma: &str,
        psk: &Presented<'_>,
        jws: Option<&str>,
        body: &[u8],
    ) -> Result<Option<ReplyKey>, (AuthError, &'static str)> {
        let now = chrono::Utc::now().timestamp_millis();
        let mut psk_verifier = lock(&self.verifier);
        let mut jws_verifier = lock(&self.jws);
        let psk = match self.config.keys.is_empty() {
            true => None,
            false => Some(psk_verifier.check(method, path, csma, psk, body, now).map_err(|e| (e, "a request"))?),
        };
        let jws = match jws_verifier.is_empty() {
            true => None,
            false => {
                Some(jws_verifier.check(method, path, csma, jws, body, now).map_err(|e| (e, "a report signature"))?)
            }
        };
        let reply = psk.as_ref().and_then(|a| {
            Some(ReplyKey { secret: self.psks.get(&a.key_id)?.clone(), csma: csma.to_owned(), nonce: a.nonce })
        });
        if let Some(a) = psk {
            psk_verifier.accept(a);
        }
        if let Some(a) = jws {
            jws_verifier.accept(a);
        }
        Ok(reply)
    }

    pub(crate) fn count(&self, reason: &str) {
        *lock(&self.refused).entry(reason.to_owned()).or_default() += 1;
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Binds `addr` with SO_REUSEADDR (a restarted server gets its port back) and listens;
/// the REST and the gRPC listener of a reference C-PS.
pub(crate) fn listen_reusable(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), String> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .map_err(|e| e.to_string())?;
    socket.set_reuseaddr(true).map_err(|e| e.to_string())?;
    socket.bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    let listener = socket.listen(1024).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    Ok((listener, addr))
}

/// A running server.
pub struct RefCps {
    pub addr: SocketAddr,
    pub state: Arc<CpsState>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RefCps {
    /// Binds `addr` (SO_REUSEADDR, so a restarted server gets its port back) and serves.
    pub async fn start(addr: SocketAddr, state: Arc<CpsState>) -> Result<RefCps, String> {
        let (listener, addr) = listen_reusable(addr)?;
        let tls = tls_acceptor(&state.config)?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, tls, state.clone(), stop_rx));
        Ok(RefCps { addr, state, stop, task })
    }

    /// Stops listening and closes every connection.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn tls_acceptor(c: &CpsConfig) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    tls_acceptor_with_alpn(c, &[])
}

/// The TLS acceptor of the configuration, offering `alpn` (the gRPC listener: h2).
pub(crate) fn tls_acceptor_with_alpn(
    c: &CpsConfig,
    alpn: &[&[u8]],
) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    let (Some(cert), Some(key)) = (&c.tls_cert, &c.tls_key) else { return Ok(None) };
    let read = |p: &str| std::fs::read(p).map_err(|e| format!("{p}: {e}"));
    let chain: Vec<_> = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{cert}: {e}"))?;
    let key_der = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| format!("{key}: {e}"))?
        .ok_or_else(|| format!("{key}: no private key"))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &c.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
                roots.add(cert.map_err(|e| format!("{ca}: {e}"))?).map_err(|e| format!("{ca}: {e}"))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| e.to_string())?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key_der).map_err(|e| e.to_string())?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg))))
}

/// How long a client has to finish its TLS handshake.
pub(super) const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The TLS side of an accepted connection, or None when the handshake fails or takes longer
/// than [`HANDSHAKE_TIMEOUT`] (a client that opens a socket and says nothing holds no task).
pub(super) async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await.ok()?.ok()
}

/// The next connection (TCP_NODELAY); an accept error (out of descriptors, say) is logged and retried
/// after a pause instead of in a busy loop. Finished connection tasks are reaped first, so
/// the set holds the open connections only.
pub(super) async fn next_connection(
    listener: &TcpListener,
    conns: &mut tokio::task::JoinSet<()>,
) -> tokio::net::TcpStream {
    loop {
        while conns.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((tcp, _)) => {
                // Replies are small writes after a read: no Nagle delay behind the last one.
                let _ = tcp.set_nodelay(true);
                return tcp;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reference C-PS: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<CpsState>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let tcp = tokio::select! {
            t = next_connection(&listener, &mut conns) => t,
            _ = stop.changed() => break,
        };
        let state = state.clone();
        let tls = tls.clone();
        let mut stop = stop.clone();
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                Some(acceptor) => {
                    let Some(stream) = handshake(&acceptor, tcp).await else { return };
                    let conn = http.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! { _ = conn => {}, _ = stop.changed() => {} }
                }
                None => {
                    let conn = http.serve_connection(TokioIo::new(tcp), svc);
                    tokio::select! { _ = conn => {}, _ = stop.changed() => {} }
                }
            }
        });
    }
    // Dropping the set aborts the connections: the C-PS is gone, as a crash would have it.
    conns.shutdown().await;
}

type Reply = Response<Full<Bytes>>;

fn json<T: Serialize>(status: StatusCode, v: &T) -> Reply {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn error(status: StatusCode, reason: &str, detail: impl Into<String>) -> Reply {
    json(status, &ErrorBody { error: reason.to_owned(), detail: detail.into() })
}

/// A body in `enc` (the request's encoding).
fn reply<T: Serialize>(enc: Encoding, status: StatusCode, root: &str, v: &T) -> Reply {
    let body = match enc.encode(root, v) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e),
    };
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, enc.content_type())
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn error_in(enc: Encoding, status: StatusCode, reason: &str, detail: impl Into<String>) -> Reply {
    reply(enc, status, ROOT_ERROR, &ErrorBody { error: reason.to_owned(), detail: detail.into() })
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((decode_segment(k)?, decode_segment(&v.replace('+', " "))?)))
        .collect()
}

/// The key, C-SMA and nonce of a verified PSK request: its reply is signed with them.
pub(crate) struct ReplyKey {
    pub(crate) secret: Vec<u8>,
    csma: String,
    nonce: u64,
}

async fn handle(state: &CpsState, req: Request<Incoming>) -> Reply {
    state.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    // Body first (bounded): the signature covers it.
    let raw = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            state.count("too-large");
            return error(StatusCode::PAYLOAD_TOO_LARGE, "too-large", e.to_string());
        }
    };
    let mut reply_key = None;
    let reply = route(state, &parts, &raw, &mut reply_key);
    // Seed 003: the answer to the C-SMA's overload announcement and the report in force.
    let announced = header(&parts.headers, H_OC_SUPPORTED).and_then(|a| Supported::decode(a).ok());
    let (supported, olr) = state.overload_answer(announced.as_ref(), header(&parts.headers, H_CSMA_ID));
    let (supported, olr) = (supported.map(|s| s.to_string()), olr.map(|o| o.to_string()));
    let (mut head, body) = reply.into_parts();
    for (name, v) in [(H_OC_SUPPORTED, &supported), (H_OC_OLR, &olr)] {
        if let Some(v) = v.as_deref().and_then(|v| hyper::header::HeaderValue::from_str(v).ok()) {
            head.headers.insert(name, v);
        }
    }
    let Some(k) = reply_key else { return Response::from_parts(head, body) };
    // Seed 004, C-PS Authentication: in PSK mode the C-PS authenticates its replies, bound
    // to the request they answer by its nonce.
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let oc = ReplyOc { supported: supported.as_deref(), olr: olr.as_deref() };
    let sig = sign_reply_oc(&k.secret, head.status.as_u16(), &k.csma, k.nonce, &oc, &bytes);
    if let Ok(v) = hyper::header::HeaderValue::from_str(&sig) {
        head.headers.insert(H_REPLY_SIGNATURE, v);
    }
    Response::from_parts(head, Full::new(bytes))
}

/// Answers one request whose body has been read (synchronous; the fuzz target `cps_wire`
/// calls it directly). `reply_key` is set when the reply must be signed.
pub(crate) fn route(
    state: &CpsState,
    parts: &hyper::http::request::Parts,
    raw: &Bytes,
    reply_key: &mut Option<ReplyKey>,
) -> Reply {
    let path = parts.uri.path().to_owned();
    match (&parts.method, path.as_str()) {
        (&Method::GET, "/cats/select") => {
            let q = query(parts.uri.query());
            let (Some(cs), Some(ingress)) = (q.get("cs-id"), q.get("ingress")) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad-request",
                    "query parameters cs-id and ingress are required",
                );
            };
            let sel = {
                let mut c = lock(&state.cst);
                c.expire(std::time::Instant::now(), state.config.ttl());
                c.select(&state.config, cs, ingress)
            };
            return json(StatusCode::OK, &sel);
        }
        (&Method::GET, "/cats/cst") => {
            let mut c = lock(&state.cst);
            c.expire(std::time::Instant::now(), state.config.ttl());
            return json(StatusCode::OK, &c.sites);
        }
        (&Method::GET, "/cats/stats") => {
            let (expired, keepalives) = {
                let c = lock(&state.cst);
                (c.expired, c.keepalives)
            };
            return json(
                StatusCode::OK,
                &serde_json::json!({
                    "requests": state.requests.load(std::sync::atomic::Ordering::Relaxed),
                    "refused": *lock(&state.refused),
                    "expired-sites": expired,
                    "keepalives": keepalives,
                }),
            );
        }
        (&Method::POST, p) if p.starts_with("/cats/sync/") => {
            let Some(site) = decode_segment(&p["/cats/sync/".len()..]) else {
                return error(StatusCode::BAD_REQUEST, "bad-request", "malformed site id");
            };
            lock(&state.cst).request_full_sync(&site);
            return json(StatusCode::ACCEPTED, &serde_json::json!({ "full-sync-requested": site }));
        }
        _ => {}
    }
    if path != METRICS_PATH && path != KEEPALIVE_PATH && !path.starts_with(&format!("{METRICS_PATH}/")) {
        return error(StatusCode::NOT_FOUND, "not-found", format!("no resource {path}"));
    }
    state.tick();
    lock(&state.cst).expire(std::time::Instant::now(), state.config.ttl());
    // The reply is in the request's encoding: its Content-Type when it has a body, else its
    // Accept; JSON when neither names one.
    let enc = if raw.is_empty() {
        header(&parts.headers, ACCEPT.as_str()).and_then(Encoding::from_media_type).unwrap_or_default()
    } else {
        match header(&parts.headers, CONTENT_TYPE.as_str()) {
            None => Encoding::Json,
            Some(t) => match Encoding::from_media_type(t) {
                Some(e) => e,
                None => {
                    state.count("unsupported-media-type");
                    return error(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "unsupported-media-type",
                        format!("content-type {}", crate::text::printable(t, 100)),
                    );
                }
            },
        }
    };
    let Some(csma) = header(&parts.headers, H_CSMA_ID).map(str::to_owned) else {
        state.count("malformed");
        return error(StatusCode::BAD_REQUEST, "malformed", format!("header {H_CSMA_ID} is required"));
    };
    // Authentication (seed 004, Metric Integrity), over the body as sent: the PSK MAC and
    // the C-SMA's signature, each when configured; nonces are recorded only once every
    // proof passed, so a request with one good proof and one forged cannot burn a nonce.
    let refuse = |e: AuthError, what: &str, enc: Encoding| {
        state.count(e.reason());
        tracing::warn!(csma = %csma, reason = e.reason(), "reference C-PS: refused {what}: {e}");
        let status = match e {
            AuthError::MissingHeader(_) | AuthError::MalformedHeader(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::UNAUTHORIZED,
        };
        error_in(enc, status, e.reason(), e.to_string())
    };
    let h = &parts.headers;
    let p = Presented {
        key_id: header(h, H_KEY_ID),
        timestamp: header(h, H_TIMESTAMP),
        nonce: header(h, H_NONCE),
        signature: header(h, H_SIGNATURE),
    };
    match state.authenticate(parts.method.as_str(), &path, &csma, &p, header(h, H_JWS), raw) {
        Ok(key) => *reply_key = key,
        Err((e, what)) => return refuse(e, what, enc),
    }
    let body = match header(&parts.headers, CONTENT_ENCODING.as_str()) {
        None | Some("identity") => raw.to_vec(),
        Some("gzip") => match gunzip(raw, MAX_BODY) {
            Ok(b) => b,
            Err(e) => {
                state.count("malformed");
                return error_in(enc, StatusCode::BAD_REQUEST, "malformed", e);
            }
        },
        Some(other) => {
            state.count("malformed");
            return error_in(
                enc,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-encoding",
                format!("content-encoding {other}"),
            );
        }
    };
    let hints = |mut a: Ack| {
        a.keepalive = state.config.keepalive;
        a.entry_ttl = (state.config.entry_ttl > 0).then_some(state.config.entry_ttl);
        a.refresh_interval = state.config.refresh_interval(state.load());
        reply(enc, StatusCode::OK, ROOT_ACK, &a)
    };
    let malformed = |detail: String| {
        state.count("malformed");
        error_in(enc, StatusCode::BAD_REQUEST, "malformed", detail)
    };
    let owner = |e: CstError| {
        state.count("wrong-owner");
        error_in(enc, StatusCode::FORBIDDEN, "forbidden", e.to_string())
    };
    let cst_error = |e: CstError| match e {
        e @ (CstError::WrongOwner { .. } | CstError::SciOfOtherSite { .. }) => owner(e),
        e @ CstError::UnknownSite(_) => error_in(enc, StatusCode::NOT_FOUND, "not-found", e.to_string()),
        e @ CstError::SequenceMismatch { .. } => {
            state.count("sequence-mismatch");
            error_in(enc, StatusCode::CONFLICT, "sequence-mismatch", e.to_string())
        }
        e => malformed(e.to_string()),
    };
    if path == KEEPALIVE_PATH {
        if parts.method != Method::POST {
            return error_in(
                enc,
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                format!("{} {path}", parts.method),
            );
        }
        if !state.config.keepalive {
            return error_in(enc, StatusCode::NOT_FOUND, "not-found", "keepalive is not offered");
        }
        let k: Keepalive = match enc.decode(ROOT_KEEPALIVE, &body) {
            Ok(k) => k,
            Err(e) => return malformed(format!("body: {e}")),
        };
        if k.csma_id != csma {
            return malformed("csma-id in the body differs from the header".into());
        }
        return match lock(&state.cst).keepalive(&k.site_id, &csma, k.sequence) {
            Ok(a) => hints(a),
            Err(e) => cst_error(e),
        };
    }
    let segment = path.get(METRICS_PATH.len() + 1..).unwrap_or("");
    let Some(id) = decode_segment(segment) else {
        return malformed("malformed path segment".into());
    };
    match (&parts.method, segment.is_empty()) {
        (&Method::POST, true) => {
            let batch: MetricBatch = match enc.decode(ROOT_BATCH, &body) {
                Ok(b) => b,
                Err(e) => return malformed(format!("body: {e}")),
            };
            if batch.csma_id != csma {
                return malformed("csma-id in the body differs from the header".into());
            }
            let full = batch.reports.iter().any(|r| r.kind == ReportKind::Full);
            let r = match (full, batch.reports.as_slice()) {
                (true, [one]) => lock(&state.cst).apply_snapshot(&batch.site_id, &csma, one),
                _ => lock(&state.cst).apply_batch(&batch.site_id, &csma, &batch.reports),
            };
            r.map_or_else(cst_error, hints)
        }
        (&Method::PUT, false) => {
            let u: SciUpdate = match enc.decode(ROOT_SCI, &body) {
                Ok(b) => b,
                Err(e) => return malformed(format!("body: {e}")),
            };
            if u.csma_id != csma {
                return malformed("csma-id in the body differs from the header".into());
            }
            if u.sci.csci_id != id {
                return malformed("csci-id in the body differs from the path".into());
            }
            lock(&state.cst).put_sci(&u.site_id, &csma, u.sequence, &u.sci).map_or_else(cst_error, hints)
        }
        (&Method::DELETE, false) => {
            let Some(site) = header(&parts.headers, H_SITE_ID) else {
                return malformed(format!("header {H_SITE_ID} is required"));
            };
            let Some(seq) = header(&parts.headers, H_SEQUENCE).and_then(|s| s.parse().ok()) else {
                return malformed(format!("header {H_SEQUENCE} is required"));
            };
            match lock(&state.cst).withdraw_sci(site, &csma, &id, seq) {
                Ok(Some(ack)) => hints(ack),
                Ok(None) => error_in(enc, StatusCode::NOT_FOUND, "not-found", format!("no site {site}")),
                Err(e) => owner(e),
            }
        }
        (&Method::GET, true) => {
            let Some(site) = header(&parts.headers, H_SITE_ID).map(str::to_owned) else {
                return malformed(format!("header {H_SITE_ID} is required"));
            };
            match lock(&state.cst).site_state(&site) {
                Some(s) if s.csma_id == csma => {
                    let s = SiteState {
                        keepalive: state.config.keepalive,
                        entry_ttl: (state.config.entry_ttl > 0).then_some(state.config.entry_ttl),
                        refresh_interval: state.config.refresh_interval(state.load()),
                        ..s
                    };
                    reply(enc, StatusCode::OK, ROOT_SITE, &s)
                }
                Some(s) => owner(CstError::WrongOwner { site, owner: s.csma_id, csma }),
                None => error_in(enc, StatusCode::NOT_FOUND, "not-found", format!("no state for site {site}")),
            }
        }
        (&Method::GET, false) => match lock(&state.cst).sci_state(&id) {
            Some((owner_csma, s)) if owner_csma == csma => reply(enc, StatusCode::OK, ROOT_SCI_STATE, &s),
            Some((owner_csma, s)) => owner(CstError::WrongOwner { site: s.site_id, owner: owner_csma, csma }),
            None => error_in(enc, StatusCode::NOT_FOUND, "not-found", format!("no SCI {id}")),
        },
        _ => error_in(enc, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", format!("{} {path}", parts.method)),
    }
}

//! HTTP push (seed 004, push mode): `POST /reports` with one report or a batch, JSON or
//! CBOR. The answer says what was accepted and, per rejected report, why: 200 when at
//! least one report was accepted, 422 when all were refused, 400 for an undecodable body,
//! 413 above the size limit, 415 for another content type, 429 with `Retry-After` over a
//! rate limit (`engine/rate_limit.rs`), 404/405 otherwise. Every refusal is counted by
//! reason in the operational state. Connections pass the SCI gate of
//! [`crate::mgmt::auth_limits`]: caps at accept, header and body deadlines, and a deadline
//! for the first accepted report (until then a connection counts as unauthenticated).
//!
//! TLS is on by default (collection/http/tls, through the shared [`crate::tls`] server
//! side): HTTP/1.1 and HTTP/2 by ALPN, a handshake deadline, client certificates verified
//! against the configured CA and CRLs. A client certificate that cert-to-name maps to a
//! CSCI-ID authenticates the connection as that SCI, which may then report for itself only.
//! Plain HTTP is an explicit choice (tls/enabled false, or `--sci-plain-http`), warned
//! about at every (re)bind.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::engine::core::{Proof, Sender};
use crate::engine::model::CsciId;
use crate::engine::report::{self, Encoding, IdKind};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::mgmt::auth_limits::{Gate, Permit, Timeout};
use crate::tls::{ClientAuth, Failure, Refused, ServerTls, TlsSettings};

use super::tls_status::TlsNow;
pub use super::tls_status::TlsStatus;

/// Where and how the HTTP collector listens (YANG collection/http).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    pub enabled: bool,
    pub listen: SocketAddr,
    pub max_body: usize,
    /// TLS (collection/http/tls); None serves plain HTTP.
    pub tls: Option<TlsSettings>,
    /// Why the tls container cannot be used (a fingerprint or map type the module refuses).
    pub tls_error: Option<String>,
}

impl HttpSettings {
    /// Plain HTTP whatever collection/http/tls says (`--sci-plain-http`, `sci_plain_http`).
    pub fn force_plain(&mut self) {
        self.tls = None;
        self.tls_error = None;
    }
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

async fn handle(
    req: Request<Incoming>,
    engine: Engine,
    max_body: usize,
    permit: Arc<Permit>,
    certified: Option<CsciId>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (r, accepted) = handle_report(req, engine, max_body, &permit, certified).await;
    // An accepted report authenticates the connection (the sender had the key, or the
    // collector needs none). A 200 for an empty batch proves nothing.
    if accepted > 0 {
        permit.establish();
    }
    Ok(r)
}

async fn handle_report(
    req: Request<Incoming>,
    engine: Engine,
    max_body: usize,
    permit: &Permit,
    certified: Option<CsciId>,
) -> (Response<Full<Bytes>>, usize) {
    let peer = permit.peer;
    if req.uri().path() != "/reports" {
        return (reply(StatusCode::NOT_FOUND, json!({"error": "unknown resource; SCIs POST to /reports"})), 0);
    }
    if req.method() != Method::POST {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, json!({"error": "use POST"}));
        r.headers_mut().insert("allow", hyper::header::HeaderValue::from_static("POST"));
        return (r, 0);
    }
    // Rate limiting (seed 004): per source, before the body is read or any proof checked.
    if let Err(wait) = engine.ingress.admit(peer.ip(), "http") {
        return (too_many(wait, format!("too many messages from {}", peer.ip())), 0);
    }
    let ct = req.headers().get("content-type").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let ct = ct.unwrap_or_default();
    let Some(enc) = Encoding::from_content_type(&ct) else {
        count(&engine, Rejection::Malformed).await;
        return (
            refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Rejection::Malformed,
                format!(
                    "content type {:?} is not application/json or application/cbor",
                    crate::text::truncate(&ct, 64)
                ),
            ),
            0,
        );
    };
    let proof =
        req.headers().get(hyper::header::AUTHORIZATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // Seed 003: an SCI that takes the C-SMA's peer overload reports announces it.
    let announced = req
        .headers()
        .get(crate::overload::wire::H_OC_SUPPORTED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| crate::overload::wire::Supported::decode(v).ok());
    let body_timeout = permit.limits().body_read_timeout();
    let body = match tokio::time::timeout(body_timeout, Limited::new(req.into_body(), max_body).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Err(_) => {
            count(&engine, Rejection::Malformed).await;
            permit.gate().timed_out(peer, Timeout::Body);
            let mut r = refusal(
                StatusCode::REQUEST_TIMEOUT,
                Rejection::Malformed,
                format!("the body did not arrive within {} s", body_timeout.as_secs()),
            );
            r.headers_mut().insert("connection", hyper::header::HeaderValue::from_static("close"));
            return (r, 0);
        }
        Ok(Err(e)) => {
            count(&engine, Rejection::Malformed).await;
            let too_big = e.downcast_ref::<http_body_util::LengthLimitError>().is_some();
            return (
                if too_big {
                    refusal(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        Rejection::Malformed,
                        format!("body larger than {max_body} bytes"),
                    )
                } else {
                    refusal(StatusCode::BAD_REQUEST, Rejection::Malformed, format!("reading the body failed: {e}"))
                },
                0,
            );
        }
    };
    let raws = match report::decode(&body, enc) {
        Ok(r) => r,
        Err(e) => {
            count(&engine, Rejection::Malformed).await;
            return (refusal(StatusCode::BAD_REQUEST, Rejection::Malformed, e.to_string()), 0);
        }
    };
    // Echoed ids are shown as kept: escaped and cut to their YANG length.
    let ids: Vec<String> = raws.iter().map(|r| report::display_id(IdKind::CsciId, &r.csci_id)).collect();
    // A client certificate mapped to a CSCI-ID proves the sender: it may report for that SCI
    // only (a report for another is refused as unauthenticated).
    let sender = Sender {
        proof: certified.as_ref().map(|_| Proof::Certificate),
        csci_id: certified,
        transport: "http",
        address: Some(peer.ip()),
        ..Sender::default()
    };
    let raw_ids: Vec<String> =
        if announced.is_some() { raws.iter().map(|r| r.csci_id.clone()).collect() } else { Vec::new() };
    let results = match engine.ingest_message(raws, proof.as_deref(), &body, sender).await {
        Ok(r) => r,
        Err(f) => {
            let mut r = reply(
                StatusCode::UNAUTHORIZED,
                json!({"error": f.detail, "csci-id": f.claimed, "reason": Rejection::Unauthenticated.identity()}),
            );
            r.headers_mut().insert(
                "www-authenticate",
                hyper::header::HeaderValue::from_static("CATS-HMAC-SHA256, Bearer realm=\"cats-sma\""),
            );
            return (r, 0);
        }
    };
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    if accepted == 0 && !results.is_empty() && results.iter().all(|r| matches!(r, Err((Rejection::RateLimited, _)))) {
        // Every report over its SCI's limit: 429, Retry-After the longest wait among them.
        let (first, who) = (results[0].as_ref().err().map(|e| e.1.clone()).unwrap_or_default(), ids.clone());
        let wait = engine.query(move |core| who.iter().filter_map(|i| core.rate.retry_after(i)).max()).await.flatten();
        return (too_many(wait.unwrap_or(std::time::Duration::from_secs(1)), first), 0);
    }
    let rejected: Vec<serde_json::Value> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.as_ref().err().map(|(reason, detail)| {
                json!({"index": i, "csci-id": ids.get(i), "reason": reason.identity(), "detail": detail})
            })
        })
        .collect();
    let status = if accepted == 0 && !rejected.is_empty() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    let mut r = reply(status, json!({"accepted": accepted, "rejected": rejected}));
    if let Some(a) = &announced {
        // Answered only for a CSCI-ID this message was accepted for (its authenticated
        // identity), never for one it merely names.
        let authenticated = raw_ids.iter().zip(&results).any(|(id, r)| r.is_ok() && *id == a.source_id);
        if let Some((answer, report)) = authenticated.then(|| engine.doic.answer(&a.source_id, a, "http")).flatten() {
            overload_headers(r.headers_mut(), &answer, report.as_ref());
        }
    }
    (r, accepted)
}

/// The answer to an SCI's announcement and the report in force, as headers (seed 003).
pub fn overload_headers(
    h: &mut hyper::HeaderMap,
    answer: &crate::overload::wire::Supported,
    report: Option<&crate::overload::wire::Olr>,
) {
    use crate::overload::wire::{H_OC_OLR, H_OC_SUPPORTED};
    if let Ok(v) = hyper::header::HeaderValue::from_str(&answer.to_string()) {
        h.insert(H_OC_SUPPORTED, v);
    }
    if let Some(v) = report.and_then(|r| hyper::header::HeaderValue::from_str(&r.to_string()).ok()) {
        h.insert(H_OC_OLR, v);
    }
}

async fn count(engine: &Engine, reason: Rejection) {
    engine.submit_peer(move |core| core.count_rejection(reason, "http", "http")).await;
}

/// 429 Too Many Requests with `Retry-After` (whole seconds) and the `rate-limited` reason.
fn too_many(wait: std::time::Duration, detail: String) -> Response<Full<Bytes>> {
    let secs = wait.as_secs().max(1);
    let mut r = reply(
        StatusCode::TOO_MANY_REQUESTS,
        json!({"error": detail, "reason": Rejection::RateLimited.identity(), "retry-after": secs}),
    );
    r.headers_mut().insert(hyper::header::RETRY_AFTER, secs.into());
    r
}

/// A message refused as a whole: the status, the rejection reason (a
/// `cats-sma-types:rejection-reason` identity, counted) and why.
fn refusal(status: StatusCode, reason: Rejection, detail: String) -> Response<Full<Bytes>> {
    reply(status, json!({"error": detail, "reason": reason.identity()}))
}

/// Serves until the settings change to disabled / another address (then rebinds) or the
/// sender is dropped. `bound` reports the address actually bound (port 0 resolved); the
/// generated server certificate, when one is needed, goes into `state_dir`.
pub async fn serve(
    engine: Engine,
    mut settings: watch::Receiver<HttpSettings>,
    bound: watch::Sender<Option<SocketAddr>>,
    gate: Arc<Gate>,
    state_dir: PathBuf,
    status: Arc<TlsStatus>,
) {
    loop {
        let current = settings.borrow_and_update().clone();
        let opened = super::tls_status::open(
            crate::tls::server::SCI_HTTP,
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
                    "SCI collection over HTTPS accepting reports at {shown} (certificate {}, client certificates {})",
                    st.certificate_file.display(),
                    if st.client_ca.is_some() { st.client_auth.as_str() } else { "not asked for" }
                );
                status.set(TlsNow::Tls(t.clone()));
                Some(t.spawn_reloader())
            }
            None => {
                warn!(
                    "SCI collection over plain HTTP at {shown}: reports and their proofs travel in clear and \
                     no client certificate can authenticate an SCI (collection/http/tls/enabled is false or \
                     --sci-plain-http is set)"
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
                    let engine = engine.clone();
                    let max = current.max_body;
                    match &tls {
                        Some(t) => tokio::spawn(serve_tls(stream, engine, max, permit, t.clone())),
                        None => tokio::spawn(serve_connection(TokioIo::new(stream), engine, max, permit, None, false)),
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
/// CSCI-ID, then HTTP/1.1 or HTTP/2 until done, or until a reload (a new CRL) makes the
/// certificate unacceptable.
async fn serve_tls(
    stream: tokio::net::TcpStream,
    engine: Engine,
    max: usize,
    permit: Arc<Permit>,
    tls: Arc<ServerTls>,
) {
    let (stream, peer) = match tls.accept(stream, permit.limits().handshake_timeout()).await {
        Ok(x) => x,
        Err(r) => return refused(&engine, &tls, &permit, None, r).await,
    };
    let mapped = peer.mapped.as_ref().map(|m| m.name.clone());
    let csci = mapped.clone().filter(|n| report::check_id(IdKind::CsciId, n).is_ok());
    if csci.is_none() && mapped.is_some() {
        let shown = report::display_id(IdKind::CsciId, mapped.as_deref().unwrap_or(""));
        let detail = format!("the client certificate maps to {shown}, which is not a CSCI-ID");
        if tls.settings().client_auth == ClientAuth::Required {
            return refused(&engine, &tls, &permit, None, Refused { failure: Failure::Unmapped, detail }).await;
        }
        debug!(peer = %permit.peer, "{detail}; the connection is not certificate-authenticated");
    }
    if csci.is_some() {
        // A verified certificate with a CSCI-ID is authentication: out of the pending pools.
        permit.establish();
    }
    let invalidated = tls.invalidated(&peer.chain);
    tokio::select! {
        _ = serve_connection(TokioIo::new(stream), engine.clone(), max, permit.clone(), csci.clone(), true) => {}
        r = invalidated => refused(&engine, &tls, &permit, csci, r).await,
    }
}

/// A connection refused at (or after) the handshake: counted by reason; a certificate
/// problem is also an SCI authentication failure (logged, notified, audited, aggregated per
/// source); a handshake that took too long counts as the gate's handshake timeout.
async fn refused(engine: &Engine, tls: &ServerTls, permit: &Permit, claimed: Option<CsciId>, r: Refused) {
    tls.record(r.failure);
    if r.failure == Failure::Timeout {
        permit.gate().timed_out(permit.peer, Timeout::Handshake);
        return;
    }
    if !r.failure.is_authentication() {
        debug!(peer = %permit.peer, "SCI collection: TLS handshake failed: {}", r.detail);
        return;
    }
    let sender = Sender { transport: "http", address: Some(permit.peer.ip()), ..Sender::default() };
    let detail = format!("TLS client certificate refused ({}): {}", r.failure.as_str(), r.detail);
    engine.submit_peer(move |core| core.connection_auth_failure(&sender, claimed, detail)).await;
}

/// Whether a connection error is hyper's header read timeout.
fn is_header_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// HTTP on one connection: HTTP/1.1 only in plain text, HTTP/1.1 or HTTP/2 (hyper-util's
/// auto builder) over TLS. `certified` is the CSCI-ID the client certificate proved.
async fn serve_connection<I>(
    io: I,
    engine: Engine,
    max: usize,
    permit: Arc<Permit>,
    certified: Option<CsciId>,
    h2: bool,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let p = permit.clone();
    let svc = hyper::service::service_fn(move |req| handle(req, engine.clone(), max, p.clone(), certified.clone()));
    let header_timeout = permit.limits().header_read_timeout();
    if h2 {
        let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        // The header deadline also ends idle HTTP/1.1 keep-alive connections; HTTP/2 (whose
        // preface has no header deadline) is bounded by the authentication deadline until
        // the connection authenticates, and by keep-alive pings after.
        builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
        builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(std::time::Duration::from_secs(30)));
        let conn = builder.serve_connection(io, svc);
        tokio::select! {
            r = conn => if let Err(e) = r {
                if is_header_timeout(e.as_ref()) {
                    permit.gate().timed_out(permit.peer, Timeout::Header);
                }
            },
            _ = permit.auth_deadline() => {}
        }
        return;
    }
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Also ends idle keep-alive connections: hyper starts it whenever it waits for a head.
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let conn = builder.serve_connection(io, svc);
    tokio::select! {
        r = conn => if let Err(e) = r {
            if e.is_timeout() {
                permit.gate().timed_out(permit.peer, Timeout::Header);
            }
        },
        // No accepted report in time: dropped.
        _ = permit.auth_deadline() => {}
    }
}

/// The collection/http settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> HttpSettings {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let enabled = leaf(t, &format!("{ROOT}/collection/http/enabled")).as_deref() != Some("false");
    let ip = leaf(t, &format!("{ROOT}/collection/http/listen-address"))
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let port = leaf_u64(t, &format!("{ROOT}/collection/http/port")).map(|p| p as u16).unwrap_or(8470);
    let max_body = leaf_u64(t, &format!("{ROOT}/collection/http/max-body-size")).map(|m| m as usize).unwrap_or(65536);
    let (tls, tls_error) = match tls_settings(t) {
        Ok(tls) => (tls, None),
        Err(e) => (None, Some(format!("collection/http/tls: {e}"))),
    };
    HttpSettings { enabled, listen: SocketAddr::new(ip, port), max_body, tls, tls_error }
}

/// collection/http/tls: None when tls/enabled is false.
pub fn tls_settings(t: &yang2::data::DataTree<'static>) -> Result<Option<TlsSettings>, String> {
    use crate::engine::northbound::{leaf, ROOT};
    let base = format!("{ROOT}/collection/http/tls");
    if leaf(t, &format!("{base}/enabled")).as_deref() == Some("false") {
        return Ok(None);
    }
    let s = crate::tls::yang::settings(t, &base)?;
    s.check()?;
    Ok(Some(s))
}

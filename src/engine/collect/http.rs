//! HTTP push (seed 004, push mode): `POST /reports` with one report or a batch, JSON or
//! CBOR. The answer says what was accepted and, per rejected report, why: 200 when at
//! least one report was accepted, 422 when all were refused, 400 for an undecodable body,
//! 413 above the size limit, 415 for another content type, 429 with `Retry-After` over a
//! rate limit (`engine/rate_limit.rs`), 404/405 otherwise. Every refusal is counted by
//! reason in the operational state. Connections pass the SCI gate of
//! [`crate::mgmt::auth_limits`]: caps at accept, header and body deadlines, and a deadline
//! for the first accepted report (until then a connection counts as unauthenticated).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::engine::core::Sender;
use crate::engine::report::{self, Encoding, IdKind};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::mgmt::auth_limits::{Gate, Permit, Timeout};

/// Where and how the HTTP collector listens (YANG collection/http).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    pub enabled: bool,
    pub listen: SocketAddr,
    pub max_body: usize,
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
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (r, accepted) = handle_report(req, engine, max_body, &permit).await;
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
    let sender = Sender { transport: "http", address: Some(peer.ip()), ..Sender::default() };
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
    (reply(status, json!({"accepted": accepted, "rejected": rejected})), accepted)
}

async fn count(engine: &Engine, reason: Rejection) {
    engine.submit_peer(move |core| core.count_rejection(reason, "http")).await;
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
/// sender is dropped. `bound` reports the address actually bound (port 0 resolved).
pub async fn serve(
    engine: Engine,
    mut settings: watch::Receiver<HttpSettings>,
    bound: watch::Sender<Option<SocketAddr>>,
    gate: Arc<Gate>,
) {
    loop {
        let current = settings.borrow_and_update().clone();
        if !current.enabled {
            let _ = bound.send(None);
            if settings.changed().await.is_err() {
                return;
            }
            continue;
        }
        let listener = match TcpListener::bind(current.listen).await {
            Ok(l) => l,
            Err(e) => {
                warn!("SCI collection: cannot listen on {}: {e}", current.listen);
                let _ = bound.send(None);
                if settings.changed().await.is_err() {
                    return;
                }
                continue;
            }
        };
        let addr = listener.local_addr().ok();
        info!("SCI collection over HTTP accepting reports at {}", addr.map(|a| a.to_string()).unwrap_or_default());
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
                    // Over a cap: closed at once (counted and logged by the gate).
                    let Ok(permit) = gate.admit(peer) else { continue };
                    let _ = stream.set_nodelay(true);
                    let engine = engine.clone();
                    let max = current.max_body;
                    tokio::spawn(serve_connection(stream, engine, max, permit));
                }
            }
        }
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, engine: Engine, max: usize, permit: Arc<Permit>) {
    let p = permit.clone();
    let svc = hyper::service::service_fn(move |req| handle(req, engine.clone(), max, p.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Also ends idle keep-alive connections: hyper starts it whenever it waits for a head.
    builder.timer(TokioTimer::new()).header_read_timeout(permit.limits().header_read_timeout());
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
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
    HttpSettings { enabled, listen: SocketAddr::new(ip, port), max_body }
}

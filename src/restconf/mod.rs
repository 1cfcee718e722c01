//! RESTCONF (RFC 8040) over HTTPS on the same datastores, NACM, users and engine as
//! NETCONF: `tls.rs` (certificates, cert-to-name), `auth.rs` (Basic / certificate),
//! `path.rs` (URI → instance path), `data.rs` (datastore and data resources, RFC 8527
//! NMDA datastores), `query.rs` (query parameters), `yang_patch.rs` (RFC 8072),
//! `operations.rs` (RPCs), `streams.rs` (stream list and SSE), `subscriptions.rs` (RFC
//! 8650 dynamic subscriptions), `error.rs` (section 7
//! errors from the shared typed errors), `media.rs` (encodings), `yangdata.rs` (libyang).

pub mod auth;
pub mod body;
pub mod console;
pub mod data;
pub mod error;
pub mod media;
pub mod operations;
pub mod path;
pub mod query;
pub mod streams;
pub mod subscriptions;
pub mod tls;
pub mod yang_patch;
pub mod yangdata;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use body::RcBody;
use error::Failure;
use media::Encoding;

use crate::config::RestconfSettings;
use crate::datastore::{ConfigConsumer, SessionId, Transaction};
use crate::error::ErrorTag;
use crate::mgmt::auth_limits::{Permit, Timeout};

/// RFC 8525 revision announced as yang-library-version (RFC 8040 section 3.3.3).
pub const YANG_LIBRARY_VERSION: &str = "2019-01-04";
/// When running last changed, for Last-Modified (RFC 8040 section 3.4.1.1); kept by a
/// configuration consumer so NETCONF commits count as much as RESTCONF edits.
#[derive(Default)]
pub struct LastModified(Mutex<Option<chrono::DateTime<chrono::Utc>>>);

impl LastModified {
    pub fn get(&self) -> chrono::DateTime<chrono::Utc> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // HTTP dates have one-second resolution.
        *g.get_or_insert_with(|| chrono::Utc::now().with_nanosecond_zero())
    }
}

trait SecondsOnly {
    fn with_nanosecond_zero(self) -> Self;
}

impl SecondsOnly for chrono::DateTime<chrono::Utc> {
    fn with_nanosecond_zero(self) -> Self {
        use chrono::Timelike;
        self.with_nanosecond(0).unwrap_or(self)
    }
}

impl ConfigConsumer for LastModified {
    fn name(&self) -> &str {
        "restconf-last-modified"
    }
    fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
        Ok(())
    }
    fn apply(&self, _tx: &Transaction<'_>) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = chrono::Utc::now().with_nanosecond_zero();
        // Two changes within one second still need distinct validators: the ETag (the
        // running version) tells them apart; Last-Modified just never goes backwards.
        *g = Some(g.map_or(now, |old| old.max(now)));
    }
}

/// The RESTCONF server: shared state of every connection.
pub struct Restconf {
    pub core: Arc<crate::mgmt::Core>,
    pub settings: RestconfSettings,
    pub auth: auth::Authenticator,
    pub last_modified: Arc<LastModified>,
    pub subscriptions: subscriptions::Subscriptions,
}

/// Releases a request's NACM identity however the request ends (also when the client goes
/// and the request future is dropped).
pub(crate) struct IdentityGuard(pub(crate) Arc<crate::nacm::Nacm>, pub(crate) SessionId);

impl Drop for IdentityGuard {
    fn drop(&mut self) {
        self.0.session_closed(self.1);
    }
}

/// Who is asking, and how to answer.
pub struct Caller {
    pub user: String,
    pub session: SessionId,
}

/// A request as the resource handlers see it.
pub struct Req {
    pub method: Method,
    /// The path, still percent-encoded, without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The encoding of the reply.
    pub accept: Encoding,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub type Reply = Response<RcBody>;

/// A reply with a body in `enc`.
pub fn reply(status: u16, enc: Encoding, body: String) -> Reply {
    let mut r = Response::new(RcBody::text(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert("content-type", HeaderValue::from_static(enc.data_type()));
    r
}

pub fn no_content(status: u16) -> Reply {
    let mut r = Response::new(RcBody::empty());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    r
}

pub fn error_reply(f: &Failure, enc: Encoding) -> Reply {
    let mut r = reply(f.status, enc, error::render(&f.errors, enc));
    if let Some(allow) = f.allow {
        r.headers_mut().insert("allow", HeaderValue::from_static(allow));
    }
    r
}

impl Restconf {
    pub fn new(core: Arc<crate::mgmt::Core>, settings: RestconfSettings) -> Arc<Restconf> {
        // Running was loaded (from startup) when the agent started.
        let last_modified = Arc::new(LastModified(Mutex::new(Some(chrono::Utc::now().with_nanosecond_zero()))));
        core.datastores.register_consumer(last_modified.clone());
        core.datastores.register_state_provider(Arc::new(streams::MonitoringState { settings: settings.clone() }));
        Arc::new(Restconf {
            auth: auth::Authenticator::new(core.users.clone(), core.limits.clone()),
            core,
            settings,
            last_modified,
            subscriptions: Default::default(),
        })
    }

    /// A fresh NACM identity for one request (never one that is live, see
    /// `Nacm::open_identity`); None when every RESTCONF identity is in use.
    fn open(&self, user: String) -> Option<(Caller, IdentityGuard)> {
        let session = self.core.nacm.open_identity(&crate::nacm::RESTCONF_IDS, &user)?;
        Some((Caller { user, session }, IdentityGuard(self.core.nacm.clone(), session)))
    }

    /// One HTTP request, end to end. Never fails: every problem is an RFC 8040 error reply.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, cert_user: Option<String>) -> Reply {
        let (parts, incoming) = req.into_parts();
        let permit = parts.extensions.get::<Arc<Permit>>().cloned();
        let peer = permit.as_ref().map(|p| p.peer);
        let path = parts.uri.path().to_owned();
        let query_raw = parts.uri.query().unwrap_or("").to_owned();
        let content_enc = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| media::content_type(Some(v)).ok())
            .map(|k| match k {
                media::BodyKind::Data(e) | media::BodyKind::Patch(e) => e,
            });
        // The Prometheus exposition has a media type of its own, negotiated by nothing.
        if path == "/metrics" {
            return self.metrics(&parts.method, &parts.headers, cert_user, permit.as_ref()).await;
        }
        let accept_hdr = parts.headers.get("accept").and_then(|v| v.to_str().ok());
        // Root discovery needs no credentials (RFC 8040 section 3.1 / RFC 6415), and has
        // media types of its own (XRD, JRD), negotiated before the yang-data ones.
        if path == "/.well-known/host-meta" || path == "/.well-known/host-meta.json" {
            return host_meta(&parts.method, path.ends_with(".json"), accept_hdr);
        }
        // The operator console's static files: no data, no credentials (docs/console.md).
        if path == "/console" || path.starts_with("/console/") {
            return console::serve(&parts.method, &path);
        }
        let Some(accept) = media::accept(accept_hdr, content_enc) else {
            let f = Failure::status(406, ErrorTag::InvalidValue, "none of the Accept media types can be produced");
            return error_reply(&f, Encoding::Json);
        };
        let Some(user) = self.user(&parts.headers, cert_user, peer).await else {
            let mut r = error_reply(
                &Failure::status(
                    401,
                    ErrorTag::AccessDenied,
                    "authentication required (HTTP Basic or a client certificate)",
                ),
                accept,
            );
            r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"restconf\""));
            return r;
        };
        if let Some(p) = &permit {
            p.establish();
        }
        let limit = self.settings.max_body_size;
        let body_timeout = self.core.limits.restconf.limits.body_read_timeout();
        let body =
            match tokio::time::timeout(body_timeout, http_body_util::Limited::new(incoming, limit).collect()).await {
                Err(_) => {
                    if let Some(p) = &permit {
                        p.gate().timed_out(p.peer, Timeout::Body);
                    }
                    let f = Failure::status(
                        408,
                        ErrorTag::OperationFailed,
                        format!("the request body did not arrive within {} s", body_timeout.as_secs()),
                    );
                    let mut r = error_reply(&f, accept);
                    r.headers_mut().insert("connection", HeaderValue::from_static("close"));
                    return r;
                }
                Ok(Ok(b)) => b.to_bytes(),
                Ok(Err(e)) => {
                    let f = if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                        Failure::status(413, ErrorTag::TooBig, format!("the request body exceeds {limit} bytes"))
                    } else {
                        Failure::bad(ErrorTag::MalformedMessage, format!("reading the request body: {e}"))
                    };
                    return error_reply(&f, accept);
                }
            };
        let query = match query::split(&query_raw) {
            Ok(q) => q,
            Err(f) => return error_reply(&f, accept),
        };
        let req = Req { method: parts.method, path, query, headers: parts.headers, body, accept };
        let Some((caller, identity)) = self.open(user) else {
            let f = Failure::status(503, ErrorTag::ResourceDenied, "no request identity is free; try again later");
            return error_reply(&f, accept);
        };
        debug!(user = %caller.user, method = %req.method, path = %req.path, "RESTCONF request");
        let this = self.clone();
        let method = req.method.clone();
        let result = route(&this, &caller, req).await;
        drop(identity);
        let tag = result.as_ref().err().and_then(|(f, _)| f.errors.first()).map_or("ok", |e| e.tag.as_str());
        let method = match method {
            Method::GET
            | Method::HEAD
            | Method::POST
            | Method::PUT
            | Method::PATCH
            | Method::DELETE
            | Method::OPTIONS => method.as_str(),
            _ => "other",
        };
        self.core.metrics.count_rpc("restconf", method, tag);
        match result {
            Ok(r) => r,
            Err((f, enc)) => {
                refused_input(&caller, &f);
                error_reply(&f, enc)
            }
        }
    }

    /// Who the request is from: the client certificate's user, or HTTP Basic.
    async fn user(&self, headers: &HeaderMap, cert_user: Option<String>, peer: Option<SocketAddr>) -> Option<String> {
        match cert_user {
            Some(u) => Some(u),
            None => match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some(h) => self.auth.basic(h, peer).await,
                None => None,
            },
        }
    }

    /// `GET /metrics`: the Prometheus / OpenMetrics exposition (`mgmt::metrics`), for the
    /// same users as RESTCONF, showing only the figures whose data NACM lets the user read.
    async fn metrics(
        self: &Arc<Self>,
        method: &Method,
        headers: &HeaderMap,
        cert_user: Option<String>,
        permit: Option<&Arc<Permit>>,
    ) -> Reply {
        let text = |status: u16, body: String| {
            let mut r = Response::new(RcBody::text(body));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            r.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
            r
        };
        if method != Method::GET && method != Method::HEAD {
            let mut r = text(405, "/metrics answers GET and HEAD\n".into());
            r.headers_mut().insert("allow", HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let Some(user) = self.user(headers, cert_user, permit.map(|p| p.peer)).await else {
            let mut r = text(401, "authentication required (HTTP Basic or a client certificate)\n".into());
            r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"restconf\""));
            return r;
        };
        if let Some(p) = permit {
            p.establish();
        }
        let core = self.core.clone();
        let who = user.clone();
        // The sources may wait for the engine task: off the runtime's workers.
        let rendered = tokio::task::spawn_blocking(move || {
            core.metrics
                .render(&|module, path| core.nacm.may_read_subtree(&who, module, path))
                .ok_or_else(|| format!("NACM lets {who} read none of the data /metrics shows"))
        })
        .await;
        let body = match rendered {
            Err(e) => return text(500, format!("rendering the metrics failed: {e}\n")),
            Ok(Ok(b)) => b,
            Ok(Err(reason)) => {
                self.core.metrics.count_rpc("restconf", "metrics", ErrorTag::AccessDenied.as_str());
                crate::mgmt::audit::event(crate::mgmt::audit::Category::NacmDenial)
                    .outcome("failure")
                    .user(&user)
                    .transport("https")
                    .field("resource", "/metrics")
                    .field("reason", reason.as_str())
                    .emit_aggregated(format!("metrics:{user}"));
                return text(403, format!("{reason}\n"));
            }
        };
        self.core.metrics.count_rpc("restconf", "metrics", "ok");
        let mut r = Response::new(if method == Method::HEAD { RcBody::empty() } else { RcBody::text(body) });
        r.headers_mut().insert("content-type", HeaderValue::from_static(crate::mgmt::metrics::CONTENT_TYPE));
        r
    }
}

impl Restconf {
    /// One request from an already authenticated `user`, after the HTTP layer: media
    /// types, query, the resource handlers and their errors, as [`Restconf::handle`] runs
    /// them. For the fuzz targets (`crate::fuzzing`), which have no TLS connection.
    #[doc(hidden)]
    pub async fn handle_authenticated(
        self: &Arc<Self>,
        user: String,
        method: Method,
        target: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Reply {
        let (path, query_raw) = target.split_once('?').unwrap_or((target, ""));
        let content_enc =
            headers.get("content-type").and_then(|v| v.to_str().ok()).and_then(|v| media::content_type(Some(v)).ok());
        let content_enc = content_enc.map(|k| match k {
            media::BodyKind::Data(e) | media::BodyKind::Patch(e) => e,
        });
        let Some(accept) = media::accept(headers.get("accept").and_then(|v| v.to_str().ok()), content_enc) else {
            return error_reply(&Failure::status(406, ErrorTag::InvalidValue, "no acceptable type"), Encoding::Json);
        };
        let query = match query::split(query_raw) {
            Ok(q) => q,
            Err(f) => return error_reply(&f, accept),
        };
        let req = Req { method, path: path.to_owned(), query, headers, body, accept };
        let Some((caller, identity)) = self.open(user) else {
            let f = Failure::status(503, ErrorTag::ResourceDenied, "no request identity is free; try again later");
            return error_reply(&f, accept);
        };
        let result = route(self, &caller, req).await;
        drop(identity);
        match result {
            Ok(r) => r,
            Err((f, enc)) => {
                refused_input(&caller, &f);
                error_reply(&f, enc)
            }
        }
    }
}

/// A body refused as not well-formed or over a message limit, in the audit trail (one
/// record per user and window for a flood).
fn refused_input(caller: &Caller, f: &Failure) {
    let Some(e) = f.errors.iter().find(|e| matches!(e.tag, ErrorTag::MalformedMessage | ErrorTag::TooBig)) else {
        return;
    };
    crate::mgmt::audit::event(crate::mgmt::audit::Category::InputRefused)
        .outcome("failure")
        .user(&caller.user)
        .session(caller.session)
        .transport("https")
        .field("status", f.status)
        .field("reason", e.message.as_str())
        .emit_aggregated(format!("restconf-input:{}", caller.user));
}

/// Which host-meta document an Accept header lets us send: `Some(true)` the JRD (JSON),
/// `Some(false)` the XRD, `None` neither (406). `/.well-known/host-meta` is the XRD unless
/// the client asks for JSON only (RFC 6415 section 6.2); `host-meta.json` is the JRD.
fn host_meta_type(json_path: bool, accept: Option<&str>) -> Option<bool> {
    let Some(h) = accept.filter(|h| !h.trim().is_empty()) else { return Some(json_path) };
    let (mut xrd, mut jrd) = (false, false);
    for item in h.split(',') {
        let mut parts = item.split(';');
        let ty = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts
            .any(|p| p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()).is_some_and(|q| q <= 0.0));
        if refused {
            continue;
        }
        match ty.as_str() {
            "*/*" | "application/*" => (xrd, jrd) = (true, true),
            "application/xrd+xml" | "application/xml" | "text/xml" => xrd = true,
            "application/json" | "application/jrd+json" => jrd = true,
            _ => {}
        }
    }
    match (json_path, xrd, jrd) {
        (true, _, true) => Some(true),
        (false, true, _) => Some(false),
        (false, false, true) => Some(true),
        _ => None,
    }
}

fn host_meta(method: &Method, json_path: bool, accept: Option<&str>) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        let mut r = no_content(405);
        r.headers_mut().insert("allow", HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Some(json) = host_meta_type(json_path, accept) else {
        let what = if json_path { "application/json" } else { "application/xrd+xml or application/json" };
        let f = Failure::status(406, ErrorTag::InvalidValue, format!("host-meta is served as {what}"));
        return error_reply(&f, Encoding::Json);
    };
    let (ty, body) = if json {
        ("application/json", "{\"links\":[{\"rel\":\"restconf\",\"href\":\"/restconf\"}]}".to_owned())
    } else {
        (
            "application/xrd+xml",
            "<XRD xmlns=\"http://docs.oasis-open.org/ns/xri/xrd-1.0\"><Link rel=\"restconf\" href=\"/restconf\"/></XRD>"
                .to_owned(),
        )
    };
    let mut r = Response::new(if method == Method::HEAD { RcBody::empty() } else { RcBody::text(body) });
    r.headers_mut().insert("content-type", HeaderValue::from_static(ty));
    r
}

/// Dispatches on the resource (RFC 8040 section 3).
async fn route(rc: &Arc<Restconf>, caller: &Caller, req: Req) -> Result<Reply, (Failure, Encoding)> {
    let enc = req.accept;
    let err = |f: Failure| (f, enc);
    let path = req.path.clone();
    let Some(rest) = path.strip_prefix("/restconf") else {
        return Err(err(Failure::not_found(format!("{path} is not a RESTCONF resource (the API root is /restconf)"))));
    };
    if rest.is_empty() || rest == "/" {
        return api_root(&req);
    }
    // Whole segments only: /restconfXdata is not /restconf/data.
    let Some(rest) = rest.strip_prefix('/') else {
        return Err(err(Failure::not_found(format!("{path} is not a RESTCONF resource (the API root is /restconf)"))));
    };
    // An empty segment (`//`) names nothing; only a trailing `/` is tolerated.
    if rest.split('/').rev().skip(1).any(str::is_empty) {
        return Err(err(Failure::bad(ErrorTag::InvalidValue, format!("{path} has an empty path segment"))));
    }
    let (first, tail) = match rest.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (rest, None),
    };
    match first {
        "data" => data::handle(rc, caller, &req, data::Store::Unified, tail.unwrap_or("")).await.map_err(err),
        "ds" => {
            let Some(tail) = tail else {
                return Err(err(Failure::not_found("/restconf/ds needs a datastore identity (RFC 8527)")));
            };
            let (ident, rest) = match tail.split_once('/') {
                Some((a, b)) => (a, b),
                None => (tail, ""),
            };
            let ident = path::percent_decode(ident).map_err(err)?;
            let ds = match ident.split_once(':') {
                Some(("ietf-datastores", _)) => crate::datastore::Datastore::from_identity(&ident),
                _ => None,
            };
            let Some(ds) = ds else {
                return Err(err(Failure::not_found(format!(
                    "\"{ident}\" is not a datastore of this server (RFC 8527)"
                ))));
            };
            data::handle(rc, caller, &req, data::Store::Nmda(ds), rest).await.map_err(err)
        }
        "operations" => operations::handle(rc, caller, &req, tail.unwrap_or("")).await.map_err(err),
        "yang-library-version" if tail.is_none_or(str::is_empty) => {
            only_get(&req)?;
            let body = match enc {
                Encoding::Json => format!("{{\"ietf-restconf:yang-library-version\":\"{YANG_LIBRARY_VERSION}\"}}"),
                Encoding::Xml => format!(
                    "<yang-library-version xmlns=\"{}\">{YANG_LIBRARY_VERSION}</yang-library-version>",
                    error::NS_RESTCONF
                ),
            };
            Ok(get_reply(&req, enc, body))
        }
        "streams" => streams::handle(rc, caller, &req, tail.unwrap_or("")).await.map_err(err),
        "subscriptions" => subscriptions::handle(rc, caller, &req, tail.unwrap_or("")).map_err(err),
        _ => Err(err(Failure::not_found(format!("{path} is not a RESTCONF resource")))),
    }
}

/// GET, HEAD and OPTIONS only (read-only resources); 405 otherwise.
fn only_get(req: &Req) -> Result<(), (Failure, Encoding)> {
    if req.method == Method::GET || req.method == Method::HEAD || req.method == Method::OPTIONS {
        if let Some((k, _)) = req.query.first() {
            return Err((
                Failure::bad(ErrorTag::InvalidValue, format!("query parameter \"{k}\" does not apply here")),
                req.accept,
            ));
        }
        return Ok(());
    }
    Err((
        Failure::method("GET, HEAD, OPTIONS", format!("{} is read-only: allowed are GET, HEAD, OPTIONS", req.path)),
        req.accept,
    ))
}

/// A 200 for GET (or the same headers without body for HEAD; Allow for OPTIONS).
pub fn get_reply(req: &Req, enc: Encoding, body: String) -> Reply {
    if req.method == Method::OPTIONS {
        let mut r = no_content(200);
        r.headers_mut().insert("allow", HeaderValue::from_static("GET, HEAD, OPTIONS"));
        return r;
    }
    let mut r = reply(200, enc, body);
    if req.method == Method::HEAD {
        *r.body_mut() = RcBody::empty();
    }
    r
}

fn api_root(req: &Req) -> Result<Reply, (Failure, Encoding)> {
    only_get(req)?;
    let enc = req.accept;
    let body = match enc {
        Encoding::Json => format!(
            "{{\"ietf-restconf:restconf\":{{\"data\":{{}},\"operations\":{{}},\"yang-library-version\":\"{YANG_LIBRARY_VERSION}\"}}}}"
        ),
        Encoding::Xml => format!(
            "<restconf xmlns=\"{}\"><data/><operations/><yang-library-version>{YANG_LIBRARY_VERSION}</yang-library-version></restconf>",
            error::NS_RESTCONF
        ),
    };
    Ok(get_reply(req, enc, body))
}

/// Where the server listens and what it serves.
pub struct Listening {
    pub addrs: Vec<SocketAddr>,
    /// "https" or "http" (the test switch).
    pub scheme: &'static str,
    pub cert_file: Option<std::path::PathBuf>,
}

/// Binds the listeners and serves until `shutdown` flips to true.
pub async fn start(
    core: Arc<crate::mgmt::Core>,
    settings: RestconfSettings,
    state_dir: &std::path::Path,
) -> Result<(Arc<Restconf>, Listening), String> {
    let tls = if settings.plain_http_for_tests {
        warn!("RESTCONF over plain HTTP (plain_http_for_tests): for tests only");
        None
    } else {
        Some(tls::load(&settings, state_dir)?)
    };
    let rc = Restconf::new(core.clone(), settings.clone());
    let mut addrs = Vec::new();
    for a in &settings.listen {
        let listener = TcpListener::bind(a).await.map_err(|e| format!("RESTCONF listen {a}: {e}"))?;
        addrs.push(listener.local_addr().map_err(|e| e.to_string())?);
        tokio::spawn(accept_loop(rc.clone(), listener, tls.clone(), core.shutdown.subscribe()));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    if let Some(a) = addrs.first() {
        let _ = streams::BASE_URL.set(format!("{scheme}://{a}/restconf"));
    }
    info!(
        "RESTCONF listening on {}",
        addrs.iter().map(|a| format!("{scheme}://{a}/restconf")).collect::<Vec<_>>().join(", ")
    );
    Ok((rc, Listening { addrs, scheme, cert_file: tls.map(|t| t.cert_file().to_owned()) }))
}

/// Resolves once the server shuts down (the watch guard is not kept across awaits).
pub async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await.map(|_| ());
}

async fn accept_loop(
    rc: Arc<Restconf>,
    listener: TcpListener,
    acceptor: Option<Arc<crate::tls::ServerTls>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let gate = rc.core.limits.restconf.clone();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("RESTCONF accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        // Over a cap: closed at once, before the TLS handshake (counted and logged).
        let Ok(permit) = gate.admit(peer) else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let rc = rc.clone();
        let acceptor = acceptor.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            match acceptor {
                Some(tls) => match tls.accept(stream, permit.limits().handshake_timeout()).await {
                    Ok((stream, peer_tls)) => {
                        let cert_user = peer_tls.mapped.map(|m| m.name);
                        let revoked = tls.invalidated(&peer_tls.chain);
                        tokio::select! {
                            _ = serve_connection(rc, TokioIo::new(stream), cert_user, permit, shutdown) => {}
                            r = revoked => refused(&tls, peer, &r),
                        }
                    }
                    Err(r) if r.failure == crate::tls::Failure::Timeout => {
                        tls.record(r.failure);
                        permit.gate().timed_out(peer, Timeout::Handshake);
                    }
                    Err(r) => refused(&tls, peer, &r),
                },
                None => serve_connection(rc, TokioIo::new(stream), None, permit, shutdown).await,
            }
        });
    }
}

/// A connection refused (or closed) for its client certificate: counted, and for a
/// certificate problem logged and audited as a failed certificate login.
fn refused(tls: &crate::tls::ServerTls, peer: SocketAddr, r: &crate::tls::Refused) {
    tls.record(r.failure);
    if !r.failure.is_authentication() {
        debug!(%peer, "RESTCONF TLS handshake failed: {}", r.detail);
        return;
    }
    warn!(%peer, reason = r.failure.as_str(), "RESTCONF client certificate refused: {}", r.detail);
    crate::mgmt::audit::event(crate::mgmt::audit::Category::Login)
        .outcome("failure")
        .source(peer.ip().to_string())
        .transport("restconf")
        .field("method", "certificate")
        .field("reason", r.failure.as_str())
        .field("detail", r.detail.as_str())
        .emit_aggregated(format!("restconf-tls/{}", peer.ip()));
}

async fn serve_connection<I>(
    rc: Arc<Restconf>,
    io: I,
    cert_user: Option<String>,
    permit: Arc<Permit>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let limits = permit.limits().clone();
    let p = permit.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let rc = rc.clone();
        let cert_user = cert_user.clone();
        req.extensions_mut().insert(p.clone());
        async move { Ok::<_, Infallible>(rc.handle(req, cert_user).await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // The header deadline also ends idle keep-alive connections (hyper starts it whenever
    // it waits for a request head).
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout());
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(std::time::Duration::from_secs(30)));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            if is_header_timeout(e.as_ref()) {
                permit.gate().timed_out(permit.peer, Timeout::Header);
            } else {
                debug!("RESTCONF connection: {e}");
            }
        },
        // Nothing authenticated in time (covers a peer that never sends a request, and the
        // HTTP/2 preface, which has no header deadline): the connection is dropped.
        _ = permit.auth_deadline() => {}
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
        }
    }
}

/// Whether a connection error is hyper's header read timeout.
pub fn is_header_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

//! Pull (seed 004, pull and hybrid modes: "HTTP GET or gRPC unary"): the agent pulls each
//! configured target (`collection/pull/target`: CSCI-ID, URL, interval) on its interval,
//! and at once when the SCI goes STALE or one of its pushed reports is anomalous (the
//! engine asks; at most one pull per SCI is outstanding, whatever asks). An http(s) target
//! is fetched with GET: the answer is a report or batch, JSON or CBOR by Content-Type. A
//! grpc(s) target is asked with `cats.sma.v1.SciAgent/GetReport` (`grpc/pull.rs`): the
//! answer is one protobuf `Report`. Either is attributed to the target's CSCI-ID and goes
//! through the same engine path. Also the `probe-sci` probe.
//!
//! Targets are HTTPS or gRPC over TLS: the server certificate is verified against the configured trust
//! anchors (`tls::client`; the target's own or the collection-wide `pull/tls`) and must name
//! the URL's host; a client certificate is presented when configured. A plain http URL is
//! (or grpc) URL is accepted only with `allow-plaintext` (checked at commit), and warned about at every
//! (re)start of the poller. Every failed pull is counted with its error in the target's
//! operational state (`target/state`), never only logged. A verified HTTPS answer counts as
//! a certificate proof of the target's CSCI-ID (an SCI without a credential-ref needs no
//! `authentication none` to be pulled over HTTPS).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::engine::core::{Proof, Sender};
use crate::engine::report::{self, Encoding};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::tls::client::{ClientFiles, Loader};

/// Why the engine asks for a pull now (seed 004 hybrid mode: "the C-SMA pulls on-demand
/// during recovery or anomaly detection").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullReason {
    /// The SCI went STALE (recovery).
    Stale,
    /// A pushed report of the SCI was anomalous (warning, quarantine or rejection).
    Anomaly,
}

/// How a target is collected (YANG `target/mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pulled on the interval, on STALE and on anomalies.
    Poll,
    /// Subscribed to as a Server-Sent Events stream (`sse/`): each event is a report.
    Sse,
}

/// One pull target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub url: String,
    pub interval: Duration,
    pub mode: Mode,
    /// An http URL is accepted (YANG `allow-plaintext`).
    pub allow_plaintext: bool,
    /// The TLS files in effect: the target's own leaves, the rest from `pull/tls`.
    pub tls: ClientFiles,
    /// Whether the target has TLS leaves of its own (then its URL must be https).
    pub own_tls: bool,
}

/// csci-id → target.
pub type PullSettings = HashMap<String, Target>;

fn tls_files(t: &yang2::data::DataTree<'static>, base: &str) -> ClientFiles {
    use crate::engine::northbound::leaf;
    let l = |n: &str| leaf(t, &format!("{base}/tls/{n}"));
    ClientFiles {
        trusted_ca_file: l("trusted-ca-file"),
        client_certificate_file: l("client-certificate-file"),
        client_key_file: l("client-key-file"),
    }
}

/// The collection/pull targets in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> PullSettings {
    use crate::engine::northbound::{leaf, ROOT};
    use yang2::data::Data;
    let wide = tls_files(t, &format!("{ROOT}/collection/pull"));
    let mut out = HashMap::new();
    if let Ok(set) = t.find_xpath("/cats-sma:cats-sma/collection/pull/target") {
        for n in set {
            let path = n.path();
            let l = |name: &str| leaf(t, &format!("{path}/{name}"));
            let interval = l("interval").and_then(|s| s.parse().ok()).map(Duration::from_secs);
            let own = tls_files(t, &path);
            if let (Some(id), Some(url)) = (l("csci-id"), l("url")) {
                out.insert(
                    id,
                    Target {
                        url,
                        interval: interval.unwrap_or(Duration::from_secs(10)).max(Duration::from_secs(1)),
                        mode: if l("mode").as_deref() == Some("sse") { Mode::Sse } else { Mode::Poll },
                        allow_plaintext: l("allow-plaintext").as_deref() == Some("true"),
                        own_tls: !own.is_empty(),
                        tls: own.or(&wide),
                    },
                );
            }
        }
    }
    out
}

/// How a target is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Https,
    Http,
    /// gRPC (`SciAgent/GetReport`) over TLS, ALPN h2.
    Grpcs,
    /// gRPC over plaintext HTTP/2 (h2c, prior knowledge; allow-plaintext).
    Grpc,
}

impl Scheme {
    /// The YANG `target/state/transport` enum.
    pub fn yang(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
            Scheme::Grpcs => "grpcs",
            Scheme::Grpc => "grpc",
        }
    }

    pub fn tls(self) -> bool {
        matches!(self, Scheme::Https | Scheme::Grpcs)
    }

    /// The ALPN protocols the TLS handshake offers.
    pub fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Scheme::Grpcs | Scheme::Grpc => &[b"h2"],
            Scheme::Https | Scheme::Http => &[b"http/1.1"],
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Https | Scheme::Grpcs => 443,
            Scheme::Http | Scheme::Grpc => 80,
        }
    }

    fn of(uri: &hyper::Uri) -> Option<Scheme> {
        match uri.scheme_str()? {
            "https" => Some(Scheme::Https),
            "http" => Some(Scheme::Http),
            "grpcs" => Some(Scheme::Grpcs),
            "grpc" => Some(Scheme::Grpc),
            _ => None,
        }
    }
}

/// The target's scheme, if the agent may pull it: https with trust anchors, or http by
/// explicit choice.
pub fn scheme(t: &Target) -> Result<Scheme, String> {
    let uri: hyper::Uri = t.url.parse().map_err(|e| format!("url {:?}: {e}", t.url))?;
    if uri.host().is_none() {
        return Err(format!("url {:?}: no host", t.url));
    }
    let s = Scheme::of(&uri).ok_or_else(|| {
        format!("url {:?}: the scheme must be https or grpcs (or http or grpc with allow-plaintext)", t.url)
    })?;
    if matches!(s, Scheme::Grpc | Scheme::Grpcs) && !matches!(uri.path(), "" | "/") {
        return Err(format!(
            "{}: a gRPC target's URL has no path (the method is /cats.sma.v1.SciAgent/GetReport)",
            t.url
        ));
    }
    if t.mode == Mode::Sse && !matches!(s, Scheme::Http | Scheme::Https) {
        return Err(format!("{}: an sse target's URL is https (or http with allow-plaintext)", t.url));
    }
    match s {
        Scheme::Https | Scheme::Grpcs if t.tls.trusted_ca_file.is_none() => Err(format!(
            "{} is {} but no trusted-ca-file is configured (here or in pull/tls; the system's roots are not used)",
            t.url,
            s.yang()
        )),
        Scheme::Https | Scheme::Grpcs => Ok(s),
        _ if t.own_tls => Err(format!("{}: 'tls' is configured but the url is not https or grpcs", t.url)),
        _ if t.allow_plaintext => Ok(s),
        _ => Err(format!("{} is plaintext {}: use {}s, or set allow-plaintext", t.url, s.yang(), s.yang())),
    }
}

/// Commit check (the engine consumer's prepare): every target can be pulled as configured,
/// and its TLS files are readable and usable.
pub fn check(t: &yang2::data::DataTree<'static>) -> Result<(), String> {
    for (id, target) in settings(t) {
        let shown = crate::text::printable(&id, 64);
        let s = scheme(&target).map_err(|e| format!("pull target {shown}: {e}"))?;
        if s.tls() {
            crate::tls::client::config(&target.tls, s.alpn()).map_err(|e| format!("pull target {shown}: {e}"))?;
        }
    }
    Ok(())
}

/// How long a pull may take, connection, TLS handshake and answer together (and, again,
/// reading an HTTP body).
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// What a target answered, as received.
pub enum Payload {
    /// An HTTP answer: its body, encoding by Content-Type, and the SCI's proof (the
    /// `Authorization` response header).
    Http { body: Bytes, encoding: Encoding, proof: Option<String> },
    /// A gRPC `GetReport` answer: the `Report` message's bytes (its proof is inside).
    Grpc(Bytes),
}

/// A pulled response and the address it came from.
pub struct Fetched {
    pub payload: Payload,
    pub address: Option<std::net::IpAddr>,
    /// The answer came over TLS from a server whose certificate chained to the target's
    /// trust anchors and named the URL's host.
    pub verified: bool,
}

/// Why a pull brought nothing.
#[derive(Debug)]
pub enum FetchError {
    /// The target did not answer usefully (connection, timeout, HTTP error status).
    Unreachable(String),
    /// The TLS handshake failed (server certificate not trusted or not for the host, client
    /// certificate refused).
    Tls(String),
    /// The target cannot be pulled as configured (plaintext not allowed, TLS files).
    Config(String),
    /// It answered something the agent refuses (too big, compressed, not JSON or CBOR):
    /// counted as a malformed report.
    Refused(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Unreachable(e) | FetchError::Refused(e) => f.write_str(e),
            FetchError::Tls(e) => write!(f, "TLS: {e}"),
            FetchError::Config(e) => write!(f, "not pulled: {e}"),
        }
    }
}

/// An error with its causes ("connection error: received fatal alert: …"), as a TLS
/// failure when rustls raised one of them: with TLS 1.3 a server refusing the client's
/// certificate says so only after the handshake, when the request is sent.
pub(crate) fn failure(e: &(dyn std::error::Error + 'static)) -> FetchError {
    let mut text = e.to_string();
    let mut tls = false;
    let mut cur = Some(e);
    while let Some(err) = cur {
        // io::Error::source() skips the error it wraps: look inside it too.
        let inner = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        tls |= err.is::<rustls::Error>() || inner.is_some_and(|i| i.is::<rustls::Error>());
        if let Some(i) = inner.map(|i| i.to_string()).filter(|i| !text.contains(i.as_str())) {
            text = format!("{text}: {i}");
        }
        cur = err.source();
        if let Some(s) = cur.map(|s| s.to_string()).filter(|s| !text.contains(s.as_str())) {
            text = format!("{text}: {s}");
        }
    }
    if tls {
        FetchError::Tls(text)
    } else {
        FetchError::Unreachable(text)
    }
}

/// One request on a new connection (HTTP/1.1).
async fn exchange<IO>(io: IO, req: hyper::Request<Empty<Bytes>>) -> Result<hyper::Response<Incoming>, FetchError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| failure(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| failure(&e))
}

/// A byte stream to a target: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A connection to a target.
pub(crate) struct Connected {
    pub io: Box<dyn Io>,
    pub address: Option<std::net::IpAddr>,
    /// The server chose HTTP/2 in the TLS handshake (ALPN h2).
    pub h2: bool,
}

/// Where a URL points: its scheme, host (without IPv6 brackets), port and authority.
pub(crate) struct Endpoint {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    pub authority: String,
    pub uri: hyper::Uri,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, FetchError> {
        use FetchError::Config;
        let uri: hyper::Uri = url.parse().map_err(|e| Config(format!("bad URL {url}: {e}")))?;
        let scheme = Scheme::of(&uri)
            .ok_or_else(|| Config(format!("url {url:?}: the scheme must be https, http, grpcs or grpc")))?;
        let host = uri.host().ok_or_else(|| Config(format!("url {url:?}: no host")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.clone());
        Ok(Endpoint { scheme, host, port, authority, uri })
    }

    /// Opens a TCP connection, and TLS over it for https / grpcs (the server's certificate
    /// verified against `tls`'s anchors and for the host).
    pub async fn connect(&self, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Connected, FetchError> {
        use FetchError::{Config, Unreachable};
        let (host, port) = (&self.host, self.port);
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| Unreachable(format!("connect to {host}:{port}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let address = tcp.peer_addr().ok().map(|a| a.ip());
        if !self.scheme.tls() {
            return Ok(Connected { io: Box::new(tcp), address, h2: false });
        }
        let cfg = tls.ok_or_else(|| Config(format!("a {} target needs a trusted-ca-file", self.scheme.yang())))?;
        let name = crate::tls::client::server_name(host).map_err(|e| Config(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| FetchError::Tls(e.to_string()))?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(Connected { io: Box::new(stream), address, h2 })
    }
}

/// Pulls a target: GET for http(s), `SciAgent/GetReport` for grpc(s) (asking for
/// `csci_id`), reading at most `max_body` bytes of its answer; `tls` is the client
/// configuration for an https or grpcs URL.
pub async fn fetch(
    url: &str,
    csci_id: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    max_body: usize,
) -> Result<Fetched, FetchError> {
    let ep = Endpoint::parse(url)?;
    match ep.scheme {
        Scheme::Grpc | Scheme::Grpcs => super::grpc::pull::get_report(&ep, csci_id, tls, max_body).await,
        Scheme::Http | Scheme::Https => get(&ep, tls, max_body).await,
    }
}

/// GETs an http(s) target. The answer is read as sent: the agent asks for no content
/// coding and refuses one (a compressed body could expand without bound).
async fn get(ep: &Endpoint, tls: Option<Arc<rustls::ClientConfig>>, max_body: usize) -> Result<Fetched, FetchError> {
    use FetchError::{Config, Refused, Unreachable};
    let path = ep.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/".into());
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, ep.authority.as_str())
        .header(hyper::header::ACCEPT_ENCODING, "identity")
        .body(Empty::<Bytes>::new())
        .map_err(|e| Config(e.to_string()))?;
    let https = ep.scheme.tls();
    let connect = async {
        let c = ep.connect(tls).await?;
        let resp = exchange(c.io, req).await?;
        Ok::<_, FetchError>((resp, c.address))
    };
    let (resp, address) =
        tokio::time::timeout(TIMEOUT, connect).await.map_err(|_| Unreachable("timed out".into()))??;
    if !resp.status().is_success() {
        return Err(Unreachable(format!("HTTP {}", resp.status())));
    }
    let header = |name: hyper::header::HeaderName| {
        resp.headers().get(name).map(|v| crate::text::printable(&String::from_utf8_lossy(v.as_bytes()), 64))
    };
    if let Some(ce) = header(hyper::header::CONTENT_ENCODING).filter(|c| !c.eq_ignore_ascii_case("identity")) {
        return Err(Refused(format!("content-encoding {ce:?} is not accepted (identity only)")));
    }
    let ct = header(hyper::header::CONTENT_TYPE).unwrap_or_else(|| "application/json".into());
    let enc =
        Encoding::from_content_type(&ct).ok_or_else(|| Refused(format!("content type {ct:?} is not JSON or CBOR")))?;
    if resp
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|n| n > max_body as u64)
    {
        return Err(Refused(format!("body larger than {max_body} bytes")));
    }
    let proof = resp.headers().get("authorization").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let body = tokio::time::timeout(TIMEOUT, Limited::new(resp.into_body(), max_body).collect())
        .await
        .map_err(|_| Unreachable("timed out reading the body".into()))?
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Refused(format!("body larger than {max_body} bytes"))
            } else {
                Unreachable(e.to_string())
            }
        })?
        .to_bytes();
    Ok(Fetched { payload: Payload::Http { body, encoding: enc, proof }, address, verified: https })
}

/// Fetches a target as configured, reading its TLS files now (the `probe-sci` probe); an
/// sse target is probed by opening its stream (a `200` with `text/event-stream`) and
/// closing it at once.
pub async fn probe(csci_id: &str, target: &Target, max_body: usize) -> Result<(), FetchError> {
    let s = scheme(target).map_err(FetchError::Config)?;
    let alpn: &[&[u8]] = if target.mode == Mode::Sse { &[b"h2", b"http/1.1"] } else { s.alpn() };
    let tls = match s.tls() {
        true => Some(crate::tls::client::config(&target.tls, alpn).map_err(|e| FetchError::Config(e.to_string()))?),
        false => None,
    };
    if target.mode == Mode::Sse {
        return super::sse::probe(&target.url, tls).await;
    }
    fetch(&target.url, csci_id, tls, max_body).await.map(|_| ())
}

/// A pulled answer as reports, the proof that covers them and the bytes it covers.
fn decode(payload: Payload) -> Result<(Vec<report::RawReport>, Option<String>, Bytes), report::DecodeError> {
    match payload {
        Payload::Http { body, encoding, proof } => Ok((report::decode(&body, encoding)?, proof, body)),
        Payload::Grpc(msg) => {
            let r = super::grpc::wire::decode_stream_report(msg)?;
            Ok((vec![r.raw], (!r.authorization.is_empty()).then_some(r.authorization), r.signed))
        }
    }
}

/// How pulling one target fares (YANG `pull/target/state`).
#[derive(Clone, Debug, Default)]
pub struct TargetStatus {
    pub scheme: Option<Scheme>,
    pub pulls: u64,
    /// Pulls started because the SCI went STALE / because its report was anomalous.
    pub stale_pulls: u64,
    pub anomaly_pulls: u64,
    pub failures: u64,
    pub last_success: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub last_error_time: Option<DateTime<Utc>>,
    /// An sse target's subscription.
    pub sse: Option<super::sse::SseState>,
    in_flight: bool,
}

/// The status of every target, shared with the operational state.
#[derive(Clone, Default)]
pub struct PullStatus(Arc<Mutex<HashMap<String, TargetStatus>>>);

impl PullStatus {
    pub(crate) fn with<R>(&self, id: &str, f: impl FnOnce(&mut TargetStatus) -> R) -> R {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(id.to_owned()).or_default())
    }

    pub(crate) fn failed(&self, id: &str, error: String) {
        self.with(id, |s| {
            s.failures += 1;
            s.last_error = Some(crate::text::printable(&error, 500));
            s.last_error_time = Some(Utc::now());
        });
    }

    fn succeeded(&self, id: &str) {
        self.with(id, |s| {
            s.pulls += 1;
            s.last_success = Some(Utc::now());
        });
    }

    /// A copy, for the operational state.
    pub fn snapshot(&self) -> Vec<(String, TargetStatus)> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m.iter().map(|(k, s)| (k.clone(), s.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// Clears a target's in-flight mark when its pull ends, however it ends.
struct InFlight(PullStatus, String);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.with(&self.1, |s| s.in_flight = false);
    }
}

async fn pull_one(
    engine: Engine,
    csci_id: String,
    url: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    status: PullStatus,
) {
    let _in_flight = InFlight(status.clone(), csci_id.clone());
    match fetch(&url, &csci_id, tls, engine.limits.pull_response_bytes).await {
        Ok(f) => match decode(f.payload) {
            Ok((raws, proof, body)) => {
                // A verified HTTPS (or grpcs) answer is a certificate proof (seed 004, SCI
                // Authentication): the agent chose whom to ask for this CSCI-ID (the
                // target's URL) and the server proved with a certificate from the
                // target's anchors that it is that host. A credential proof in the answer
                // still decides for an SCI with a credential-ref.
                let sender = Sender {
                    csci_id: Some(csci_id.clone()),
                    transport: "pull",
                    address: f.address,
                    proof: f.verified.then_some(Proof::Certificate),
                    ..Sender::default()
                };
                let results = match engine.ingest_message(raws, proof.as_deref(), &body, sender).await {
                    Ok(r) => r,
                    Err(e) => {
                        status.failed(&csci_id, format!("the answer's proof was refused: {}", e.detail));
                        return;
                    }
                };
                status.succeeded(&csci_id);
                for (reason, detail) in results.iter().filter_map(|r| r.as_ref().err()) {
                    debug!(csci_id, reason = reason.identity(), "pulled report refused: {detail:?}");
                }
            }
            Err(e) => {
                warn!(csci_id, url, "pulled report refused: {:?}", e.to_string());
                status.failed(&csci_id, format!("undecodable answer: {e}"));
                engine.submit_peer(move |core| core.count_rejection(Rejection::Malformed, "pull", &csci_id)).await;
            }
        },
        Err(FetchError::Refused(e)) => {
            warn!(csci_id, url, "pulled report refused: {e:?}");
            status.failed(&csci_id, e);
            engine.submit_peer(move |core| core.count_rejection(Rejection::Malformed, "pull", &csci_id)).await;
        }
        Err(e) => {
            // TLS failures are what an operator must see at once; an unreachable SCI is
            // the SCI state machine's business (STALE, FAILED).
            match &e {
                FetchError::Tls(_) | FetchError::Config(_) => warn!(csci_id, url, "pull failed: {e}"),
                _ => debug!(csci_id, url, "pull failed: {e}"),
            }
            status.failed(&csci_id, e.to_string());
        }
    }
}

/// A target ready to be pulled, as set up at the poller's (re)start.
pub(crate) struct Prepared {
    pub url: String,
    pub interval: Duration,
    pub tls: Option<Loader>,
}

/// Sets the targets up, logging how each is reached: a plaintext target is warned about
/// at every (re)start, one that may not be pulled is reported in its state.
fn prepare(targets: &PullSettings, status: &PullStatus) -> HashMap<String, Prepared> {
    let mut out = HashMap::new();
    for (id, t) in targets {
        let scheme = match scheme(t) {
            Ok(s) => s,
            Err(e) => {
                error!(csci_id = id, "pull target not polled: {e}");
                status.with(id, |s| s.scheme = None);
                status.failed(id, format!("not polled: {e}"));
                continue;
            }
        };
        status.with(id, |s| s.scheme = Some(scheme));
        let tls = match scheme.tls() {
            true => {
                info!(csci_id = id, url = t.url, transport = scheme.yang(), ca = ?t.tls.trusted_ca_file, client_certificate = t.tls.client_certificate_file.is_some(), "pulling over TLS");
                // An event stream takes HTTP/2 when the server offers it.
                let alpn: &[&[u8]] = if t.mode == Mode::Sse { &[b"h2", b"http/1.1"] } else { scheme.alpn() };
                Some(Loader::new(t.tls.clone(), alpn))
            }
            false => {
                warn!(
                    csci_id = id,
                    url = t.url,
                    transport = scheme.yang(),
                    "pull target is plaintext (allow-plaintext): reports and proofs travel in clear"
                );
                None
            }
        };
        out.insert(id.clone(), Prepared { url: t.url.clone(), interval: t.interval, tls });
    }
    out
}

/// Starts a pull of `id` unless one is already running (so a slow target never has more
/// than one connection open, whatever the interval or the engine asks). Returns whether a
/// pull started.
fn start(engine: &Engine, id: &str, p: &mut Prepared, status: &PullStatus) -> bool {
    if status.with(id, |s| std::mem::replace(&mut s.in_flight, true)) {
        return false;
    }
    let tls = match p.tls.as_mut().map(|l| l.get()) {
        Some(Err(e)) => {
            warn!(csci_id = id, "pull target's TLS settings are not usable: {e}");
            status.failed(id, format!("not polled: {e}"));
            status.with(id, |s| s.in_flight = false);
            return false;
        }
        Some(Ok(c)) => Some(c),
        None => None,
    };
    tokio::spawn(pull_one(engine.clone(), id.to_owned(), p.url.clone(), tls, status.clone()));
    true
}

/// Pulls every target on its interval, and a target at once when `now` names it.
pub async fn serve(
    engine: Engine,
    mut settings: watch::Receiver<PullSettings>,
    mut now: mpsc::UnboundedReceiver<(String, PullReason)>,
    status: PullStatus,
) {
    let mut due: HashMap<String, Instant> = HashMap::new();
    // The sse targets' subscriptions, kept across commits that leave their target as it was.
    let mut streams: HashMap<String, super::sse::Subscription> = HashMap::new();
    loop {
        let targets = settings.borrow_and_update().clone();
        status.0.lock().unwrap_or_else(|e| e.into_inner()).retain(|id, _| targets.contains_key(id));
        let mut prepared = prepare(&targets, &status);
        streams.retain(|id, sub| targets.get(id) == Some(&sub.target) && prepared.contains_key(id));
        for (id, _) in targets.iter().filter(|(_, t)| t.mode == Mode::Poll) {
            status.with(id, |s| s.sse = None);
        }
        for (id, t) in targets.iter().filter(|(_, t)| t.mode == Mode::Sse) {
            if let Some(p) = prepared.remove(id) {
                streams
                    .entry(id.clone())
                    .or_insert_with(|| super::sse::Subscription::start(&engine, id, t.clone(), p, &status));
            }
        }
        due.retain(|id, _| prepared.contains_key(id));
        for (id, t) in &prepared {
            due.entry(id.clone()).or_insert_with(|| Instant::now() + t.interval);
        }
        loop {
            let next = due.values().min().copied();
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = settings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                Some((id, reason)) = now.recv() => {
                    if let Some(sub) = streams.get(&id) {
                        // A STALE SCI's stream: reconnect at once if it is waiting to.
                        if reason == PullReason::Stale {
                            sub.wake();
                        }
                    } else if let Some(p) = prepared.get_mut(&id) {
                        if start(&engine, &id, p, &status) {
                            status.with(&id, |s| match reason {
                                PullReason::Stale => s.stale_pulls += 1,
                                PullReason::Anomaly => s.anomaly_pulls += 1,
                            });
                            due.insert(id, Instant::now() + p.interval);
                        }
                    }
                }
                _ = sleep => {
                    let at = Instant::now();
                    for (id, when) in due.iter_mut() {
                        if *when <= at {
                            if let Some(p) = prepared.get_mut(id) {
                                let _ = start(&engine, id, p, &status);
                                *when = at + p.interval;
                            }
                        }
                    }
                }
            }
        }
    }
}

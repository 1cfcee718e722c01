//! HTTP pull (seed 004, pull and hybrid modes): the agent GETs each configured target
//! (`collection/pull/target`: CSCI-ID, URL, interval) on its interval, and at once when the
//! SCI goes STALE (the engine asks). The answer is a report or batch, JSON or CBOR by
//! Content-Type, attributed to the target's CSCI-ID. Also the `probe-sci` probe.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::engine::core::Sender;
use crate::engine::report::{self, Encoding};
use crate::engine::validate::Rejection;
use crate::engine::Engine;

/// One pull target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub url: String,
    pub interval: Duration,
}

/// csci-id → target.
pub type PullSettings = HashMap<String, Target>;

/// The collection/pull targets in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> PullSettings {
    use yang2::data::Data;
    let mut out = HashMap::new();
    if let Ok(set) = t.find_xpath("/cats-sma:cats-sma/collection/pull/target") {
        for n in set {
            let (mut id, mut url, mut interval) = (None, None, Duration::from_secs(10));
            for c in n.children() {
                let v = c.value_canonical();
                match c.schema().name() {
                    "csci-id" => id = v,
                    "url" => url = v,
                    "interval" => {
                        if let Some(s) = v.and_then(|s| s.parse().ok()) {
                            interval = Duration::from_secs(s);
                        }
                    }
                    _ => {}
                }
            }
            if let (Some(id), Some(url)) = (id, url) {
                out.insert(id, Target { url, interval: interval.max(Duration::from_secs(1)) });
            }
        }
    }
    out
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// A pulled response: body, encoding, the SCI's proof (`Authorization` response header)
/// and the address it came from.
pub struct Fetched {
    pub body: Bytes,
    pub encoding: Encoding,
    pub proof: Option<String>,
    pub address: Option<std::net::IpAddr>,
}

/// Why a pull brought nothing.
#[derive(Debug)]
pub enum FetchError {
    /// The target did not answer usefully (connection, timeout, HTTP error status).
    Unreachable(String),
    /// It answered something the agent refuses (too big, compressed, not JSON or CBOR):
    /// counted as a malformed report.
    Refused(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Unreachable(e) | FetchError::Refused(e) => f.write_str(e),
        }
    }
}

/// GETs a target, reading at most `max_body` bytes of its answer. The answer is read as
/// sent: the agent asks for no content coding and refuses one (a compressed body could
/// expand without bound).
pub async fn fetch(url: &str, max_body: usize) -> Result<Fetched, FetchError> {
    use FetchError::{Refused, Unreachable};
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri: hyper::Uri = url.parse().map_err(|e| Unreachable(format!("bad URL {url}: {e}")))?;
    let host = uri.host().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned());
    let req = hyper::Request::get(uri)
        .header(hyper::header::ACCEPT_ENCODING, "identity")
        .body(Empty::<Bytes>::new())
        .map_err(|e| Unreachable(e.to_string()))?;
    let resp = tokio::time::timeout(TIMEOUT, client.request(req)).await.map_err(|_| Unreachable("timed out".into()))?;
    let resp = resp.map_err(|e| Unreachable(e.to_string()))?;
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
    let address = match host {
        Some(h) => match h.parse() {
            Ok(ip) => Some(ip),
            Err(_) => tokio::net::lookup_host((h.as_str(), 0)).await.ok().and_then(|mut a| a.next()).map(|a| a.ip()),
        },
        None => None,
    };
    Ok(Fetched { body, encoding: enc, proof, address })
}

async fn pull_one(engine: Engine, csci_id: String, url: String) {
    match fetch(&url, engine.limits.pull_response_bytes).await {
        Ok(f) => match report::decode(&f.body, f.encoding) {
            Ok(raws) => {
                let sender =
                    Sender { csci_id: Some(csci_id.clone()), transport: "pull", address: f.address, proof: None };
                let Ok(results) = engine.ingest_message(raws, f.proof.as_deref(), &f.body, sender).await else {
                    return;
                };
                for (reason, detail) in results.iter().filter_map(|r| r.as_ref().err()) {
                    debug!(csci_id, reason = reason.identity(), "pulled report refused: {detail:?}");
                }
            }
            Err(e) => {
                warn!(csci_id, url, "pulled report refused: {:?}", e.to_string());
                engine.submit_peer(move |core| core.count_rejection(Rejection::Malformed, &csci_id)).await;
            }
        },
        Err(FetchError::Refused(e)) => {
            warn!(csci_id, url, "pulled report refused: {e:?}");
            engine.submit_peer(move |core| core.count_rejection(Rejection::Malformed, &csci_id)).await;
        }
        Err(e) => debug!(csci_id, url, "pull failed: {:?}", e.to_string()),
    }
}

/// Pulls every target on its interval, and a target at once when `now` names it.
pub async fn serve(
    engine: Engine,
    mut settings: watch::Receiver<PullSettings>,
    mut now: mpsc::UnboundedReceiver<String>,
) {
    let mut due: HashMap<String, Instant> = HashMap::new();
    loop {
        let targets = settings.borrow_and_update().clone();
        due.retain(|id, _| targets.contains_key(id));
        for (id, t) in &targets {
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
                Some(id) = now.recv() => {
                    if let Some(t) = targets.get(&id) {
                        tokio::spawn(pull_one(engine.clone(), id.clone(), t.url.clone()));
                        due.insert(id, Instant::now() + t.interval);
                    }
                }
                _ = sleep => {
                    let at = Instant::now();
                    for (id, when) in due.iter_mut() {
                        if *when <= at {
                            if let Some(t) = targets.get(id) {
                                tokio::spawn(pull_one(engine.clone(), id.clone(), t.url.clone()));
                                *when = at + t.interval;
                            }
                        }
                    }
                }
            }
        }
    }
}

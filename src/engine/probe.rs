//! SCI failure detection beyond the TTL (seed 004, "SCI Failure Detection"): active probes
//! of STALE SCIs that tell an SCI failure from a network partition, and the external health
//! monitor (the `report-sci-failure` RPC) that marks an SCI FAILED at once.
//!
//! When an SCI with a configured probe (`failure-detection/probe/target`) goes STALE, the
//! engine hands a request to the prober task (never probing in the engine task). The prober
//! runs at most `max-concurrent` probes, one per SCI, each a TCP connect or an HTTP GET with
//! the configured timeout, and skips a request whose grace period ended before its turn.
//! When the SCI does not answer it asks the site's reference targets (one round shared by
//! every probe that needs it within a timeout). The verdict is the engine's:
//!
//! - the SCI answers (connected; HTTP 2xx/3xx): alive but not reporting — flagged, the
//!   grace period runs as usual (the pull, if any, is the way back);
//! - the SCI answers HTTP 4xx/5xx (its host is reachable and says it is not well), or does
//!   not answer while a reference target does (or, without reference targets, while other
//!   SCIs still report within their TTL): failed — FAILED now, reason `probe-failed`;
//! - nothing answers: partition suspected — the SCI stays STALE until its grace period
//!   ends, flagged and counted.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::core::Core;
use super::model::{CsciId, SciState};
use super::sci_state::Input;
use super::Engine;

/// How to probe a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// A TCP connection that is accepted is an answer.
    TcpConnect { host: String, port: u16 },
    /// An `http://` URL; any HTTP answer proves the host reachable, 2xx/3xx that it is well.
    HttpGet { url: String },
}

/// The probe settings (YANG `failure-detection/probe`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    pub timeout: Duration,
    pub max_concurrent: usize,
    /// Site reference targets (name, method).
    pub references: Vec<(String, Method)>,
    /// Per SCI.
    pub targets: HashMap<CsciId, Method>,
    /// Per SCI, where its target overrides `timeout`.
    pub target_timeouts: HashMap<CsciId, Duration>,
}

impl ProbeSettings {
    /// The timeout of an SCI's probe.
    pub fn timeout_for(&self, csci_id: &str) -> Duration {
        self.target_timeouts.get(csci_id).copied().unwrap_or(self.timeout)
    }
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            timeout: Duration::from_millis(2000),
            max_concurrent: 8,
            references: Vec::new(),
            targets: HashMap::new(),
            target_timeouts: HashMap::new(),
        }
    }
}

const BASE: &str = "/cats-sma:cats-sma/failure-detection/probe";

fn method(t: &yang2::data::DataTree<'static>, path: &str) -> Option<Method> {
    use crate::engine::northbound::leaf;
    if let Some(url) = leaf(t, &format!("{path}/http-get")) {
        return Some(Method::HttpGet { url });
    }
    let host = leaf(t, &format!("{path}/tcp-connect/address"))?;
    let port = leaf(t, &format!("{path}/tcp-connect/port"))?.parse().ok()?;
    Some(Method::TcpConnect { host, port })
}

/// The probe settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> ProbeSettings {
    use crate::engine::northbound::leaf_u64;
    use yang2::data::Data;
    let d = ProbeSettings::default();
    let mut s = ProbeSettings {
        timeout: leaf_u64(t, &format!("{BASE}/timeout")).map(Duration::from_millis).unwrap_or(d.timeout),
        max_concurrent: leaf_u64(t, &format!("{BASE}/max-concurrent")).map(|n| n as usize).unwrap_or(d.max_concurrent),
        ..d
    };
    for (list, key) in [("reference", "name"), ("target", "csci-id")] {
        let Ok(set) = t.find_xpath(&format!("{BASE}/{list}")) else { continue };
        for n in set {
            let path = n.path();
            let (Some(k), Some(m)) = (crate::engine::northbound::leaf(t, &format!("{path}/{key}")), method(t, &path))
            else {
                continue;
            };
            if list == "reference" {
                s.references.push((k, m));
            } else {
                if let Some(t) = leaf_u64(t, &format!("{path}/timeout")) {
                    s.target_timeouts.insert(k.clone(), Duration::from_millis(t));
                }
                s.targets.insert(k, m);
            }
        }
    }
    s.references.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

/// Commit check: every HTTP probe URL is a plain `http://` URL with a host.
pub fn check(t: &yang2::data::DataTree<'static>) -> Result<(), String> {
    let s = settings(t);
    let all = s.references.iter().map(|(n, m)| (format!("reference {n}"), m)).chain(s.targets.iter().map(|(id, m)| {
        let shown = crate::text::printable(id, 64);
        (format!("target {shown}"), m)
    }));
    for (what, m) in all {
        if let Method::HttpGet { url } = m {
            let uri: hyper::Uri =
                url.parse().map_err(|e| format!("failure-detection probe {what}: url {url:?}: {e}"))?;
            if uri.scheme_str() != Some("http") || uri.host().is_none() {
                return Err(format!(
                    "failure-detection probe {what}: {url:?} must be an http:// URL with a host (https probes are not supported)"
                ));
            }
        }
    }
    Ok(())
}

/// What a probe of one target found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Connected; HTTP 2xx or 3xx.
    Answered,
    /// An HTTP answer with another status: reachable, and not well.
    Unhealthy(String),
    /// Timed out, refused, unreachable, not HTTP.
    NoAnswer(String),
}

impl Answer {
    fn yang(&self) -> &'static str {
        match self {
            Answer::Answered => "answered",
            Answer::Unhealthy(_) => "unhealthy",
            Answer::NoAnswer(_) => "no-answer",
        }
    }
}

/// One probe's findings, handed to the engine.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub sci: Answer,
    /// Round trip of the SCI's probe when it answered.
    pub rtt: Option<Duration>,
    /// Whether a reference target answered; `None` when none was asked (the SCI answered,
    /// or none is configured).
    pub reference: Option<bool>,
    pub at: DateTime<Utc>,
    /// The STALE episode the probe was asked for (`Request::episode`).
    pub episode: u64,
}

/// What the engine concluded from a probe (YANG `verdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    SciFailed,
    PartitionSuspected,
    AliveNotReporting,
    /// The SCI was no longer STALE when the result came (it reported, or failed meanwhile),
    /// or is STALE again in a later episode than the one probed.
    Moot,
}

impl Verdict {
    fn yang(self) -> &'static str {
        match self {
            Verdict::SciFailed => "sci-failed",
            Verdict::PartitionSuspected => "partition-suspected",
            Verdict::AliveNotReporting => "alive-not-reporting",
            Verdict::Moot => "moot",
        }
    }
}

/// The last probe of one SCI (YANG `failure-detection/state/sci`).
#[derive(Clone, Debug)]
pub struct Record {
    pub probes: u64,
    pub outcome: Outcome,
    pub verdict: Verdict,
}

/// Failure-detection counters (YANG `failure-detection/state`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub probes: u64,
    pub probes_skipped: u64,
    pub probe_failures: u64,
    pub partitions_suspected: u64,
    pub alive_not_reporting: u64,
    pub health_monitor_failures: u64,
}

/// A probe the engine asks for.
#[derive(Clone, Debug)]
pub struct Request {
    pub csci_id: CsciId,
    pub method: Method,
    pub settings: Arc<ProbeSettings>,
    /// The SCI's probe timeout (reference probes use the settings' timeout).
    pub timeout: Duration,
    /// When the SCI's grace period ends: a probe not started by then is moot.
    pub deadline: Instant,
    /// Which STALE episode of the SCI this probe is for: its result decides that episode
    /// only (a later one gets a probe of its own).
    pub episode: u64,
}

/// The engine's side of failure detection (owned by `Core`).
#[derive(Default)]
pub struct Detection {
    pub settings: Arc<ProbeSettings>,
    /// The prober task; None until the agent starts it (in-process engines never probe).
    pub requests: Option<mpsc::UnboundedSender<Request>>,
    /// Per probed SCI: only SCIs with a configured target, so bounded by the configuration.
    pub records: HashMap<CsciId, Record>,
    pub counters: Counters,
    /// Per probed SCI, the STALE episode last asked for (bounded by the targets).
    episodes: HashMap<CsciId, u64>,
    /// The last episode number handed out (never reused, so no stale result can match).
    last_episode: u64,
}

impl Detection {
    pub fn configure(&mut self, s: ProbeSettings) {
        self.records.retain(|id, _| s.targets.contains_key(id));
        self.episodes.retain(|id, _| s.targets.contains_key(id));
        self.settings = Arc::new(s);
    }
}

impl Core {
    /// An SCI went STALE: probe it if it has a probe target (seed 004: active probes to
    /// unresponsive SCIs).
    pub(crate) fn request_probe(&mut self, csci_id: &str) {
        let (Some(tx), Some(method)) = (&self.failure.requests, self.failure.settings.targets.get(csci_id)) else {
            return;
        };
        let grace = self.cache.get(csci_id).map(|e| e.grace()).unwrap_or_default();
        self.failure.last_episode += 1;
        let episode = self.failure.last_episode;
        self.failure.episodes.insert(csci_id.to_owned(), episode);
        let _ = tx.send(Request {
            csci_id: csci_id.to_owned(),
            method: method.clone(),
            settings: self.failure.settings.clone(),
            timeout: self.failure.settings.timeout_for(csci_id),
            deadline: self.clock.now() + grace,
            episode,
        });
    }

    /// A probe request dropped because the SCI's grace period ended before its turn.
    pub fn probe_skipped(&mut self, csci_id: &str) {
        self.failure.counters.probes_skipped += 1;
        tracing::debug!(csci_id, "probe not started: the grace period ended first");
    }

    /// Applies a probe's findings (the rules in the module documentation).
    pub fn probe_result(&mut self, csci_id: &str, outcome: Outcome) {
        if !self.failure.settings.targets.contains_key(csci_id) {
            return;
        }
        self.failure.counters.probes += 1;
        // STALE still, and in the episode that was probed: a result for an earlier episode
        // (the SCI reported and went STALE again meanwhile) decides nothing.
        let stale = self.cache.get(csci_id).is_some_and(|e| e.state == SciState::Stale)
            && self.failure.episodes.get(csci_id) == Some(&outcome.episode);
        let verdict = match (&outcome.sci, outcome.reference) {
            _ if !stale => Verdict::Moot,
            (Answer::Answered, _) => Verdict::AliveNotReporting,
            (Answer::Unhealthy(_), _) | (Answer::NoAnswer(_), Some(true)) => Verdict::SciFailed,
            (Answer::NoAnswer(_), Some(false)) => Verdict::PartitionSuspected,
            // No reference target: other SCIs reporting within their TTL show the site's
            // network reaches the agent (the SCI is STALE, so it is not among them).
            (Answer::NoAnswer(_), None) if self.cache.healthy_count() > 0 => Verdict::SciFailed,
            (Answer::NoAnswer(_), None) => Verdict::PartitionSuspected,
        };
        let detail = match &outcome.sci {
            Answer::Answered => String::new(),
            Answer::Unhealthy(d) | Answer::NoAnswer(d) => d.clone(),
        };
        match verdict {
            Verdict::SciFailed => {
                self.failure.counters.probe_failures += 1;
                tracing::warn!(
                    csci_id,
                    probe = outcome.sci.yang(),
                    reference = ?outcome.reference,
                    "SCI failed (active probe: the SCI does not answer while the site does): {detail:?}"
                );
                let ev = self.cache.fail(csci_id, Input::ProbeFailed, self.clock.wall());
                self.absorb(ev);
            }
            Verdict::PartitionSuspected => {
                self.failure.counters.partitions_suspected += 1;
                tracing::warn!(
                    csci_id,
                    "network partition suspected (active probe: neither the SCI nor the site answers); \
                     the SCI stays STALE until its grace period ends: {detail:?}"
                );
                if let Some(e) = self.cache.get_mut(csci_id) {
                    e.flags.partition_suspected = true;
                }
                self.events.push(super::core::EngineEvent::SciUpdated { csci_id: csci_id.to_owned() });
            }
            Verdict::AliveNotReporting => {
                self.failure.counters.alive_not_reporting += 1;
                tracing::info!(csci_id, "STALE SCI answers its probe: alive but not reporting");
                if let Some(e) = self.cache.get_mut(csci_id) {
                    e.flags.alive_not_reporting = true;
                }
                self.events.push(super::core::EngineEvent::SciUpdated { csci_id: csci_id.to_owned() });
            }
            Verdict::Moot => {}
        }
        let probes = self.failure.records.get(csci_id).map_or(0, |r| r.probes) + 1;
        self.failure.records.insert(csci_id.to_owned(), Record { probes, outcome, verdict });
    }

    /// The external health monitor says the SCI failed (seed 004: detect failures faster
    /// than TTL-based detection): FAILED now, GAS contribution 0, an immediate update to
    /// the C-PS (the failure trigger), logged. Returns the states before and after.
    pub fn health_monitor_failure(&mut self, csci_id: &str, detail: &str) -> Result<(SciState, SciState), String> {
        let Some(from) = self.cache.get(csci_id).map(|e| e.state) else {
            return Err(format!("{} has no metric-cache entry (evicted)", crate::text::printable(csci_id, 64)));
        };
        let ev = self.cache.fail(csci_id, Input::HealthMonitor, self.clock.wall());
        if !ev.is_empty() {
            self.failure.counters.health_monitor_failures += 1;
            tracing::warn!(csci_id, from = from.yang(), "SCI failed (external health monitor): {detail:?}");
        }
        self.absorb(ev);
        Ok((from, self.cache.get(csci_id).map_or(SciState::Failed, |e| e.state)))
    }
}

// ----- the prober task -----------------------------------------------------------------

/// Probes one target within `timeout`.
pub async fn probe(m: &Method, timeout: Duration) -> Answer {
    let attempt = async {
        match m {
            Method::TcpConnect { host, port } => match tokio::net::TcpStream::connect((host.as_str(), *port)).await {
                Ok(_) => Answer::Answered,
                Err(e) => Answer::NoAnswer(format!("connect to {host}:{port}: {e}")),
            },
            Method::HttpGet { url } => http_get(url).await,
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(a) => a,
        Err(_) => Answer::NoAnswer(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn http_get(url: &str) -> Answer {
    let Ok(uri) = url.parse::<hyper::Uri>() else { return Answer::NoAnswer(format!("bad URL {url:?}")) };
    let (Some(host), Some("http")) = (uri.host(), uri.scheme_str()) else {
        return Answer::NoAnswer(format!("{url:?} is not an http:// URL"));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.clone());
    let path = uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/".into());
    let tcp = match tokio::net::TcpStream::connect((host.as_str(), port)).await {
        Ok(t) => t,
        Err(e) => return Answer::NoAnswer(format!("connect to {host}:{port}: {e}")),
    };
    let Ok(req) = hyper::Request::get(path).header(hyper::header::HOST, authority).body(Empty::<Bytes>::new()) else {
        return Answer::NoAnswer(format!("bad URL {url:?}"));
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(x) => x,
        Err(e) => return Answer::NoAnswer(format!("HTTP: {e}")),
    };
    // The connection ends with the probe, however it ends (a timeout drops this future):
    // a target that never answers cannot keep connections of the agent open.
    let _conn = AbortOnDrop(tokio::spawn(conn));
    // The body is not read: the status is the answer.
    match sender.send_request(req).await {
        Ok(resp) if resp.status().is_success() || resp.status().is_redirection() => Answer::Answered,
        Ok(resp) => Answer::Unhealthy(format!("HTTP {}", resp.status())),
        Err(e) => Answer::NoAnswer(format!("HTTP: {e}")),
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One round of reference probes, shared by the probes that need it while it is fresh
/// (younger than the probe timeout, same settings), so a partition that turns many SCIs
/// STALE at once costs one round, not one per SCI.
#[derive(Default)]
struct References {
    last: tokio::sync::Mutex<Option<(Instant, Arc<ProbeSettings>, bool)>>,
}

impl References {
    async fn answered(&self, s: &Arc<ProbeSettings>) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, of, answered)) = last.as_ref() {
            if Arc::ptr_eq(of, s) && at.elapsed() < s.timeout {
                return *answered;
            }
        }
        let mut round = JoinSet::new();
        for (_, m) in &s.references {
            let (m, t) = (m.clone(), s.timeout);
            round.spawn(async move { probe(&m, t).await });
        }
        let mut answered = false;
        while let Some(a) = round.join_next().await {
            if matches!(a, Ok(Answer::Answered | Answer::Unhealthy(_))) {
                answered = true;
                round.abort_all();
            }
        }
        *last = Some((Instant::now(), s.clone(), answered));
        answered
    }
}

async fn probe_one(r: Request, refs: Arc<References>) -> Outcome {
    let started = Instant::now();
    let sci = probe(&r.method, r.timeout).await;
    let rtt = (!matches!(sci, Answer::NoAnswer(_))).then(|| started.elapsed());
    let reference = match &sci {
        Answer::NoAnswer(_) if !r.settings.references.is_empty() => Some(refs.answered(&r.settings).await),
        _ => None,
    };
    Outcome { sci, rtt, reference, at: Utc::now(), episode: r.episode }
}

/// The prober: takes the engine's requests, runs at most `max-concurrent` probes at once
/// (one per SCI), hands each outcome back to the engine.
pub async fn serve(engine: Engine, mut requests: mpsc::UnboundedReceiver<Request>) {
    let refs = Arc::new(References::default());
    let mut queue: VecDeque<Request> = VecDeque::new();
    // Queued or running, with the episode asked for: a second request for the same SCI and
    // episode joins the first; one for a later episode replaces a queued request, or waits
    // in `next` for the running probe to end (one probe per SCI at a time).
    let mut pending: HashMap<CsciId, u64> = HashMap::new();
    let mut next: HashMap<CsciId, Request> = HashMap::new();
    let mut running: JoinSet<(CsciId, Outcome)> = JoinSet::new();
    let mut ids: HashMap<tokio::task::Id, CsciId> = HashMap::new();
    let mut limit = ProbeSettings::default().max_concurrent;
    loop {
        tokio::select! {
            r = requests.recv() => match r {
                Some(r) => {
                    limit = r.settings.max_concurrent.max(1);
                    match pending.get(&r.csci_id) {
                        None => {
                            pending.insert(r.csci_id.clone(), r.episode);
                            queue.push_back(r);
                        }
                        Some(e) if *e == r.episode => {}
                        Some(_) => match queue.iter_mut().find(|q| q.csci_id == r.csci_id) {
                            Some(q) => {
                                pending.insert(r.csci_id.clone(), r.episode);
                                *q = r;
                            }
                            None => {
                                next.insert(r.csci_id.clone(), r);
                            }
                        },
                    }
                }
                None => return,
            },
            Some(done) = running.join_next_with_id(), if !running.is_empty() => match done {
                Ok((id, (csci_id, outcome))) => {
                    ids.remove(&id);
                    pending.remove(&csci_id);
                    if let Some(r) = next.remove(&csci_id) {
                        pending.insert(csci_id.clone(), r.episode);
                        queue.push_back(r);
                    }
                    engine.submit(move |core| core.probe_result(&csci_id, outcome));
                }
                Err(e) => {
                    if let Some(csci_id) = ids.remove(&e.id()) {
                        tracing::error!(csci_id, "probe task ended abnormally: {e}");
                        pending.remove(&csci_id);
                        if let Some(r) = next.remove(&csci_id) {
                            pending.insert(csci_id, r.episode);
                            queue.push_back(r);
                        }
                    }
                }
            },
        }
        while running.len() < limit {
            let Some(r) = queue.pop_front() else { break };
            if Instant::now() >= r.deadline {
                pending.remove(&r.csci_id);
                let id = r.csci_id;
                engine.submit(move |core| core.probe_skipped(&id));
                continue;
            }
            let id = r.csci_id.clone();
            let task = {
                let (id, refs) = (id.clone(), refs.clone());
                running.spawn(async move { (id, probe_one(r, refs).await) })
            };
            ids.insert(task.id(), id);
        }
    }
}

// ----- state out ---------------------------------------------------------------------------

/// `/cats-sma/failure-detection/state` and `/cats-sma/cache/state`, from the engine.
pub struct FailureState {
    pub engine: Engine,
}

struct Snapshot {
    counters: Counters,
    records: Vec<(CsciId, Record)>,
    evictions: u64,
    retained: usize,
    retained_dropped: u64,
}

fn time(t: DateTime<Utc>) -> String {
    crate::datastore::tree::yang_time(t)
}

fn to_xml(s: &Snapshot) -> String {
    use std::fmt::Write as _;
    let esc = |x: &str| crate::text::xml(x).into_owned();
    let c = &s.counters;
    let mut out = String::from("<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\">");
    let _ = write!(
        out,
        "<cache><state><evictions>{}</evictions><retained-histories>{}</retained-histories>\
         <retained-histories-dropped>{}</retained-histories-dropped></state></cache>",
        s.evictions, s.retained, s.retained_dropped
    );
    let _ = write!(
        out,
        "<failure-detection><state><probes>{}</probes><probes-skipped>{}</probes-skipped>\
         <probe-failures>{}</probe-failures><partitions-suspected>{}</partitions-suspected>\
         <alive-not-reporting>{}</alive-not-reporting><health-monitor-failures>{}</health-monitor-failures>",
        c.probes,
        c.probes_skipped,
        c.probe_failures,
        c.partitions_suspected,
        c.alive_not_reporting,
        c.health_monitor_failures
    );
    for (id, r) in &s.records {
        let o = &r.outcome;
        let _ = write!(
            out,
            "<sci><csci-id>{}</csci-id><probes>{}</probes><last-probe>{}</last-probe><result>{}</result>",
            esc(id),
            r.probes,
            time(o.at),
            o.sci.yang()
        );
        if let Some(rtt) = o.rtt {
            let _ = write!(out, "<rtt>{}</rtt>", rtt.as_micros().min(u32::MAX as u128));
        }
        let reference = match o.reference {
            Some(true) => "answered",
            Some(false) => "no-answer",
            None => "not-asked",
        };
        let _ = write!(out, "<reference>{reference}</reference><verdict>{}</verdict>", r.verdict.yang());
        if let Answer::Unhealthy(d) | Answer::NoAnswer(d) = &o.sci {
            let _ = write!(out, "<detail>{}</detail>", esc(&crate::text::printable(d, 500)));
        }
        out.push_str("</sci>");
    }
    out.push_str("</state></failure-detection></cats-sma>\0");
    out
}

impl crate::datastore::StateProvider for FailureState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(
        &self,
        tree: &mut yang2::data::DataTree<'static>,
        xpath: Option<&str>,
    ) -> Result<(), crate::error::RpcError> {
        use yang2::data::{DataFormat, DataParserFlags, DataTree, DataValidationFlags};
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let Some(snap) = self.engine.query_blocking(|core| {
            let mut records: Vec<_> = core.failure.records.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            records.sort_by(|a, b| a.0.cmp(&b.0));
            Snapshot {
                counters: core.failure.counters,
                records,
                evictions: core.cache.evictions,
                retained: core.retained.len(),
                retained_dropped: core.retained.dropped,
            }
        }) else {
            return Ok(());
        };
        let xml = to_xml(&snap);
        let state = DataTree::parse_string(
            crate::yang::context(),
            xml.as_bytes(),
            DataFormat::XML,
            DataParserFlags::STRICT | DataParserFlags::from_bits_retain(yang2::ffi::LYD_PARSE_STORE_ONLY),
            DataValidationFlags::empty(),
        )
        .map_err(|e| crate::error::RpcError::from_libyang(&e))?;
        crate::datastore::tree::merge_moving(tree, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls the engine's failure-detection counters until `done` holds (or `deadline`).
    async fn counters_until(
        engine: &crate::engine::Engine,
        deadline: Instant,
        done: impl Fn(&Counters) -> bool,
    ) -> Counters {
        loop {
            let c = engine.query(|core| core.failure.counters).await.unwrap();
            if done(&c) {
                return c;
            }
            assert!(Instant::now() < deadline, "{c:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    use crate::engine::clock::Clock;
    use crate::engine::collect::pull::PullReason;
    use crate::engine::core::{EngineEvent, SciConfig, Sender};
    use crate::engine::report::RawReport;
    use crate::engine::validate::{AnomalyAction, Rejection};

    fn sci() -> SciConfig {
        SciConfig {
            cs_ids: vec!["AR1".into()],
            credential_ref: None,
            unauthenticated: true,
            expected_interval: Duration::from_secs(1),
        }
    }

    fn raw(core: &Core, id: &str, seq: u64, gas: i64) -> RawReport {
        RawReport {
            csci_id: id.into(),
            cs_id: "AR1".into(),
            sequence: seq,
            timestamp: core.clock.wall(),
            gas,
            computing_time: 5,
            health: "HEALTHY".into(),
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    fn core_with(ids: &[&str], probed: &[&str], references: bool) -> (Core, mpsc::UnboundedReceiver<Request>) {
        let mut core = Core::new(Clock::new());
        let (tx, rx) = mpsc::unbounded_channel();
        core.failure.requests = Some(tx);
        let mut s = ProbeSettings::default();
        for id in probed {
            s.targets.insert((*id).into(), Method::TcpConnect { host: "127.0.0.1".into(), port: 9 });
        }
        if references {
            s.references.push(("gw".into(), Method::TcpConnect { host: "127.0.0.1".into(), port: 9 }));
        }
        core.failure.configure(s);
        for id in ids {
            core.set_sci(id, sci());
            let r = raw(&core, id, 1, 100);
            core.ingest(&r, None).unwrap();
        }
        (core, rx)
    }

    /// A probe result for the SCI's current STALE episode.
    fn outcome(core: &Core, id: &str, sci: Answer, reference: Option<bool>) -> Outcome {
        let episode = core.failure.episodes.get(id).copied().unwrap_or_default();
        Outcome { sci, rtt: None, reference, at: Utc::now(), episode }
    }

    fn state(core: &Core, id: &str) -> SciState {
        core.cache.get(id).unwrap().state
    }

    fn reasons(core: &Core) -> Vec<(String, &'static str, &'static str)> {
        core.events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::SciStateChange { csci_id, to, reason, .. } => Some((csci_id.clone(), to.yang(), *reason)),
                _ => None,
            })
            .collect()
    }

    /// Lets the TTL (2 s) pass: the SCIs go STALE and the probed ones are asked for.
    async fn go_stale(core: &mut Core) {
        tokio::time::advance(Duration::from_millis(2001)).await;
        core.tick();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seed004_sci_failure_detection_prober_bounds_concurrency_and_skips_late_requests() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // A slow target: it holds each probe a while, and counts it done before it answers
        // (so the next probe, started on the answer, is never counted with it).
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (open, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (o, p) = (open.clone(), peak.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let n = o.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(n, Ordering::SeqCst);
                let o = o.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    o.fetch_sub(1, Ordering::SeqCst);
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                });
            }
        });
        let engine = Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}));
        let url = format!("http://{addr}/healthz");
        let mut s = ProbeSettings { timeout: Duration::from_secs(10), max_concurrent: 2, ..Default::default() };
        for i in 0..6 {
            s.targets.insert(format!("sci-{i}"), Method::HttpGet { url: url.clone() });
        }
        let s = Arc::new(s);
        let cfg = (*s).clone();
        engine.query(move |core| core.failure.configure(cfg)).await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(engine.clone(), rx));
        let far = Instant::now() + Duration::from_secs(3600);
        for i in 0..6 {
            let r = Request {
                csci_id: format!("sci-{i}"),
                method: s.targets[&format!("sci-{i}")].clone(),
                settings: s.clone(),
                timeout: s.timeout,
                deadline: far,
                episode: 1,
            };
            tx.send(r.clone()).unwrap();
            // A second request for an SCI already waiting joins the first.
            tx.send(r).unwrap();
        }
        // One whose grace period is over is not probed.
        let late = Request {
            csci_id: "sci-0".into(),
            method: Method::HttpGet { url },
            settings: s.clone(),
            timeout: s.timeout,
            deadline: Instant::now(),
            episode: 1,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        counters_until(&engine, deadline, |c| c.probes == 6).await;
        assert_eq!(peak.load(Ordering::SeqCst), 2, "at most max-concurrent probes at once");
        tx.send(late).unwrap();
        let c = counters_until(&engine, deadline, |c| c.probes_skipped == 1).await;
        assert_eq!(c.probes, 6);
        // Every result was recorded (moot: none of them is a STALE SCI).
        let r = engine.query(|core| core.failure.records["sci-3"].clone()).await.unwrap();
        assert!(r.outcome.sci == Answer::Answered && r.verdict == Verdict::Moot, "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_failure_detection_a_target_may_have_its_own_timeout() {
        let (mut core, mut rx) = core_with(&["a", "b"], &["a", "b"], false);
        let mut s = (*core.failure.settings).clone();
        s.target_timeouts.insert("b".into(), Duration::from_millis(300));
        core.failure.configure(s);
        go_stale(&mut core).await;
        let mut got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).map(|r| (r.csci_id, r.timeout)).collect();
        got.sort();
        assert_eq!(got, [("a".into(), Duration::from_millis(2000)), ("b".into(), Duration::from_millis(300))]);
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_failure_detection_probe_tells_sci_failure_from_partition() {
        let (mut core, mut rx) = core_with(&["a", "b", "c", "d"], &["a", "b", "c"], true);
        go_stale(&mut core).await;
        // A probe per probed SCI, none for d, each due by the end of its grace period.
        let mut asked: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).map(|r| r.csci_id).collect();
        asked.sort();
        assert_eq!(asked, ["a", "b", "c"]);
        core.events.clear();
        // a: no answer while the reference answers → FAILED now, probe-failed, GAS 0.
        core.probe_result("a", outcome(&core, "a", Answer::NoAnswer("refused".into()), Some(true)));
        assert_eq!(state(&core, "a"), SciState::Failed);
        assert_eq!(reasons(&core), [("a".into(), "failed", "probe-failed")]);
        assert!(core.events.iter().any(|e| matches!(e, EngineEvent::SiteChanged { .. })));
        assert_eq!(core.cache.site("AR1").unwrap().gas, 300);
        // b: nothing answers → partition suspected, stays STALE, flagged and counted.
        core.probe_result("b", outcome(&core, "b", Answer::NoAnswer("timed out".into()), Some(false)));
        assert_eq!(state(&core, "b"), SciState::Stale);
        assert!(core.cache.get("b").unwrap().flags.partition_suspected);
        // c: it answers → alive but not reporting, STALE until its grace period ends.
        core.probe_result("c", outcome(&core, "c", Answer::Answered, None));
        assert_eq!(state(&core, "c"), SciState::Stale);
        assert!(core.cache.get("c").unwrap().flags.alive_not_reporting);
        let c = core.failure.counters;
        assert_eq!((c.probes, c.probe_failures, c.partitions_suspected, c.alive_not_reporting), (3, 1, 1, 1));
        assert_eq!(core.failure.records["b"].verdict, Verdict::PartitionSuspected);
        // The grace period (5 s) still ends the partition-suspected SCI.
        tokio::time::advance(Duration::from_secs(5)).await;
        core.tick();
        assert_eq!(state(&core, "b"), SciState::Failed);
        // A report brings a probe-failed SCI back, and clears the flags.
        let r = raw(&core, "a", 2, 100);
        core.ingest(&r, None).unwrap();
        assert_eq!(state(&core, "a"), SciState::Healthy);
        // A late result for a reporting SCI is moot.
        core.probe_result("a", outcome(&core, "a", Answer::NoAnswer("late".into()), Some(true)));
        assert_eq!(state(&core, "a"), SciState::Healthy);
        assert_eq!(core.failure.records["a"].verdict, Verdict::Moot);
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_failure_detection_a_probe_decides_only_its_own_stale_episode() {
        let (mut core, mut rx) = core_with(&["a", "b"], &["a"], true);
        go_stale(&mut core).await;
        let first = rx.try_recv().unwrap();
        // a reports, then goes STALE again (its TTL runs from the report) while the first
        // probe is still out.
        let r = raw(&core, "a", 2, 100);
        core.ingest(&r, None).unwrap();
        for _ in 0..10 {
            go_stale(&mut core).await;
            if state(&core, "a") == SciState::Stale {
                break;
            }
        }
        assert_eq!(state(&core, "a"), SciState::Stale);
        let second = rx.try_recv().unwrap();
        assert!(second.episode > first.episode, "{} then {}", first.episode, second.episode);
        // The first probe's failure is moot for the new episode.
        let old =
            Outcome { episode: first.episode, ..outcome(&core, "a", Answer::NoAnswer("refused".into()), Some(true)) };
        core.probe_result("a", old);
        assert_eq!(state(&core, "a"), SciState::Stale);
        assert_eq!(core.failure.records["a"].verdict, Verdict::Moot);
        assert_eq!(core.failure.counters.probe_failures, 0);
        // The new episode's own probe decides it.
        let new =
            Outcome { episode: second.episode, ..outcome(&core, "a", Answer::NoAnswer("refused".into()), Some(true)) };
        core.probe_result("a", new);
        assert_eq!(state(&core, "a"), SciState::Failed);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seed004_sci_failure_detection_a_later_stale_episode_gets_its_own_probe() {
        // A slow target holds the first probe while the second episode's request comes.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                });
            }
        });
        let engine = Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}));
        let method = Method::HttpGet { url: format!("http://{addr}/healthz") };
        let mut s = ProbeSettings { timeout: Duration::from_secs(10), ..Default::default() };
        s.targets.insert("a".into(), method.clone());
        let s = Arc::new(s);
        let cfg = (*s).clone();
        engine.query(move |core| core.failure.configure(cfg)).await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(engine.clone(), rx));
        let far = Instant::now() + Duration::from_secs(3600);
        let request = |episode| Request {
            csci_id: "a".into(),
            method: method.clone(),
            settings: s.clone(),
            timeout: s.timeout,
            deadline: far,
            episode,
        };
        tx.send(request(1)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while accepted.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The first probe runs: the same episode again joins it, a later one waits for it.
        tx.send(request(1)).unwrap();
        tx.send(request(2)).unwrap();
        counters_until(&engine, deadline, |c| c.probes == 2).await;
        let r = engine.query(|core| core.failure.records["a"].clone()).await.unwrap();
        assert_eq!(r.outcome.episode, 2);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "one probe per episode");
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_failure_detection_without_references_other_reporting_scis_are_the_site() {
        let (mut core, _rx) = core_with(&["a", "b"], &["a"], false);
        go_stale(&mut core).await;
        // Both STALE: nobody reports, so a silent SCI is a suspected partition.
        core.probe_result("a", outcome(&core, "a", Answer::NoAnswer("timed out".into()), None));
        assert_eq!(core.failure.records["a"].verdict, Verdict::PartitionSuspected);
        // b reports again: the site reaches the agent, a's silence is its failure.
        let r = raw(&core, "b", 2, 100);
        core.ingest(&r, None).unwrap();
        core.probe_result("a", outcome(&core, "a", Answer::NoAnswer("timed out".into()), None));
        assert_eq!(state(&core, "a"), SciState::Failed);
        // An HTTP error status is a failure whatever the references say.
        let (mut core, _rx) = core_with(&["x"], &["x"], true);
        go_stale(&mut core).await;
        core.probe_result("x", outcome(&core, "x", Answer::Unhealthy("HTTP 503".into()), None));
        assert_eq!(state(&core, "x"), SciState::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_failure_detection_health_monitor_fails_at_once() {
        let (mut core, _rx) = core_with(&["a", "b"], &[], false);
        core.events.clear();
        assert_eq!(core.health_monitor_failure("a", "down").unwrap(), (SciState::Healthy, SciState::Failed));
        assert_eq!(reasons(&core), [("a".into(), "failed", "health-monitor")]);
        assert_eq!(core.cache.site("AR1").unwrap().gas, 100);
        assert_eq!(core.failure.counters.health_monitor_failures, 1);
        // Again: nothing changes, nothing counted.
        assert_eq!(core.health_monitor_failure("a", "down").unwrap(), (SciState::Failed, SciState::Failed));
        assert_eq!(core.failure.counters.health_monitor_failures, 1);
        assert!(core.health_monitor_failure("nobody", "").is_err());
        // Recovery: the next accepted report.
        let r = raw(&core, "a", 2, 100);
        core.ingest(&r, None).unwrap();
        assert_eq!((state(&core, "a"), core.cache.site("AR1").unwrap().gas), (SciState::Healthy, 200));
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_metric_cache_eviction_and_deregistration_are_notified_and_keep_the_history() {
        let (mut core, _rx) = core_with(&["a", "b"], &[], false);
        core.set_cache_config(crate::engine::core::CacheConfig { max_entries: 2, ..Default::default() });
        core.events.clear();
        // A third SCI evicts the least recently used (a): notified, withdrawn, remembered.
        core.set_sci("c", sci());
        assert_eq!(reasons(&core), [("a".into(), "failed", "evicted")]);
        assert!(core.events.iter().any(|e| matches!(e, EngineEvent::Withdrawn { csci_id, .. } if csci_id == "a")));
        assert_eq!((core.cache.evictions, core.retained.len()), (1, 1));
        // a's replay on re-entry is still a duplicate.
        let replay = raw(&core, "a", 1, 100);
        tokio::time::advance(Duration::from_millis(10)).await;
        let mut stale_copy = replay.clone();
        stale_copy.timestamp = replay.timestamp;
        assert_eq!(core.ingest(&stale_copy, None).unwrap_err().0, Rejection::Duplicate);
        // Deregistration: notified, withdrawn, remembered; the replay after re-registering
        // is refused.
        core.set_cache_config(crate::engine::core::CacheConfig::default());
        let r = raw(&core, "b", 7, 100);
        core.ingest(&r, None).unwrap();
        core.events.clear();
        core.remove_sci("b");
        assert_eq!(reasons(&core), [("b".into(), "failed", "deregistered")]);
        core.set_sci("b", sci());
        assert_eq!(core.ingest(&r, None).unwrap_err().0, Rejection::Duplicate);
        let mut older = r.clone();
        older.sequence = 6;
        older.timestamp = r.timestamp - chrono::Duration::milliseconds(1);
        assert_eq!(core.ingest(&older, None).unwrap_err().0, Rejection::OutOfOrder);
        // A changed authentication method starts afresh.
        core.remove_sci("b");
        core.set_sci("b", SciConfig { unauthenticated: false, credential_ref: None, ..sci() });
        assert!(crate::engine::validate::Past::last_sequence(core.cache.get("b").unwrap()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_sci_collection_hybrid_mode_anomalous_push_asks_for_one_pull() {
        let (mut core, _rx) = core_with(&["a", "b"], &[], false);
        core.validation.action = AnomalyAction::AcceptWithWarning;
        core.set_pull_targets(["a".to_owned()].into_iter().collect());
        core.events.clear();
        let pulls = |core: &Core| {
            core.events
                .iter()
                .filter(|e| matches!(e, EngineEvent::PullNeeded { reason: PullReason::Anomaly, .. }))
                .count()
        };
        // GAS ×10 within 1 s: anomalous, accepted with a warning, a is pulled.
        let r = raw(&core, "a", 2, 1000);
        core.ingest(&r, None).unwrap();
        assert_eq!(pulls(&core), 1);
        assert!(core.cache.get("a").unwrap().flags.pull_pending);
        // b has no pull target: nothing asked, nothing flagged.
        let r = raw(&core, "b", 2, 1000);
        core.ingest(&r, None).unwrap();
        assert_eq!(pulls(&core), 1);
        assert!(!core.cache.get("b").unwrap().flags.pull_pending);
        // A pulled anomalous report never asks for another pull.
        let pulled = Sender { csci_id: Some("a".into()), transport: "pull", ..Sender::default() };
        let r = raw(&core, "a", 3, 10);
        core.ingest_from(&r, &pulled).unwrap();
        assert_eq!(pulls(&core), 1);
        // Quarantine also asks (and flags the entry quarantined).
        core.validation.action = AnomalyAction::Quarantine;
        let r = raw(&core, "a", 4, 1000);
        assert_eq!(core.ingest(&r, None).unwrap_err().0, Rejection::Quarantined);
        assert_eq!(pulls(&core), 2);
        assert!(core.cache.get("a").unwrap().flags.quarantined);
        core.clear_quarantine(Some("a"), false);
        assert!(!core.cache.get("a").unwrap().flags.quarantined);
        // STALE asks a pull for a only (b's pull-pending flag is not set without a target).
        core.events.clear();
        go_stale(&mut core).await;
        let stale: Vec<_> = core
            .events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::PullNeeded { csci_id, reason: PullReason::Stale } => Some(csci_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(stale, ["a"]);
        assert!(!core.cache.get("b").unwrap().flags.pull_pending);
    }
}

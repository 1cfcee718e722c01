//! The engine's state and its one path for a report: authorise against the registry,
//! validate, store in the cache (state machine, aggregates), count every rejection by
//! reason. Synchronous and owned by one task (`engine/mod.rs`), so the hot path takes no
//! lock and touches no libyang.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::aggregate::ComputingTimeFunction;
use super::cache::{CacheEvent, Flags, MetricCache, Slot};
use super::clock::Clock;
use super::model::SiteMetrics;
use super::model::{CsId, CsciId, Report, ReportRef, SciState};
use super::policy::{EmaState, Policy};
use super::report::RawReport;
use super::validate::{self, Anomaly, Judgement, Past, Rejection, ValidationConfig};

/// One registered SCI (the hard state of seed 004: CS-ID to CSCI-ID mappings).
#[derive(Clone, Debug, PartialEq)]
pub struct SciConfig {
    /// The CS-IDs it may report for.
    pub cs_ids: Vec<CsId>,
    /// The credential its messages must be proven with (HMAC or JWT); without one, a TLS
    /// client certificate mapped to its CSCI-ID is the proof it must bring.
    pub credential_ref: Option<String>,
    /// `authentication none` (lab use): its reports are accepted without any proof.
    pub unauthenticated: bool,
    pub expected_interval: Duration,
}

impl SciConfig {
    /// The YANG `authentication` value of the metric-cache entry: how the SCI proves
    /// itself.
    pub fn authentication(&self) -> &'static str {
        match (&self.credential_ref, self.unauthenticated) {
            (_, true) => "none",
            (Some(_), false) => "credential",
            (None, false) => "certificate",
        }
    }
}

/// Cache settings (YANG `cache`).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    pub max_entries: usize,
    pub ttl_multiplier: u32,
    /// Overrides multiplier × expected interval when set.
    pub ttl: Option<Duration>,
    pub grace_period: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { max_entries: 100_000, ttl_multiplier: 2, ttl: None, grace_period: Duration::from_millis(5000) }
    }
}

impl CacheConfig {
    pub fn ttl_for(&self, sci: &SciConfig) -> Duration {
        self.ttl_for_interval(sci.expected_interval)
    }

    /// The TTL of an SCI reporting every `expected_interval`.
    pub fn ttl_for_interval(&self, expected_interval: Duration) -> Duration {
        self.ttl.unwrap_or(expected_interval * self.ttl_multiplier.max(1))
    }
}

/// Per-reason rejection counters (YANG statistics/rejection).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub received: u64,
    pub accepted: u64,
    /// Accepted reports that started their SCI's sequence again (newer timestamp).
    pub sequence_restarts: u64,
    pub rejected: [u64; Rejection::ALL.len()],
    pub last_rejection: [Option<DateTime<Utc>>; Rejection::ALL.len()],
    pub discontinuity: Option<DateTime<Utc>>,
    /// Verdicts by transport: one row per `rate_limit::TRANSPORTS` entry and a last one for
    /// in-process callers; column 0 counts accepted reports, 1 + `Rejection::index` each
    /// reason (the `/metrics` exposition).
    pub by_transport: [[u64; Rejection::ALL.len() + 1]; super::rate_limit::TRANSPORTS.len() + 1],
}

impl Stats {
    /// The transport name of a `by_transport` row.
    pub fn transport_of_row(row: usize) -> &'static str {
        super::rate_limit::TRANSPORTS.get(row).copied().unwrap_or("local")
    }

    /// Counts `n` verdicts (`None`: accepted) of reports that came over `transport`.
    pub fn tally(&mut self, transport: &str, verdict: Option<Rejection>, n: u64) {
        let row = super::rate_limit::transport_index(transport).unwrap_or(super::rate_limit::TRANSPORTS.len());
        self.by_transport[row][verdict.map_or(0, |r| 1 + r.index())] += n;
    }
}

/// A report held for review (anomaly action quarantine).
#[derive(Clone, Debug)]
pub struct Quarantined {
    pub id: u64,
    pub report: Report,
    pub anomaly: Anomaly,
    pub received_at: DateTime<Utc>,
}

/// What the engine tells the rest of the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// The reported health of an SCI changed (a critical update trigger).
    SciHealthChange {
        csci_id: CsciId,
        cs_id: CsId,
        from: super::model::Health,
        to: super::model::Health,
    },
    SciStateChange {
        csci_id: CsciId,
        from: SciState,
        to: SciState,
        reason: &'static str,
    },
    MetricAnomaly {
        csci_id: CsciId,
        anomaly: Anomaly,
        action: &'static str,
    },
    /// The site metrics of a CS-ID may have changed.
    SiteChanged {
        cs_id: CsId,
    },
    PullNeeded {
        csci_id: CsciId,
        reason: super::collect::pull::PullReason,
    },
    /// A message or report failed authentication or authorization (auth-failure).
    AuthFailure {
        source: Option<std::net::IpAddr>,
        claimed: Option<CsciId>,
        transport: &'static str,
        reason: Rejection,
        detail: String,
        /// 0 for a single failure; otherwise this is the summary of that many failures from
        /// the source within the aggregation window, and the other fields are the last one.
        aggregated: u64,
    },
    /// An accepted report changed an SCI's cache entry; raised only while the change tap
    /// has listeners (`Core::tap`), for YANG-Push on-change.
    SciUpdated {
        csci_id: CsciId,
    },
    Withdrawn {
        csci_id: CsciId,
        cs_id: Option<CsId>,
    },
}

/// Where a message came from and who sent it, as far as its transport knows.
#[derive(Clone, Debug, Default)]
pub struct Sender {
    /// The CSCI-ID the message is from: proven when `proof` is set, otherwise attributed by
    /// the transport (MQTT topic level, pull target). A report for another CSCI-ID is
    /// refused.
    pub csci_id: Option<CsciId>,
    /// How `csci_id` was proven, if it was.
    pub proof: Option<Proof>,
    /// `http`, `grpc`, `mqtt`, `pull` or `sse` (YANG collection-transport); empty in-process.
    pub transport: &'static str,
    pub address: Option<std::net::IpAddr>,
    /// With a `Proof::Credential`: the credential that verified it (it must be the SCI's
    /// credential-ref) and, for a discovery trust domain's token, what it grants an SCI
    /// that is not registered (`discovery.rs`).
    pub grant: Option<super::discovery::Grant>,
}

/// How a message's sender was proven (seed 004, SCI Authentication).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// An HMAC signature or a JWT verified with a credential, named by `Sender::grant`:
    /// it proves the SCI only when that is the SCI's credential-ref.
    Credential,
    /// A TLS client certificate, verified against the trust anchors and not revoked,
    /// mapped to the CSCI-ID by cert-to-name.
    Certificate,
}

/// The history of an SCI the cache has no entry for.
static NO_HISTORY: validate::History = validate::History::EMPTY;

/// How many quarantined reports are kept; the oldest go first (counted as rejected).
pub const QUARANTINE_CAPACITY: usize = 10_000;

pub struct Core {
    pub clock: Clock,
    /// The recording of what goes into the engine (`crate::record`), when one is made.
    pub recorder: Option<Box<crate::record::Recorder>>,
    pub validation: ValidationConfig,
    pub cache_config: CacheConfig,
    pub cache: MetricCache,
    pub stats: Stats,
    pub quarantine: VecDeque<Quarantined>,
    next_quarantine_id: u64,
    pub events: Vec<EngineEvent>,
    pub policy: Policy,
    /// EMA state per CS-ID (advanced once per site change, never by a read).
    ema: HashMap<CsId, EmaState>,
    /// What is reported per CS-ID: site metrics after site-scope rules and transforms, and
    /// whether a rule suppresses updates.
    pub reported: HashMap<CsId, (SiteMetrics, bool)>,
    /// Where STALE SCIs, and SCIs whose report was anomalous, are sent to be pulled at
    /// once (seed 004 hybrid mode).
    pub pull_requests: Option<tokio::sync::mpsc::UnboundedSender<(CsciId, super::collect::pull::PullReason)>>,
    /// The SCIs with a pull target (`collection/pull/target`): only they are pulled.
    pub pull_targets: std::collections::HashSet<CsciId>,
    /// Active probes and the external health monitor (`probe.rs`).
    pub failure: super::probe::Detection,
    /// The validator's memory of SCIs that left the cache (`retained.rs`).
    pub retained: super::retained::Retained,
    /// validation/smoothing, when enabled.
    pub smoother: Option<super::smooth::Smoother>,
    /// Someone listens to the typed change stream (`engine/changes.rs`): accepted reports
    /// raise `SciUpdated`. Set by the engine loop before each job.
    pub tap: bool,
    /// Auth-failure flood control: what is notified and logged at once, what is summed.
    pub auth_flood: super::auth_failures::Aggregator,
    /// The per-SCI ingress rate limit (`rate_limit.rs`).
    pub rate: super::rate_limit::SciLimiter,
    /// A policy was installed since the engine loop last looked (seed 004, Policy Change
    /// Trigger): the loop sends the update controller every service's re-evaluated metrics.
    pub policy_changed: bool,
    /// Some C-PS takes per-SCI rows: accepted reports raise `SciUpdated`, as for the tap.
    /// Set by the engine loop before each job.
    pub sci_rows: bool,
    /// Dynamic SCI discovery (`discovery.rs`): settings and the discovered SCIs.
    pub discovery: super::discovery::Discovery,
    /// After an unclean stop: reports timestamped before this (the start plus
    /// `restart::FLOOR_MARGIN`) are refused as `replay` for one timestamp window (`restart.rs`).
    pub replay_floor: Option<DateTime<Utc>>,
    /// The agent is stopping and has saved the validator's memory (`restart.rs`): every
    /// report is refused, so that none is accepted that the next run does not know of.
    pub closed: bool,
    /// SCIs learned from subordinate C-SMAs (`mirror.rs`), and which one each is from.
    pub mirrors: super::mirror::Mirrors,
}

impl Core {
    pub fn new(clock: Clock) -> Core {
        let cache_config = CacheConfig::default();
        Core {
            clock,
            recorder: None,
            validation: ValidationConfig::default(),
            cache: MetricCache::new(cache_config.max_entries),
            cache_config,
            stats: Stats { discontinuity: Some(clock.wall()), ..Default::default() },
            quarantine: VecDeque::new(),
            next_quarantine_id: 1,
            events: Vec::new(),
            policy: Policy::default(),
            ema: HashMap::new(),
            reported: HashMap::new(),
            pull_requests: None,
            pull_targets: Default::default(),
            failure: Default::default(),
            retained: Default::default(),
            smoother: None,
            tap: false,
            auth_flood: super::auth_failures::Aggregator::new(Duration::from_secs(10), 1024),
            rate: Default::default(),
            policy_changed: false,
            sci_rows: false,
            discovery: Default::default(),
            replay_floor: None,
            closed: false,
            mirrors: Default::default(),
        }
    }

    /// Installs a compiled policy: SCI-scope rules are re-applied to every cached SCI and
    /// every site is re-evaluated (seed 004, policy change trigger).
    pub fn set_policy(&mut self, policy: Policy) {
        if policy.resets_ema(&self.policy) {
            self.ema.clear();
        }
        self.policy = policy;
        let wall = self.clock.wall();
        let policy = &self.policy;
        let ctx = policy.context(wall);
        let ev = self.cache.reapply(|m| policy.apply_sci(m, &ctx).0);
        self.absorb(ev);
        let services: Vec<CsId> = self.cache.services().map(str::to_owned).collect();
        self.events.extend(services.into_iter().map(|cs_id| EngineEvent::SiteChanged { cs_id }));
        self.policy_changed = true;
    }

    /// Brings the reported site metrics up to date for every site that changed; called
    /// once after each batch of work, so a site changed by many reports is evaluated once.
    pub fn settle(&mut self) {
        super::discovery::observe(self);
        let mut seen = std::collections::HashSet::new();
        let changed: Vec<CsId> = self
            .events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::SiteChanged { cs_id } if seen.insert(cs_id.clone()) => Some(cs_id.clone()),
                _ => None,
            })
            .collect();
        if changed.is_empty() {
            return;
        }
        let ctx = self.policy.context(self.clock.wall());
        for cs in changed {
            match self.cache.site(&cs) {
                Some(site) => {
                    let ema = self.ema.entry(cs.clone()).or_default();
                    let out = self.policy.apply_site(&site, ema, &ctx);
                    if !out.fired.is_empty() && out.metrics != site {
                        // Seed 004: policy decisions that change what is advertised are
                        // audited (one record per service and rule set per window).
                        let rules: Vec<&str> = self.policy.fired_names(&out.fired).collect();
                        crate::mgmt::audit::event(crate::mgmt::audit::Category::PolicyApplied)
                            .outcome("changed")
                            .field("cs-id", cs.as_str())
                            .field("rules", rules.clone())
                            .field("gas", format!("{} -> {}", site.gas, out.metrics.gas))
                            .field(
                                "computing-time",
                                format!("{} -> {}", site.computing_time_ms, out.metrics.computing_time_ms),
                            )
                            .emit_aggregated(format!("{}|{}", cs.as_str(), rules.join(",")));
                    }
                    self.reported.insert(cs, (out.metrics, out.suppress_updates));
                }
                None => {
                    self.reported.remove(&cs);
                    self.ema.remove(&cs);
                }
            }
        }
    }

    /// Records `ev` when a recording is being made.
    pub fn record(&mut self, ev: impl FnOnce() -> crate::record::Event) {
        if let Some(r) = self.recorder.as_mut() {
            let now = self.clock.now();
            r.record(now, self.clock.wall_at(now), &ev());
        }
    }

    /// Counts a message refused before it reached the report path (undecodable, wrong
    /// content type, too big): it was received and rejected.
    pub fn count_rejection(&mut self, reason: Rejection, transport: &'static str, source: &str) {
        self.record(|| crate::record::Event::Refused {
            transport: transport.to_owned(),
            reason: reason.identity().to_owned(),
            source: source.to_owned(),
        });
        self.stats.received += 1;
        self.stats.tally(transport, Some(reason), 1);
        self.reject(reason, source, "refused by the transport");
    }

    pub(super) fn reject(&mut self, reason: Rejection, csci_id: &str, detail: &str) -> Rejection {
        let i = reason.index();
        self.stats.rejected[i] += 1;
        self.stats.last_rejection[i] = Some(self.clock.wall());
        tracing::info!(csci_id = ?csci_id, reason = reason.identity(), "SCI report rejected: {detail:?}");
        reason
    }

    /// A message refused by its transport's authentication (seed 004: every failure is
    /// counted, logged and notified). Counts the message's reports as rejected.
    pub fn auth_failure(&mut self, sender: &Sender, claimed: Option<CsciId>, detail: String, reports: usize) {
        self.record(|| crate::record::Event::AuthFailure {
            transport: sender.transport.to_owned(),
            address: sender.address,
            claimed: claimed.clone(),
            detail: detail.clone(),
            reports,
        });
        for _ in 0..reports.max(1) {
            self.stats.received += 1;
            self.count_only(Rejection::Unauthenticated);
        }
        self.stats.tally(sender.transport, Some(Rejection::Unauthenticated), reports.max(1) as u64);
        self.notify_auth_failure(sender, claimed, Rejection::Unauthenticated, detail);
    }

    /// A connection refused for its TLS client certificate (revoked, expired, unknown CA,
    /// no CSCI-ID for it): logged, notified and audited like a refused report (aggregated per
    /// source), without counting a report.
    pub fn connection_auth_failure(&mut self, sender: &Sender, claimed: Option<CsciId>, detail: String) {
        self.notify_auth_failure(sender, claimed, Rejection::Unauthenticated, detail);
    }

    /// Counts a rejection without logging it (the caller logs, or aggregates).
    fn count_only(&mut self, reason: Rejection) {
        let i = reason.index();
        self.stats.rejected[i] += 1;
        self.stats.last_rejection[i] = Some(self.clock.wall());
    }

    /// Logs and notifies an auth failure, or sums it into its source's next summary when
    /// the source already failed within the window (`auth_failures.rs`).
    fn notify_auth_failure(&mut self, sender: &Sender, claimed: Option<CsciId>, reason: Rejection, detail: String) {
        use super::auth_failures::{Failure, Source, Verdict};
        // The audit trail records every failure, aggregated per source by its own windows.
        let transport = match sender.transport {
            "http" => "sci-http",
            "grpc" => "sci-grpc",
            t => t,
        };
        let source_text = sender.address.map(|a| a.to_string()).unwrap_or_else(|| "in-process".into());
        let mut rec = crate::mgmt::audit::event(crate::mgmt::audit::Category::SciAuthFailure)
            .outcome("failure")
            .source(&source_text)
            .transport(transport)
            .field("reason", reason.identity())
            .field("detail", detail.as_str());
        if let Some(c) = &claimed {
            rec = rec.field("claimed-csci-id", c.as_str());
        }
        rec.emit_aggregated(format!("{transport}/{source_text}"));
        let source = Source::new(sender.address, sender.transport);
        let failure = Failure { address: sender.address, claimed, reason, detail };
        if self.auth_flood.record(source, failure.clone(), self.clock.now()) == Verdict::Aggregated {
            return;
        }
        tracing::warn!(
            transport = sender.transport,
            source = ?sender.address,
            claimed = ?failure.claimed.as_deref().unwrap_or(""),
            reason = reason.identity(),
            "SCI authentication failed: {:?}",
            failure.detail
        );
        self.events.push(EngineEvent::AuthFailure {
            source: failure.address,
            claimed: failure.claimed,
            transport: sender.transport,
            reason,
            detail: failure.detail,
            aggregated: 0,
        });
    }

    /// Emits the auth-failure summaries whose window ended.
    fn auth_summaries(&mut self) {
        for (src, count, last) in self.auth_flood.due(self.clock.now()) {
            tracing::warn!(
                transport = src.transport,
                source = ?last.address,
                overflow = src.overflow,
                count,
                "SCI authentication failures aggregated: {count} more; the last: {:?}",
                last.detail
            );
            self.events.push(EngineEvent::AuthFailure {
                source: last.address,
                claimed: last.claimed,
                transport: src.transport,
                reason: last.reason,
                detail: last.detail,
                aggregated: count,
            });
        }
    }

    /// When the next auth-failure summary is due.
    pub fn next_auth_summary(&self) -> Option<Instant> {
        self.auth_flood.next_deadline()
    }

    /// A refusal for who sent a report (unauthenticated, unauthorized CS-ID): counted,
    /// logged and notified as an auth-failure (aggregated per source).
    pub(super) fn refuse_sender(
        &mut self,
        reason: Rejection,
        raw: &RawReport,
        sender: &Sender,
        detail: String,
    ) -> Rejection {
        self.count_only(reason);
        self.notify_auth_failure(sender, Some(raw.csci_id.clone()), reason, detail);
        reason
    }

    /// The one path of a report, from an in-process caller: `authenticated` is the CSCI-ID
    /// the message is attributed to, if any; a report for another CSCI-ID is refused.
    pub fn ingest(&mut self, raw: &RawReport, authenticated: Option<&str>) -> Result<(), (Rejection, String)> {
        let sender = Sender { csci_id: authenticated.map(str::to_owned), ..Sender::default() };
        self.ingest_from(raw, &sender)
    }

    /// The one path of a report. Every SCI must have proven the message (secure by
    /// default): with its credential when it has a credential-ref, with a client
    /// certificate mapped to it otherwise; only an SCI configured `authentication none` is
    /// taken at its word. The sender may only report for itself and for the CS-IDs it is
    /// registered for (seed 004, SCI Authentication).
    pub fn ingest_from(&mut self, raw: &RawReport, sender: &Sender) -> Result<(), (Rejection, String)> {
        self.record(|| crate::record::Event::reports(std::slice::from_ref(raw), sender));
        let now = self.clock.now();
        let at = (now, self.clock.wall_at(now));
        let verdict = self.ingest_at(raw, sender, at);
        self.stats.tally(sender.transport, verdict.as_ref().err().map(|e| e.0), 1);
        verdict
    }

    /// The reports of one message, in order, with one verdict each: [`Core::ingest_from`]
    /// for each, at one instant (the message's arrival; one clock read per message). While
    /// one report is judged, the slot of a report a few places on is already being loaded
    /// ([`MetricCache::prefetch`]): at 100 000 SCIs a slot is a memory access, and a batch
    /// lets those overlap instead of waiting for each in turn.
    pub fn ingest_batch(&mut self, raws: &[RawReport], sender: &Sender) -> Vec<Result<(), (Rejection, String)>> {
        const AHEAD: usize = 4;
        self.record(|| crate::record::Event::reports(raws, sender));
        let now = self.clock.now();
        let at = (now, self.clock.wall_at(now));
        for r in raws.iter().take(AHEAD) {
            self.cache.prefetch(&r.csci_id);
        }
        let mut verdicts = Vec::with_capacity(raws.len());
        for (i, raw) in raws.iter().enumerate() {
            if let Some(next) = raws.get(i + AHEAD) {
                self.cache.prefetch(&next.csci_id);
            }
            let verdict = self.ingest_at(raw, sender, at);
            self.stats.tally(sender.transport, verdict.as_ref().err().map(|e| e.0), 1);
            verdicts.push(verdict);
        }
        verdicts
    }

    fn ingest_at(
        &mut self,
        raw: &RawReport,
        sender: &Sender,
        (now, wall): (Instant, DateTime<Utc>),
    ) -> Result<(), (Rejection, String)> {
        self.stats.received += 1;
        // Identifiers first: nothing below may store, log or notify one that is not of its
        // YANG type.
        if let Err(d) = raw.check_ids() {
            let shown = super::report::display_id(super::report::IdKind::CsciId, &raw.csci_id);
            return Err((self.reject(Rejection::Malformed, &shown, &d), d));
        }
        if self.closed {
            // Saved for the next run already (`restart.rs`): accepting now would be lost.
            self.count_only(Rejection::RateLimited);
            return Err((
                Rejection::RateLimited,
                "the agent is stopping: send the report again to its next run".into(),
            ));
        }
        if !self.mirrors.is_empty() {
            if let Some(from) = self.mirrors.owner(&raw.csci_id) {
                // One SCI, one home: its subordinate reports it (`mirror.rs`).
                let d = format!("{} is learned from subordinate {from}: it reports there", raw.csci_id);
                return Err((self.refuse_sender(Rejection::Unauthenticated, raw, sender, d.clone()), d));
            }
        }
        if let Some(a) = sender.csci_id.as_deref().filter(|a| *a != raw.csci_id) {
            let d = format!("message is from {a} but reports for {}", raw.csci_id);
            return Err((self.refuse_sender(Rejection::Unauthenticated, raw, sender, d.clone()), d));
        }
        // One lookup of the SCI's slot (registration and cache entry); it serves the rest
        // of the path.
        let mut slot = self.cache.lookup(&raw.csci_id);
        if slot.and_then(|s| self.cache.registration_at(s)).is_none() {
            // Refused as unknown unless discovery registers it (seed 004, SCI state machine).
            super::discovery::admit(self, raw, sender)?;
            slot = self.cache.lookup(&raw.csci_id);
        }
        let Some((slot, sci)) = slot.and_then(|s| Some((s, self.cache.registration_at(s)?))) else {
            let d = format!("{} is not in the SCI registry", raw.csci_id);
            return Err((self.reject(Rejection::UnknownSci, &raw.csci_id, &d), d));
        };
        // A credential proof counts only when the SCI's own credential verified it: a token
        // of another trust domain whose pattern also admits the subject is not this SCI's.
        let verified_with = sender.grant.as_ref().map(|g| g.credential.as_str());
        let missing = match (sci.credential_ref(), sender.proof) {
            _ if sci.unauthenticated() => None,
            (Some(c), Some(Proof::Credential)) if verified_with == Some(c) => None,
            (None, Some(Proof::Certificate)) => None,
            (Some(c), Some(Proof::Credential)) => Some(format!(
                "{} must prove its messages with credential {c}; this one was verified with {}",
                raw.csci_id,
                verified_with.map_or_else(|| "an unnamed credential".to_owned(), |v| format!("credential {v}"))
            )),
            (Some(c), _) => Some(format!(
                "{} must prove its messages with credential {c}; this one carried no such proof",
                raw.csci_id
            )),
            (None, _) => Some(format!(
                "{} has no credential-ref: it must report over TLS with a client certificate mapped to it \
                 (or be configured 'authentication none')",
                raw.csci_id
            )),
        };
        if let Some(d) = missing {
            return Err((self.refuse_sender(Rejection::Unauthenticated, raw, sender, d.clone()), d));
        }
        if !sci.may_report_for(&raw.cs_id) {
            let d = format!("{} may not report for CS-ID {}", raw.csci_id, raw.cs_id);
            return Err((self.refuse_sender(Rejection::UnauthorizedCsId, raw, sender, d.clone()), d));
        }
        // Only now, with the sender authenticated and authorised: a claim alone cannot
        // spend a legitimate SCI's tokens. Logged once per episode by the limiter.
        let expected_interval = sci.expected_interval();
        if let Err(d) = self.rate.admit(&raw.csci_id, expected_interval, sender.transport) {
            self.count_only(Rejection::RateLimited);
            return Err((Rejection::RateLimited, d));
        }
        let (ttl, grace) = (self.cache_config.ttl_for_interval(expected_interval), self.cache_config.grace_period);
        if self.cache.at(slot).is_none() {
            // Registered, not (or no longer) in the cache: the slot gets its entry again.
            let ev = self.cache.register(&raw.csci_id, ttl, grace, now, wall);
            self.absorb(ev);
            self.restore_history(&raw.csci_id);
        }
        if let Some(floor) = self.replay_floor {
            if super::retained::covered(Some(floor), self.validation.timestamp_window, wall) {
                // The timestamp window refuses such reports on its own now.
                self.replay_floor = None;
            } else if raw.timestamp < floor {
                let d = format!(
                    "timestamp {} is before this run started ({floor}) after an unclean stop: \
                     the last run may have accepted it",
                    raw.timestamp
                );
                return Err((self.reject(Rejection::Replay, &raw.csci_id, &d), d));
            }
        }
        let slot = Some(slot);
        // The validator reads the entry's own fields: nothing is copied.
        let judgement = match slot.and_then(|s| self.cache.at(s)) {
            Some(e) => validate::judge(raw, e, &self.validation, now, wall),
            None => validate::judge(raw, &NO_HISTORY, &self.validation, now, wall),
        };
        // Seed 004 hybrid mode: an anomalous pushed report asks the SCI itself, at once.
        if matches!(&judgement, Judgement::Reject { anomaly: Some(_), .. } | Judgement::Quarantine { .. }) {
            self.pull_on_anomaly(&raw.csci_id, sender);
        }
        match judgement {
            Judgement::Reject { reason, detail, anomaly } => {
                if let Some(a) = anomaly {
                    audit_anomaly(&raw.csci_id, &a, "reject");
                    self.events.push(EngineEvent::MetricAnomaly {
                        csci_id: raw.csci_id.clone(),
                        anomaly: a,
                        action: "reject",
                    });
                }
                Err((self.reject(reason, &raw.csci_id, &detail), detail))
            }
            Judgement::Quarantine { metrics, anomaly } => {
                audit_anomaly(&raw.csci_id, &anomaly, "quarantine");
                self.events.push(EngineEvent::MetricAnomaly {
                    csci_id: raw.csci_id.clone(),
                    anomaly,
                    action: "quarantine",
                });
                if self.quarantine.len() == QUARANTINE_CAPACITY {
                    // The oldest goes; its SCI's flag with it, unless it has another held.
                    if let Some(old) = self.quarantine.pop_front() {
                        let id = old.report.csci_id;
                        if id != raw.csci_id && !self.quarantine.iter().any(|q| q.report.csci_id == id) {
                            if let Some(e) = self.cache.get_mut(&id) {
                                e.flags.quarantined = false;
                            }
                        }
                    }
                }
                let id = self.next_quarantine_id;
                self.next_quarantine_id += 1;
                let report = Report {
                    csci_id: raw.csci_id.clone(),
                    cs_id: raw.cs_id.clone(),
                    sequence: raw.sequence,
                    timestamp: raw.timestamp,
                    metrics,
                };
                self.quarantine.push_back(Quarantined { id, report, anomaly, received_at: wall });
                if let Some(e) = slot.and_then(|s| self.cache.at_mut(s)) {
                    e.flags.quarantined = true;
                }
                let d = format!("{anomaly:?}: held for review (quarantine id {id})");
                Err((self.reject(Rejection::Quarantined, &raw.csci_id, &d), d))
            }
            Judgement::Accept { metrics, warning } => {
                if let Some(a) = warning {
                    audit_anomaly(&raw.csci_id, &a, "accept-with-warning");
                    self.events.push(EngineEvent::MetricAnomaly {
                        csci_id: raw.csci_id.clone(),
                        anomaly: a,
                        action: "accept-with-warning",
                    });
                }
                let report = ReportRef {
                    csci_id: &raw.csci_id,
                    cs_id: &raw.cs_id,
                    sequence: raw.sequence,
                    timestamp: raw.timestamp,
                    metrics,
                };
                self.store(slot, report, warning.is_some(), now, wall);
                if warning.is_some() {
                    self.pull_on_anomaly(&raw.csci_id, sender);
                }
                Ok(())
            }
        }
    }

    /// Stores an accepted report in the entry in `slot` (the report's SCI's).
    pub(super) fn store(
        &mut self,
        slot: Option<Slot>,
        report: ReportRef<'_>,
        warning: bool,
        now: Instant,
        wall: DateTime<Utc>,
    ) {
        let mut previous = None;
        if let Some(e) = slot.and_then(|s| self.cache.at_mut(s)) {
            if e.last_sequence().is_some_and(|s| report.sequence <= s) {
                self.stats.sequence_restarts += 1;
                tracing::info!(
                    csci_id = %report.csci_id,
                    "SCI restarted its sequence at {} (its timestamp is newer than the last report's)",
                    report.sequence
                );
            }
            e.record_transition(report.metrics.health, now, self.validation.health_flap_window);
            previous = e.reported.map(|m| m.health);
        }
        if let Some(from) = previous.filter(|h| *h != report.metrics.health) {
            self.events.push(EngineEvent::SciHealthChange {
                csci_id: report.csci_id.to_owned(),
                cs_id: report.cs_id.to_owned(),
                from,
                to: report.metrics.health,
            });
        }
        let flags = Flags { anomaly_warning: warning, smoothed: self.smoother.is_some(), ..Flags::default() };
        let metrics = match &mut self.smoother {
            Some(s) => s.feed(report.csci_id, report.metrics),
            None => report.metrics,
        };
        let effective = if self.policy.has_sci_rules() {
            self.policy.apply_sci(&metrics, &self.policy.context(wall)).0
        } else {
            metrics
        };
        if let Some(slot) = slot {
            let mut ev = Vec::new();
            let site = self.cache.accept_at(slot, report, effective, flags, now, wall, &mut ev);
            self.absorb(ev);
            if site {
                self.site_changed(report.cs_id);
            }
        }
        if self.tap || self.sci_rows {
            self.events.push(EngineEvent::SciUpdated { csci_id: report.csci_id.to_owned() });
        }
        self.stats.accepted += 1;
    }

    /// Raises `SiteChanged` for a CS-ID unless the event list holds it already (a batch of
    /// reports for one service raises it once; every consumer reads the list as a set).
    fn site_changed(&mut self, cs_id: &str) {
        if self.site_marked(cs_id) {
            return;
        }
        self.events.push(EngineEvent::SiteChanged { cs_id: cs_id.to_owned() });
    }

    /// Whether the event list holds `SiteChanged` for the CS-ID; if not, the mark is moved
    /// to where the caller pushes it next.
    fn site_marked(&mut self, cs_id: &str) -> bool {
        let next = self.events.len();
        let Some(mark) = self.cache.site_mark(cs_id) else { return false };
        if matches!(self.events.get(*mark as usize), Some(EngineEvent::SiteChanged { cs_id: c }) if c == cs_id) {
            return true;
        }
        *mark = u32::try_from(next).unwrap_or(u32::MAX);
        false
    }

    /// Releases quarantined reports (clear-quarantine RPC): all, or one SCI's. With
    /// `accept`, a released report enters the cache if it is still newer than what the
    /// cache holds. Returns how many were released.
    pub fn clear_quarantine(&mut self, csci_id: Option<&str>, accept: bool) -> u32 {
        self.record(|| crate::record::Event::Quarantine { csci_id: csci_id.map(str::to_owned), accept });
        let (released, kept): (Vec<_>, Vec<_>) =
            self.quarantine.drain(..).partition(|q| csci_id.is_none_or(|c| q.report.csci_id == c));
        self.quarantine = kept.into();
        for q in &released {
            if let Some(e) = self.cache.get_mut(&q.report.csci_id) {
                e.flags.quarantined = false;
            }
        }
        for q in &released {
            crate::mgmt::audit::event(crate::mgmt::audit::Category::Quarantine)
                .outcome(if accept { "released" } else { "discarded" })
                .field("quarantine-id", q.id)
                .field("csci-id", q.report.csci_id.as_str())
                .field("sequence-number", q.report.sequence)
                .emit();
        }
        if accept {
            let (now, wall) = (self.clock.now(), self.clock.wall());
            for q in &released {
                let newer = self
                    .cache
                    .get(&q.report.csci_id)
                    .is_some_and(|e| e.sequence().is_none_or(|s| q.report.sequence > s));
                if newer {
                    let slot = self.cache.lookup(&q.report.csci_id);
                    self.store(slot, q.report.view(), true, now, wall);
                }
            }
        }
        released.len() as u32
    }

    /// Registers or updates an SCI.
    pub fn set_sci(&mut self, csci_id: &str, sci: SciConfig) {
        // A configured (or discovered) SCI is this agent's own: a subordinate's copy of it
        // becomes a duplicate (`mirror.rs`), and what it contributed is withdrawn (the entry
        // starts again from the SCI's own reports, under the local TTL).
        if self.mirrors.owner(csci_id).is_some() {
            self.mirrors.remove(csci_id);
            let cs_id = self.cache.get(csci_id).and_then(|e| e.cs_id()).map(str::to_owned);
            let ev = self.cache.remove(csci_id);
            self.absorb(ev);
            self.events.push(EngineEvent::Withdrawn { csci_id: csci_id.to_owned(), cs_id });
        }
        let (ttl, grace) = (self.cache_config.ttl_for(&sci), self.cache_config.grace_period);
        let (now, wall) = (self.clock.now(), self.clock.wall());
        // A CS-ID the SCI may no longer report for stops counting at once.
        let moved = self.cache.get(csci_id).and_then(|e| e.cs_id()).filter(|cs| !sci.cs_ids.iter().any(|c| c == cs));
        let moved = moved.map(str::to_owned);
        self.rate.forget(csci_id);
        // A new way of proving itself starts a new history: whatever sequence number or
        // timestamp was accepted under the old one (perhaps from an unauthenticated
        // sender) cannot hold the SCI back under the new one.
        let old = self.cache.set_registration(csci_id, &sci);
        let auth_changed = old.is_some_and(|old| {
            old.credential_ref() != sci.credential_ref.as_deref() || old.unauthenticated() != sci.unauthenticated
        });
        if auth_changed {
            if let Some(e) = self.cache.get_mut(csci_id) {
                e.forget_history();
            }
        }
        if let Some(cs_id) = moved {
            self.retire_history(csci_id);
            let ev = self.cache.remove(csci_id);
            self.absorb(ev);
            // Withdrawn from the CS-ID it may no longer report for (seed 004, SCI Discovery
            // Trigger: an existing SCI withdrawn is a full update).
            self.events.push(EngineEvent::Withdrawn { csci_id: csci_id.to_owned(), cs_id: Some(cs_id) });
        }
        let fresh = self.cache.get(csci_id).is_none();
        let ev = self.cache.register(csci_id, ttl, grace, now, wall);
        self.absorb(ev);
        if fresh {
            self.restore_history(csci_id);
        }
    }

    /// Deregisters an SCI: its metrics are withdrawn (notified as a state change with
    /// reason `deregistered`, new state `failed`); the validator keeps its history.
    pub fn remove_sci(&mut self, csci_id: &str) {
        if self.remove_sci_quietly(csci_id) {
            tracing::info!(csci_id, "SCI deregistered: its metrics are withdrawn");
        }
    }

    /// [`Core::remove_sci`] without its log line (a commit removing thousands of SCIs logs
    /// one summary); true when the SCI had a cache entry, whose metrics are withdrawn.
    pub fn remove_sci_quietly(&mut self, csci_id: &str) -> bool {
        self.remove_sci_with(csci_id, true)
    }

    /// [`Core::remove_sci_quietly`]; `keep_history` false for an SCI whose history is not
    /// this agent's to keep (a mirrored one: its subordinate validates its reports), so
    /// that a subordinate adding and dropping entries cannot push the history of this
    /// agent's own SCIs out of the retained table.
    pub(super) fn remove_sci_with(&mut self, csci_id: &str, keep_history: bool) -> bool {
        if keep_history {
            self.retire_history(csci_id);
        }
        self.cache.remove_registration(csci_id);
        self.rate.forget(csci_id);
        if let Some(s) = &mut self.smoother {
            s.forget(csci_id);
        }
        let entry = self.cache.get(csci_id).map(|e| (e.cs_id().map(str::to_owned), e.state));
        let ev = self.cache.remove(csci_id);
        self.absorb(ev);
        let withdrawn = entry.is_some();
        if let Some((cs_id, from)) = entry {
            self.events.push(EngineEvent::SciStateChange {
                csci_id: csci_id.to_owned(),
                from,
                to: SciState::Failed,
                reason: super::sci_state::Reason::Deregistered.yang(),
            });
            self.events.push(EngineEvent::Withdrawn { csci_id: csci_id.to_owned(), cs_id });
        }
        withdrawn
    }

    /// How a registered SCI proves itself (kept with its history).
    pub(super) fn auth_method(&self, csci_id: &str) -> Option<super::retained::AuthMethod> {
        self.cache.registration(csci_id).map(|s| super::retained::AuthMethod {
            credential_ref: s.credential_ref().map(str::to_owned),
            unauthenticated: s.unauthenticated(),
        })
    }

    /// An SCI's registration as configured.
    pub fn sci(&self, csci_id: &str) -> Option<SciConfig> {
        self.cache.registration(csci_id).map(super::cache::Registration::config)
    }

    /// Whether an SCI is registered (configured or discovered).
    pub fn is_registered(&self, csci_id: &str) -> bool {
        self.cache.registration(csci_id).is_some()
    }

    /// Keeps what the validator knows of an SCI whose entry is about to leave the cache.
    fn retire_history(&mut self, csci_id: &str) {
        let Some(e) = self.cache.get(csci_id) else { return };
        let (seq, ts) = (e.last_sequence(), e.last_timestamp());
        self.keep_history(csci_id, seq, ts);
    }

    fn keep_history(&mut self, csci_id: &str, seq: Option<u64>, ts: Option<DateTime<Utc>>) {
        let auth = self.auth_method(csci_id);
        let (window, wall) = (self.validation.timestamp_window, self.clock.wall());
        self.retained.keep(csci_id, seq, ts, auth, window, wall);
    }

    /// Gives a new entry the history its SCI left behind, unless the SCI now proves itself
    /// another way (a new authentication method starts a new history, as in `set_sci`).
    pub(super) fn restore_history(&mut self, csci_id: &str) {
        let (window, wall) = (self.validation.timestamp_window, self.clock.wall());
        let Some(r) = self.retained.take(csci_id, window, wall) else { return };
        let now = self.auth_method(csci_id);
        if r.auth != now {
            return;
        }
        if let Some(e) = self.cache.get_mut(csci_id) {
            e.restore_history(r.sequence, r.timestamp);
        }
    }

    /// Sets the SCIs that have a pull target.
    pub fn set_pull_targets(&mut self, targets: std::collections::HashSet<CsciId>) {
        self.pull_targets = targets;
    }

    /// A pushed report of this SCI was anomalous: pull it now (seed 004 hybrid mode, "the
    /// C-SMA pulls on-demand during recovery or anomaly detection"). A pulled (or SSE)
    /// report never asks for another pull, and the pull task runs at most one pull per SCI at a time.
    fn pull_on_anomaly(&mut self, csci_id: &str, sender: &Sender) {
        if matches!(sender.transport, "pull" | "sse") || !self.pull_targets.contains(csci_id) {
            return;
        }
        if let Some(e) = self.cache.get_mut(csci_id) {
            e.flags.pull_pending = true;
        }
        self.events.push(EngineEvent::PullNeeded {
            csci_id: csci_id.to_owned(),
            reason: super::collect::pull::PullReason::Anomaly,
        });
    }

    pub fn set_cache_config(&mut self, c: CacheConfig) {
        self.cache.max_entries = c.max_entries.max(1);
        self.cache_config = c;
        let (now, wall) = (self.clock.now(), self.clock.wall());
        let updates: Vec<(CsciId, Duration)> = self
            .cache
            .registrations()
            .map(|(id, s)| {
                let ttl = if self.mirrors.owner(id).is_some() {
                    super::mirror::MIRROR_TTL
                } else {
                    self.cache_config.ttl_for_interval(s.expected_interval())
                };
                (id.to_owned(), ttl)
            })
            .collect();
        for (id, ttl) in updates {
            let ev = self.cache.register(&id, ttl, self.cache_config.grace_period, now, wall);
            self.absorb(ev);
        }
    }

    /// Enables (with a window of that many reports), changes or disables smoothing; a new
    /// window starts every average afresh.
    pub fn set_smoothing(&mut self, window: Option<usize>) {
        if self.smoother.as_ref().map(|s| s.window()) != window {
            self.smoother = window.map(super::smooth::Smoother::new);
        }
    }

    pub fn set_function(&mut self, f: ComputingTimeFunction) {
        self.cache.function = f;
        let services: Vec<CsId> = self.cache.services().map(str::to_owned).collect();
        self.events.extend(services.into_iter().map(|cs_id| EngineEvent::SiteChanged { cs_id }));
    }

    /// The strongest suppression of the maintenance windows open now.
    pub fn maintenance_level(&self) -> Option<super::policy::Suppress> {
        self.policy.context(self.clock.wall()).maintenance()
    }

    /// When the next maintenance window opens or closes.
    pub fn next_maintenance_edge(&self) -> Option<Instant> {
        let wall = self.clock.wall();
        let edge = self.policy.next_window_edge(wall)?;
        Some(self.clock.now() + (edge - wall).to_std().unwrap_or_default())
    }

    /// Re-evaluates every service (a maintenance window opened or closed, so rules on
    /// `Time IN Maintenance_Window` may change their outcome).
    pub fn reevaluate_all(&mut self) {
        let services: Vec<CsId> = self.cache.services().map(str::to_owned).collect();
        self.events.extend(services.into_iter().map(|cs_id| EngineEvent::SiteChanged { cs_id }));
    }

    /// Fires due timers (TTL, grace).
    pub fn tick(&mut self) {
        let ev = self.cache.expire(self.clock.now(), self.clock.wall());
        self.absorb(ev);
        super::discovery::expire(self);
        self.auth_summaries();
    }

    pub(crate) fn absorb(&mut self, events: Vec<CacheEvent>) {
        for e in events {
            if let (
                Some(s),
                CacheEvent::Evicted { csci_id, .. } | CacheEvent::StateChanged { csci_id, to: SciState::Failed, .. },
            ) = (&mut self.smoother, &e)
            {
                s.forget(csci_id);
            }
            let mut mirrored = false;
            if let CacheEvent::Evicted { csci_id, .. } = &e {
                if self.mirrors.owner(csci_id).is_some() {
                    // A mirrored entry made room for one of this agent's own SCIs: it is
                    // no longer mirrored (its subordinate's next push of it is a new
                    // entry, refused while the cache is full), and its history is the
                    // subordinate's, not kept here.
                    self.mirrors.remove(csci_id);
                    self.cache.remove_registration(csci_id);
                    mirrored = true;
                }
            }
            if let (false, CacheEvent::Evicted { csci_id, sequence, timestamp, .. }) = (mirrored, &e) {
                // The history first, while the registry still says how the SCI proves
                // itself: a discovered SCI leaves the registry with its eviction, and a
                // record without its authentication method would not be restored when it
                // is discovered again (a replay within the window would pass).
                self.keep_history(csci_id, *sequence, *timestamp);
                super::discovery::evicted(self, csci_id);
            }
            let ev = match e {
                CacheEvent::StateChanged { csci_id, from, to, reason } => {
                    tracing::info!(
                        csci_id,
                        from = from.yang(),
                        to = to.yang(),
                        reason = reason.yang(),
                        "SCI state change"
                    );
                    if to == SciState::Stale {
                        self.request_probe(&csci_id);
                    }
                    EngineEvent::SciStateChange { csci_id, from, to, reason: reason.yang() }
                }
                CacheEvent::SiteChanged { cs_id } => {
                    if self.site_marked(&cs_id) {
                        continue;
                    }
                    EngineEvent::SiteChanged { cs_id }
                }
                CacheEvent::PullNeeded { csci_id } => {
                    // Only an SCI with a pull target is pulled (and flagged so).
                    if !self.pull_targets.contains(&csci_id) {
                        if let Some(e) = self.cache.get_mut(&csci_id) {
                            e.flags.pull_pending = false;
                        }
                        continue;
                    }
                    EngineEvent::PullNeeded { csci_id, reason: super::collect::pull::PullReason::Stale }
                }
                CacheEvent::Evicted { csci_id, cs_id, state, .. } => {
                    tracing::warn!(csci_id, "metric cache full: least recently used entry evicted");
                    self.events.push(EngineEvent::SciStateChange {
                        csci_id: csci_id.clone(),
                        from: state,
                        to: SciState::Failed,
                        reason: super::sci_state::Reason::Evicted.yang(),
                    });
                    EngineEvent::Withdrawn { csci_id, cs_id }
                }
            };
            self.events.push(ev);
        }
    }
}

/// An anomalous metric change in the audit trail (seed 004: log anomalous metric changes);
/// one record per SCI and action per window, so a flapping SCI cannot flood the trail.
fn audit_anomaly(csci_id: &str, anomaly: &validate::Anomaly, action: &'static str) {
    crate::mgmt::audit::event(crate::mgmt::audit::Category::MetricAnomaly)
        .outcome(action)
        .field("csci-id", csci_id)
        .field("anomaly", format!("{anomaly:?}"))
        .emit_aggregated(format!("{csci_id}|{action}"));
}

/// The YANG notification body for an engine event, if it is one (cats-sma module).
pub fn notification_xml(ev: &EngineEvent) -> Option<(&'static str, String)> {
    const NS: &str = "urn:cats-sma:yang:cats-sma";
    let esc = |s: &str| crate::text::xml(s).into_owned();
    match ev {
        EngineEvent::SciStateChange { csci_id, from, to, reason } => Some((
            "sci-state-change",
            format!(
                "<sci-state-change xmlns=\"{NS}\"><csci-id>{}</csci-id><old-state>{}</old-state><new-state>{}</new-state><reason>{reason}</reason></sci-state-change>",
                esc(csci_id),
                from.yang(),
                to.yang()
            ),
        )),
        EngineEvent::MetricAnomaly { csci_id, anomaly, action } => {
            let (metric, old, new) = match anomaly {
                Anomaly::GasJump { old, new } => ("gas", old.to_string(), new.to_string()),
                Anomaly::ComputingTimeJump { old, new } => ("computing-time", old.to_string(), new.to_string()),
                Anomaly::HealthFlapping { transitions } => ("health", String::new(), transitions.to_string()),
            };
            let mut s = format!("<metric-anomaly xmlns=\"{NS}\"><csci-id>{}</csci-id><metric>{metric}</metric>", esc(csci_id));
            if metric != "health" {
                let _ = write!(s, "<old-value>{old}</old-value><new-value>{new}</new-value>");
            }
            let _ = write!(s, "<action>{action}</action></metric-anomaly>");
            Some(("metric-anomaly", s))
        }
        EngineEvent::AuthFailure { source, claimed, transport, reason, detail, aggregated } => {
            // source-address is mandatory: in-process callers have none, so report nothing.
            let source = (*source)?;
            let mut s = format!("<auth-failure xmlns=\"{NS}\"><source-address>{source}</source-address>");
            if let Some(c) = claimed {
                let _ = write!(s, "<claimed-csci-id>{}</claimed-csci-id>", esc(c));
            }
            let _ = write!(
                s,
                "<transport>{transport}</transport><reason xmlns:csmat=\"urn:cats-sma:yang:cats-sma-types\">csmat:{}</reason><detail>{}</detail>",
                reason.identity(),
                esc(detail)
            );
            if *aggregated > 0 {
                let _ = write!(s, "<aggregated-count>{aggregated}</aggregated-count>");
            }
            s.push_str("</auth-failure>");
            Some(("auth-failure", s))
        }
        _ => None,
    }
}

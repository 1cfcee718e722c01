//! The C-SMA metric engine (seed 004): SCI collection, validation, the metric cache and SCI
//! state machine, per-service aggregation, the policy engine and the update controller.
//! Configured through the datastores (northbound), its state is the operational datastore.

pub mod aggregate;
pub mod auth;
pub mod auth_failures;
pub mod cache;
pub mod changes;
pub mod clock;
pub mod collect;
pub mod core;
pub mod discovery;
pub mod mirror;
pub mod model;
pub mod northbound;
pub mod policy;
pub mod probe;
pub mod rate_limit;
pub mod report;
pub mod restart;
pub mod retained;
pub mod sci_state;
pub mod smooth;
pub mod steering;
pub mod update;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::peer_limits::PeerLimits;

use self::clock::Clock;
use self::core::{Core, EngineEvent, Sender};
use self::report::RawReport;
use self::validate::Rejection;

/// Where the engine's notifications go (module, name, XML body); the agent wires it to the
/// NETCONF event stream.
pub type NotificationSink = Arc<dyn Fn(&'static str, &'static str, String) + Send + Sync>;

type Job = Box<dyn FnOnce(&mut Core) + Send>;

/// Per-report outcome of an ingest.
pub type IngestResult = Vec<Result<(), (Rejection, String)>>;

/// A handle to the engine task; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    /// Jobs with when they were handed over.
    jobs: mpsc::UnboundedSender<(tokio::time::Instant, Job)>,
    /// The update controller the engine feeds; adapters and YANG-Push subscribe to its
    /// advertisements.
    pub updates: update::UpdateHandle,
    /// Credentials the transports verify SCI messages against (updated on commit).
    pub auth: auth::SharedAuth,
    /// The typed change stream (YANG-Push on-change); subscribe to receive change sets.
    pub changes: changes::ChangeTap,
    /// What peers may cost (`[peer_limits]`).
    pub limits: Arc<PeerLimits>,
    /// The per-source ingress rate limit, checked by the transports before anything else.
    pub ingress: Arc<rate_limit::Ingress>,
    /// Slots for collector messages queued to the engine task: a message waits for one,
    /// so a flood waits at its own connection instead of growing the queue.
    slots: Arc<tokio::sync::Semaphore>,
    /// Seed 003: the C-SMA as reporting node towards its SCIs (the collectors put its
    /// answers and reports in theirs).
    pub doic: Arc<crate::overload::report::ReportingNode>,
    /// Whether the engine records what it takes (`crate::record`).
    recording: Arc<std::sync::atomic::AtomicBool>,
}

/// What [`Engine::load_sample`] measures.
#[derive(Clone, Copy, Debug)]
pub struct LoadSample {
    /// Reports the engine accepted so far.
    pub accepted: u64,
    /// Percent of the ingest queue's slots in use.
    pub queue: f64,
    /// How long a job waited for the engine task.
    pub lag: Duration,
}

/// A collector message's slot in the engine queue, released when its job has run.
pub type Slot = tokio::sync::OwnedSemaphorePermit;

impl Engine {
    /// Starts the engine task.
    pub fn start(clock: Clock, notify: NotificationSink) -> Engine {
        Engine::start_with(clock, notify, PeerLimits::default())
    }

    /// Starts the engine task with these peer limits.
    pub fn start_with(clock: Clock, notify: NotificationSink, limits: PeerLimits) -> Engine {
        let flood = auth_failures::Aggregator::new(
            Duration::from_secs(limits.auth_failure_window_secs),
            limits.auth_failure_sources,
        );
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.collector_queue.max(1)));
        let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Job)>();
        let (updates, _task) = update::spawn(update::UpdateConfig::default(), clock, 1024)
            .expect("the default update-control configuration is valid");
        let feed = updates.clone();
        let tap = changes::tap();
        let changes = tap.clone();
        let ingress = Arc::new(rate_limit::Ingress::default());
        let counters = ingress.counters.clone();
        let recording = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(async move {
            let mut core = Core::new(clock);
            core.auth_flood = flood;
            core.rate.counters = counters;
            let mut suppressed: std::collections::HashSet<model::CsId> = std::collections::HashSet::new();
            let mut maintenance = None;
            // The epoch of per-SCI detail the controller has every row for.
            let mut rows_epoch = None;
            loop {
                let deadline = [
                    core.cache.next_deadline(),
                    core.next_maintenance_edge(),
                    core.next_auth_summary(),
                    core.discovery.next_deadline(),
                    core.recorder.as_ref().and_then(|r| r.next_flush()),
                ]
                .into_iter()
                .flatten()
                .min();
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                let started;
                // Whether anyone listens is read when the work arrives, not before waiting
                // for it: a subscriber that joined meanwhile must see this job's changes.
                // Timers first when both are ready: a deadline that has passed comes before
                // work handed over after it (and the order is the same on every run, which
                // replay needs). A tick moves every deadline past now, so jobs never starve.
                tokio::select! {
                    biased;
                    _ = sleep => {
                        started = tokio::time::Instant::now();
                        core.tap = tap.receiver_count() > 0;
                        core.sci_rows = feed.sci_detail().is_some();
                        core.tick()
                    }
                    job = rx.recv() => match job {
                        Some((queued, job)) => {
                            started = tokio::time::Instant::now();
                            core.tap = tap.receiver_count() > 0;
                            core.sci_rows = feed.sci_detail().is_some();
                            let received = core.stats.received;
                            job(&mut core);
                            if core.stats.received != received {
                                crate::mgmt::metrics::observe_ingest(queued.elapsed());
                            }
                        }
                        None => return,
                    },
                }
                // Global maintenance windows (seed 004, Policy Engine): an edge suppresses or
                // releases non-critical (or all) updates, before this round's site changes.
                let level = core.maintenance_level();
                if level != maintenance {
                    maintenance = level;
                    let level = level.map(|l| match l {
                        policy::Suppress::NonCritical => update::SuppressLevel::NonCritical,
                        policy::Suppress::All => update::SuppressLevel::All,
                    });
                    tracing::info!(?level, "maintenance window edge");
                    let _ = feed.send(update::UpdateEvent::Suppress { scope: update::SuppressScope::Global, level });
                    core.reevaluate_all();
                }
                core.settle();
                let events = std::mem::take(&mut core.events);
                if core.tap && !events.is_empty() {
                    let set = changes::collect(&core, &events);
                    if !set.is_empty() {
                        let _ = tap.send(Arc::new(changes::ChangeSet { started, changes: set }));
                    }
                }
                for ev in &events {
                    dispatch(ev, &notify);
                    if let (EngineEvent::PullNeeded { csci_id, reason }, Some(tx)) = (ev, &core.pull_requests) {
                        let _ = tx.send((csci_id.clone(), *reason));
                    }
                }
                // Rows first: an advertisement decided on the events below carries them.
                let detail = feed.sci_detail();
                if let Some(rows) = sci_rows(&core, &events, detail, &mut rows_epoch) {
                    let _ = feed.send(update::UpdateEvent::SciRows(rows));
                }
                let policy_changed = std::mem::take(&mut core.policy_changed);
                for u in update_events(&core, &events, &mut suppressed, policy_changed) {
                    let _ = feed.send(u);
                }
                feed.record_accepted(core.stats.accepted);
                if let Some(r) = core.recorder.as_mut() {
                    r.flush_if_due(tokio::time::Instant::now());
                }
            }
        });
        Engine {
            jobs: tx,
            updates,
            auth: Default::default(),
            changes,
            limits: Arc::new(limits),
            ingress,
            slots,
            doic: crate::overload::report::ReportingNode::new(),
            recording,
        }
    }

    /// Wakes the engine loop for one round with no work of its own, so it acts on what its
    /// feed says now (e.g. per-SCI detail switched on: every row goes to the controller at
    /// once, not at the next report or timer). Holds the engine only weakly.
    pub fn waker(&self) -> impl Fn() + Send + Sync + 'static {
        let jobs = self.jobs.downgrade();
        move || {
            if let Some(jobs) = jobs.upgrade() {
                let _ = jobs.send((tokio::time::Instant::now(), Box::new(|_: &mut Core| {})));
            }
        }
    }

    /// Starts recording what the engine takes to `settings.path`, beginning with the
    /// configuration `config_xml`; returns the file's path.
    pub async fn start_recording(
        &self,
        settings: crate::record::RecordSettings,
        config_xml: String,
    ) -> Result<String, String> {
        let opened = self
            .query(move |core| {
                let now = core.clock.now();
                let r = crate::record::Recorder::open(settings, now, core.clock.wall_at(now))?;
                let path = r.path().display().to_string();
                core.recorder = Some(Box::new(r));
                core.record(|| crate::record::Event::Config { xml: config_xml });
                Ok::<_, std::io::Error>(path)
            })
            .await
            .ok_or("the engine stopped")?
            .map_err(|e| format!("record file: {e}"))?;
        self.recording.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(opened)
    }

    /// Whether a recording is being made (configuration consumers record commits then).
    pub fn recording(&self) -> bool {
        self.recording.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `f` on the engine's state, in order with everything else, without waiting.
    pub fn submit(&self, f: impl FnOnce(&mut Core) + Send + 'static) {
        let _ = self.jobs.send((tokio::time::Instant::now(), Box::new(f)));
    }

    /// Waits for a slot in the engine queue for one collector message.
    pub async fn slot(&self) -> Option<Slot> {
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Like [`Engine::submit`] for work a peer caused: waits for a slot first, held until
    /// the job has run.
    pub async fn submit_peer(&self, f: impl FnOnce(&mut Core) + Send + 'static) {
        let slot = self.slot().await;
        self.submit(move |core| {
            f(core);
            drop(slot);
        });
    }

    /// The engine's load now (seed 003, reporting node): the queue's occupancy, the time a
    /// job waits for the engine task, and the reports it accepted so far.
    pub async fn load_sample(&self) -> Option<LoadSample> {
        let capacity = self.limits.collector_queue.max(1);
        let used = capacity.saturating_sub(self.slots.available_permits());
        let queue = 100.0 * used as f64 / capacity as f64;
        let asked = tokio::time::Instant::now();
        let accepted = self.query(|core| core.stats.accepted).await?;
        Some(LoadSample { accepted, queue, lag: asked.elapsed() })
    }

    /// Runs `f` on the engine's state and returns its result.
    pub async fn query<R: Send + 'static>(&self, f: impl FnOnce(&mut Core) -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = oneshot::channel();
        self.submit(move |core| {
            let _ = tx.send(f(core));
        });
        rx.await.ok()
    }

    /// Like [`Engine::query`] from synchronous code (a datastore consumer, a state
    /// provider); must not be called from inside the engine task.
    pub fn query_blocking<R: Send + 'static>(&self, f: impl FnOnce(&mut Core) -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.submit(move |core| {
            let _ = tx.send(f(core));
        });
        rx.recv_timeout(Duration::from_secs(30)).ok()
    }

    /// Ingests reports attributed to `as_sci` (in-process callers and tests).
    pub async fn ingest(&self, reports: Vec<RawReport>, as_sci: Option<String>) -> IngestResult {
        self.ingest_from(reports, Sender { csci_id: as_sci, ..Sender::default() }).await
    }

    /// Ingests the reports of one message from `sender`.
    pub async fn ingest_from(&self, reports: Vec<RawReport>, sender: Sender) -> IngestResult {
        self.query(move |core| core.ingest_batch(&reports, &sender)).await.unwrap_or_default()
    }

    /// Verifies the proof a message carries (see [`auth`]) and ingests its reports; a
    /// failed proof refuses the whole message, counted per report and notified. `claimed`
    /// is who the transport says the message is from (topic, pull target); otherwise the
    /// first report's CSCI-ID.
    pub async fn ingest_message(
        &self,
        reports: Vec<RawReport>,
        proof: Option<&str>,
        body: &[u8],
        sender: Sender,
    ) -> Result<IngestResult, auth::AuthFailure> {
        // The slot is held until the verdicts are back (or moves into the failure's job).
        let slot = self.slot().await;
        let sender = self.authenticate_with(&reports, proof, body, sender, slot)?;
        Ok(self.ingest_from(reports, sender).await)
    }

    /// The authentication step of [`Engine::ingest_message`], for transports that hand
    /// reports over without waiting for their verdicts: returns the sender with what the
    /// proof established, or counts and notifies the failure.
    pub fn authenticate(
        &self,
        reports: &[RawReport],
        proof: Option<&str>,
        body: &[u8],
        sender: Sender,
    ) -> Result<Sender, auth::AuthFailure> {
        self.authenticate_with(reports, proof, body, sender, None)
    }

    fn authenticate_with(
        &self,
        reports: &[RawReport],
        proof: Option<&str>,
        body: &[u8],
        mut sender: Sender,
        slot: Option<Slot>,
    ) -> Result<Sender, auth::AuthFailure> {
        let claimed = sender.csci_id.clone().or_else(|| reports.first().map(|r| r.csci_id.clone()));
        let verdict = {
            let table = self.auth.read().unwrap_or_else(|e| e.into_inner());
            table.verify_proof(proof, claimed.as_deref(), body, chrono::Utc::now())
        };
        // A token proves its own subject: it must be the SCI the transport attributes the
        // message to (topic level, pull target), when it attributes one.
        let verdict = match (verdict, sender.csci_id.as_deref()) {
            (Ok(Some(p)), Some(a)) if p.csci_id != a => Err(auth::AuthFailure::new(
                Some(&p.csci_id),
                &format!("the proof is for {} but the message came as {a}", p.csci_id),
            )),
            (v, _) => v,
        };
        match verdict {
            Ok(Some(proven)) => {
                sender.csci_id = Some(proven.csci_id);
                sender.proof = Some(core::Proof::Credential);
                sender.grant = proven.grant;
            }
            Ok(None) => {}
            Err(f) => {
                let (n, f2) = (reports.len(), f.clone());
                self.submit(move |core| {
                    core.auth_failure(&sender, f2.claimed, f2.detail, n);
                    drop(slot);
                });
                return Err(f);
            }
        }
        Ok(sender)
    }
}

/// The per-SCI rows the update controller needs after a step, while some C-PS wants them
/// (`detail` is the epoch of the current "on"): every row when detail was just switched on,
/// otherwise the rows of the SCIs the step changed, of those that contribute (not FAILED,
/// not ACTIVE without a report). An SCI that left the cache has no row:
/// the controller drops it on the `Removed` event. A policy change re-applies SCI-scope
/// rules to every entry without per-SCI events, so it sends every row too.
fn sci_rows(
    core: &Core,
    events: &[EngineEvent],
    detail: Option<u64>,
    epoch: &mut Option<u64>,
) -> Option<Vec<update::SciMetrics>> {
    let Some(current) = detail else {
        *epoch = None;
        return None;
    };
    // Only SCIs that contribute have a row: a FAILED one's metrics are withdrawn (its GAS
    // contribution is 0) and an ACTIVE one has not reported; the controller drops the row
    // of an SCI that failed, and its `SciStateChange` back sends it again.
    let row = |e: &cache::Entry| {
        if !sci_state::contributes(e.state) {
            return None;
        }
        Some(update::SciMetrics {
            csci_id: e.csci_id.to_string(),
            cs_id: e.cs_id()?.to_owned(),
            state: e.state,
            metrics: e.effective?,
        })
    };
    let rows: Vec<update::SciMetrics> = if *epoch != Some(current) || core.policy_changed {
        *epoch = Some(current);
        core.cache.entries().filter_map(row).collect()
    } else {
        let mut seen = std::collections::HashSet::new();
        events
            .iter()
            .filter_map(|ev| match ev {
                EngineEvent::SciUpdated { csci_id }
                | EngineEvent::SciHealthChange { csci_id, .. }
                | EngineEvent::SciStateChange { csci_id, .. } => Some(csci_id),
                _ => None,
            })
            .filter(|id| seen.insert(id.as_str()))
            .filter_map(|id| core.cache.get(id).and_then(row))
            .collect()
    };
    (!rows.is_empty()).then_some(rows)
}

/// Translates what the engine did into update-controller events: SCI changes first, each
/// with its service's site metrics after the change, then the remaining site changes, and
/// suppression when a SUPPRESS_UPDATES rule starts or stops matching. After a policy change
/// the site changes are one `PolicyChanged` with every service's re-evaluated metrics (seed
/// 004, Policy Change Trigger).
fn update_events(
    core: &Core,
    events: &[EngineEvent],
    suppressed: &mut std::collections::HashSet<model::CsId>,
    policy_changed: bool,
) -> Vec<update::UpdateEvent> {
    use update::{SciChange, SciEvent, SuppressLevel, SuppressScope, UpdateEvent};
    let site = |cs: &str| core.reported.get(cs).map(|(m, _)| m.clone());
    let mut out = Vec::new();
    let mut covered = std::collections::HashSet::new();
    for ev in events {
        let (csci_id, cs_id, change) = match ev {
            EngineEvent::SciStateChange { csci_id, from, to, .. } => {
                let Some(cs) = core.cache.get(csci_id).and_then(|e| e.cs_id().map(str::to_owned)) else { continue };
                let from = (*from != model::SciState::Active).then_some(*from);
                (csci_id, cs, SciChange::State { from, to: *to })
            }
            EngineEvent::SciHealthChange { csci_id, cs_id, from, to } => {
                (csci_id, cs_id.clone(), SciChange::Health { from: *from, to: *to })
            }
            EngineEvent::Withdrawn { csci_id, cs_id: Some(cs) } => (csci_id, cs.clone(), SciChange::Removed),
            _ => continue,
        };
        covered.insert(cs_id.clone());
        out.push(UpdateEvent::Sci(SciEvent { csci_id: csci_id.clone(), site: site(&cs_id), cs_id, change }));
    }
    let mut seen = std::collections::HashSet::new();
    for ev in events {
        let EngineEvent::SiteChanged { cs_id } = ev else { continue };
        if !seen.insert(cs_id.clone()) {
            continue;
        }
        let suppress = core.reported.get(cs_id).is_some_and(|(_, s)| *s);
        if suppress != suppressed.contains(cs_id) {
            let level = suppress.then_some(SuppressLevel::NonCritical);
            out.insert(0, UpdateEvent::Suppress { scope: SuppressScope::Service(cs_id.clone()), level });
            if suppress {
                suppressed.insert(cs_id.clone());
            } else {
                suppressed.remove(cs_id);
            }
        }
        if !covered.contains(cs_id) && !policy_changed {
            if let Some(m) = site(cs_id) {
                out.push(UpdateEvent::Site(m));
            }
        }
    }
    if policy_changed {
        let mut sites: Vec<model::SiteMetrics> = core.reported.values().map(|(m, _)| m.clone()).collect();
        sites.sort_by(|a, b| a.cs_id.cmp(&b.cs_id));
        out.push(UpdateEvent::PolicyChanged(sites));
    }
    out
}

fn dispatch(ev: &EngineEvent, notify: &NotificationSink) {
    if let Some((name, body)) = core::notification_xml(ev) {
        notify("cats-sma", name, body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::auth::{sign_jwt, Credential, JwtRules, JwtSigner};
    use crate::engine::core::SciConfig;

    fn raw(csci: &str) -> RawReport {
        RawReport {
            csci_id: csci.into(),
            cs_id: "AR1".into(),
            sequence: 1,
            timestamp: chrono::Utc::now(),
            gas: 10,
            computing_time: 1,
            health: "HEALTHY".into(),
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    #[tokio::test]
    async fn seed_004_sci_authentication_proof_must_match_the_transport_identity() {
        // seed 004, SCI Collection Interface: "Each connection is identified by the CSCI-ID
        // and authenticated": a token for sci-2 published on sci-1's topic is refused.
        let engine = Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}));
        let key = b"0123456789abcdef0123456789abcdef".to_vec();
        {
            let mut t = engine.auth.write().unwrap();
            let rules = JwtRules { issuer: "site".into(), audience: "csma".into(), ..JwtRules::default() };
            t.credentials.insert("j".into(), Credential::jwt(&key, rules));
            t.scis.insert("sci-2".into(), "j".into());
        }
        let sci = |c: Option<&str>| SciConfig {
            cs_ids: vec!["AR1".into()],
            credential_ref: c.map(str::to_owned),
            unauthenticated: c.is_none(),
            expected_interval: Duration::from_secs(5),
        };
        engine
            .query(move |core| {
                core.set_sci("sci-1", sci(None));
                core.set_sci("sci-2", sci(Some("j")));
            })
            .await;
        let body = br#"{"csci-id":"sci-2"}"#;
        let token = sign_jwt(&JwtSigner::hs256(&key), "sci-2", "site", "csma", body);
        let as_sci1 = Sender { csci_id: Some("sci-1".into()), transport: "mqtt", ..Sender::default() };
        let r = engine.ingest_message(vec![raw("sci-2")], Some(&token), body, as_sci1).await;
        assert!(r.unwrap_err().detail.contains("came as sci-1"));
        let as_sci2 = Sender { csci_id: Some("sci-2".into()), transport: "mqtt", ..Sender::default() };
        let r = engine.ingest_message(vec![raw("sci-2")], Some(&token), body, as_sci2).await.unwrap();
        assert!(r[0].is_ok(), "{r:?}");
        let stats = engine.query(|core| core.stats.rejected[validate::Rejection::Unauthenticated.index()]).await;
        assert_eq!(stats, Some(1));
    }
}

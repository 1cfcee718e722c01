//! The C-SMA metric engine (seed 004): SCI collection, validation, the metric cache and SCI
//! state machine, per-service aggregation, the policy engine and the update controller.
//! Configured through the datastores (northbound), its state is the operational datastore.

pub mod aggregate;
pub mod cache;
pub mod changes;
pub mod clock;
pub mod collect;
pub mod core;
pub mod model;
pub mod northbound;
pub mod policy;
pub mod report;
pub mod sci_state;
pub mod update;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use self::clock::Clock;
use self::core::{Core, EngineEvent};
use self::report::RawReport;
use self::validate::Rejection;

/// Where the engine's notifications go (module, name, XML body); the agent wires it to the
/// NETCONF event stream.
pub type NotificationSink = Arc<dyn Fn(&str, &str, String) + Send + Sync>;

type Job = Box<dyn FnOnce(&mut Core) + Send>;

/// Per-report outcome of an ingest.
pub type IngestResult = Vec<Result<(), (Rejection, String)>>;

/// A handle to the engine task; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::UnboundedSender<Job>,
    /// The update controller the engine feeds; adapters and YANG-Push subscribe to its
    /// advertisements.
    pub updates: update::UpdateHandle,
    /// The typed change stream (YANG-Push on-change); subscribe to receive change sets.
    pub changes: changes::ChangeTap,
}

impl Engine {
    /// Starts the engine task.
    pub fn start(clock: Clock, notify: NotificationSink) -> Engine {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let (updates, _task) = update::spawn(update::UpdateConfig::default(), clock, 1024)
            .expect("the default update-control configuration is valid");
        let feed = updates.clone();
        let tap = changes::tap();
        let changes = tap.clone();
        tokio::spawn(async move {
            let mut core = Core::new(clock);
            let mut suppressed: std::collections::HashSet<model::CsId> = std::collections::HashSet::new();
            loop {
                let deadline = core.cache.next_deadline();
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                core.tap = tap.receiver_count() > 0;
                let started;
                tokio::select! {
                    job = rx.recv() => match job {
                        Some(job) => {
                            started = tokio::time::Instant::now();
                            job(&mut core)
                        }
                        None => return,
                    },
                    _ = sleep => {
                        started = tokio::time::Instant::now();
                        core.tick()
                    }
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
                    if let (EngineEvent::PullNeeded { csci_id }, Some(tx)) = (ev, &core.pull_requests) {
                        let _ = tx.send(csci_id.clone());
                    }
                }
                for u in update_events(&core, &events, &mut suppressed) {
                    let _ = feed.send(u);
                }
            }
        });
        Engine { jobs: tx, updates, changes }
    }

    /// Runs `f` on the engine's state, in order with everything else, without waiting.
    pub fn submit(&self, f: impl FnOnce(&mut Core) + Send + 'static) {
        let _ = self.jobs.send(Box::new(f));
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

    /// Ingests reports (authenticated as `as_sci` when the transport proved an identity).
    pub async fn ingest(&self, reports: Vec<RawReport>, as_sci: Option<String>) -> IngestResult {
        self.query(move |core| reports.iter().map(|r| core.ingest(r, as_sci.as_deref())).collect())
            .await
            .unwrap_or_default()
    }
}

/// Translates what the engine did into update-controller events: SCI changes first, each
/// with its service's site metrics after the change, then the remaining site changes, and
/// suppression when a SUPPRESS_UPDATES rule starts or stops matching.
fn update_events(
    core: &Core,
    events: &[EngineEvent],
    suppressed: &mut std::collections::HashSet<model::CsId>,
) -> Vec<update::UpdateEvent> {
    use update::{SciChange, SciEvent, SuppressLevel, SuppressScope, UpdateEvent};
    let site = |cs: &str| core.reported.get(cs).map(|(m, _)| m.clone());
    let mut out = Vec::new();
    let mut covered = std::collections::HashSet::new();
    for ev in events {
        let (csci_id, cs_id, change) = match ev {
            EngineEvent::SciStateChange { csci_id, from, to, .. } => {
                let Some(cs) = core.cache.get(csci_id).and_then(|e| e.cs_id.clone()) else { continue };
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
        if !covered.contains(cs_id) {
            if let Some(m) = site(cs_id) {
                out.push(UpdateEvent::Site(m));
            }
        }
    }
    out
}

fn dispatch(ev: &EngineEvent, notify: &NotificationSink) {
    if let Some((name, body)) = core::notification_xml(ev) {
        notify("cats-sma", name, body);
    }
}

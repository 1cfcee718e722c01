//! The C-SMA metric engine (seed 004): SCI collection, validation, the metric cache and SCI
//! state machine, per-service aggregation, the policy engine and the update controller.
//! Configured through the datastores (northbound), its state is the operational datastore.

pub mod aggregate;
pub mod cache;
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
}

impl Engine {
    /// Starts the engine task.
    pub fn start(clock: Clock, notify: NotificationSink) -> Engine {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            let mut core = Core::new(clock);
            loop {
                let deadline = core.cache.next_deadline();
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    job = rx.recv() => match job {
                        Some(job) => job(&mut core),
                        None => return,
                    },
                    _ = sleep => core.tick(),
                }
                core.settle();
                for ev in std::mem::take(&mut core.events) {
                    dispatch(&ev, &notify);
                }
            }
        });
        Engine { jobs: tx }
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

fn dispatch(ev: &EngineEvent, notify: &NotificationSink) {
    if let Some((name, body)) = core::notification_xml(ev) {
        notify("cats-sma", name, body);
    }
}

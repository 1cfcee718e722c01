//! The Update Controller's task: drives the state machine from the event channel and its
//! own deadline, and fans advertisements out to subscribers. All decisions are in
//! `controller.rs`; this file only waits.

use std::future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::advertisement::Advertisement;
use super::config::UpdateConfig;
use super::controller::UpdateController;
use super::error::{ConfigError, UpdateError};
use super::events::UpdateEvent;
use super::stats::UpdateStats;
use crate::engine::clock::Clock;

enum Command {
    Event(UpdateEvent),
    Reconfigure(UpdateConfig),
}

/// The engine's and the northbound's way in, and the adapters' way to subscribe. Cheap to
/// clone; the task stops when the last handle is dropped.
#[derive(Clone)]
pub struct UpdateHandle {
    commands: mpsc::UnboundedSender<Command>,
    advertisements: broadcast::Sender<Arc<Advertisement>>,
    stats: watch::Receiver<UpdateStats>,
    shared: Arc<Shared>,
}

/// What the engine loop and the controller share without a message per report.
#[derive(Default)]
struct Shared {
    /// The engine's running total of accepted SCI reports (load shedding's measure).
    accepted: AtomicU64,
    /// Some C-PS wants per-SCI rows, and how often that was switched on (the engine sends
    /// every row again when it sees a new epoch).
    detail: AtomicBool,
    detail_epoch: AtomicU64,
}

/// Starts the controller. `capacity` is how many advertisements a subscriber may fall behind
/// before it is told it lagged (see the module documentation).
pub fn spawn(
    config: UpdateConfig,
    clock: Clock,
    capacity: usize,
) -> Result<(UpdateHandle, JoinHandle<()>), ConfigError> {
    let controller = UpdateController::new(config, clock, clock.now())?;
    let (commands, rx) = mpsc::unbounded_channel();
    let (advertisements, _) = broadcast::channel(capacity.max(1));
    let (stats_tx, stats) = watch::channel(controller.stats());
    let shared = Arc::new(Shared::default());
    let task = tokio::spawn(run(controller, clock, rx, advertisements.clone(), stats_tx, shared.clone()));
    Ok((UpdateHandle { commands, advertisements, stats, shared }, task))
}

impl UpdateHandle {
    /// Hands an event to the controller; never blocks (see the module documentation for why
    /// the queue is unbounded).
    pub fn send(&self, event: UpdateEvent) -> Result<(), UpdateError> {
        let detail = match &event {
            UpdateEvent::SciDetail(on) => Some(*on),
            _ => None,
        };
        self.commands.send(Command::Event(event)).map_err(|_| UpdateError::Stopped)?;
        // After the event is queued: rows the engine sends on seeing the flag arrive after it.
        if let Some(on) = detail {
            if on && !self.shared.detail.swap(true, Ordering::SeqCst) {
                self.shared.detail_epoch.fetch_add(1, Ordering::SeqCst);
            } else if !on {
                self.shared.detail.store(false, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    /// Whether the engine should send `SciRows`, and the epoch of the current "on" (a new
    /// epoch: the controller holds no rows yet, send them all). `None` when off.
    pub fn sci_detail(&self) -> Option<u64> {
        self.shared.detail.load(Ordering::SeqCst).then(|| self.shared.detail_epoch.load(Ordering::SeqCst))
    }

    /// The engine's running total of accepted SCI reports, published after each batch of
    /// work (one relaxed store; the controller samples it once a second for load shedding).
    pub fn record_accepted(&self, total: u64) {
        self.shared.accepted.store(total, Ordering::Relaxed);
    }

    /// Validates and applies a new configuration (call `UpdateConfig::validate` in a commit's
    /// prepare phase and this in its apply phase).
    pub fn reconfigure(&self, config: UpdateConfig) -> Result<(), UpdateError> {
        config.validate()?;
        self.commands.send(Command::Reconfigure(config)).map_err(|_| UpdateError::Stopped)
    }

    /// A new subscriber sees the advertisements made from now on; it should ask for a
    /// `Resync` first. On `RecvError::Lagged` it has missed some and must ask again.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Advertisement>> {
        self.advertisements.subscribe()
    }

    /// The counters as of the controller's last step.
    pub fn stats(&self) -> UpdateStats {
        self.stats.borrow().clone()
    }
}

async fn run(
    mut controller: UpdateController,
    clock: Clock,
    mut commands: mpsc::UnboundedReceiver<Command>,
    advertisements: broadcast::Sender<Arc<Advertisement>>,
    stats: watch::Sender<UpdateStats>,
    shared: Arc<Shared>,
) {
    loop {
        let deadline = controller.next_deadline();
        let out = tokio::select! {
            // Events first: each one also sends whatever is due, so timers never starve.
            biased;
            command = commands.recv() => match command {
                None => break,
                Some(Command::Event(event)) => controller.on_event(event, clock.now()),
                Some(Command::Reconfigure(config)) => match controller.reconfigure(config, clock.now()) {
                    Ok(out) => out,
                    Err(e) => {
                        tracing::warn!(error = %e, "update controller: configuration refused");
                        Vec::new()
                    }
                },
            },
            () = sleep_until(deadline) => controller.on_tick(clock.now()),
        };
        controller.observe_load(shared.accepted.load(Ordering::Relaxed), clock.now());
        for advertisement in out {
            tracing::debug!(
                seq = advertisement.seq,
                kind = ?advertisement.kind,
                trigger = advertisement.trigger.name(),
                sites = advertisement.sites.len(),
                withdrawn = advertisement.withdrawn.len(),
                sci_withdrawn = advertisement.sci_withdrawn.len(),
                scis = advertisement.scis.len(),
                "update controller: advertisement"
            );
            // No subscriber: nobody to tell; an adapter that subscribes later resyncs.
            let _ = advertisements.send(Arc::new(advertisement));
        }
        stats.send_replace(controller.stats());
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => future::pending().await,
    }
}

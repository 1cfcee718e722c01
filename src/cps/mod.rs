//! The northbound C-PS REST adapter (seed 004, Protocol Adapter, centralized model, and
//! C-PS Failure Handling) and the reference C-PS it talks to.
//!
//! - `grpc/`: the gRPC stream (`proto/cats/sma/v1/cps.proto`): the same sessions over one
//!   bidirectional call per peer, and the C-PS's full-sync requests, queries (answered from
//!   `current.rs`, the site as last advertised) and policy updates (applied through the
//!   datastore, `grpc/policy.rs`).
//! - `wire.rs`: the bodies (one serde model) and gzip; `codec.rs`: their JSON, XML and
//!   CBOR encodings (pure); `auth.rs`: HMAC-SHA256 signing and the
//!   verifier (timestamp window, nonces); `transport.rs`: HTTP/1.1 over TCP or rustls.
//! - `queue.rs` (the bounded buffer), `backoff.rs`, `session.rs` (one task per peer: the
//!   reconnect, reconciliation and fallback state machine).
//! - `config.rs` (datastore commits in), `state.rs` (session state out).
//! - `selection.rs`: seed 000 section 4 site selection; `reference/`: the reference C-PS.
//!
//! The update controller's broadcast feeds one dispatcher task, which only moves
//! advertisements into the per-peer buffers, so a slow or dead C-PS never holds up another.

pub mod auth;
pub mod codec;
pub mod config;
pub mod current;
pub mod grpc;
pub mod overload;
pub mod queue;
pub mod reference;
pub mod selection;
pub mod session;
pub mod signing;
pub mod state;
pub mod transport;
pub mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use self::auth::NonceSource;
use self::grpc::policy::Northbound;
use self::session::{lock, Channel, Hooks, Peer, PeerSettings, Registry, Session};
use crate::engine::update::Advertisement;

/// What the sessions sign with: the nonce source (persisted by the agent) and the C-SMA's
/// private key.
#[derive(Clone)]
pub struct NorthboundKeys {
    pub nonces: Arc<NonceSource>,
    pub signing: Option<Arc<signing::SigningKey>>,
}

impl NorthboundKeys {
    /// In memory only: a fresh key, nonces from the clock.
    pub fn ephemeral() -> NorthboundKeys {
        NorthboundKeys {
            nonces: Arc::new(NonceSource::new()),
            signing: Some(Arc::new(signing::SigningKey::ephemeral())),
        }
    }

    /// The agent's: the key of `alg` and the nonce ceiling kept in the state directory.
    pub fn from_state_dir(dir: &std::path::Path, alg: signing::Algorithm) -> std::io::Result<NorthboundKeys> {
        Ok(NorthboundKeys {
            nonces: Arc::new(NonceSource::persistent(&dir.join("cps_nonce"))?),
            signing: Some(Arc::new(signing::SigningKey::load_or_generate_with(dir, alg)?)),
        })
    }
}

/// A session's stop switch and task.
type SessionTask = (watch::Sender<bool>, JoinHandle<()>);

/// The running adapters: every configured peer's session and the dispatcher.
pub struct Adapters {
    pub registry: Arc<Registry>,
    hooks: Hooks,
    keys: std::sync::RwLock<NorthboundKeys>,
    sessions: Mutex<HashMap<String, SessionTask>>,
    dispatcher: JoinHandle<()>,
    /// What the update controller was last told of per-SCI rows (`SciDetail`).
    sci_detail: Mutex<bool>,
    /// Where gRPC peers' policy updates go (the management core); None refuses them.
    northbound: std::sync::RwLock<Option<Arc<dyn Northbound>>>,
}

impl Adapters {
    /// Starts the dispatcher on `advertisements`; peers are added with [`Adapters::start_peer`].
    pub fn start(
        identity: session::Identity,
        advertisements: broadcast::Receiver<Arc<Advertisement>>,
        hooks: Hooks,
    ) -> Arc<Adapters> {
        let registry = Registry::new(identity);
        let dispatcher = tokio::spawn(dispatch(registry.clone(), advertisements, hooks.clone()));
        // Overload reports expire on their own (RFC 7683 section 5.5.2): checked every second
        // (validities are whole seconds).
        let weak = Arc::downgrade(&registry);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(r) = weak.upgrade() else { break };
                overload::expire(&r);
            }
        });
        Arc::new(Adapters {
            registry,
            hooks,
            keys: std::sync::RwLock::new(NorthboundKeys::ephemeral()),
            sessions: Mutex::new(HashMap::new()),
            dispatcher,
            sci_detail: Mutex::new(false),
            northbound: std::sync::RwLock::new(None),
        })
    }

    /// Starts (or restarts with new settings) the session of one peer. Updates still buffered
    /// for a peer of the same name are carried over.
    pub fn start_peer(&self, settings: PeerSettings, transport: impl Into<Channel>) {
        let transport = transport.into();
        let name = settings.name.clone();
        let old = self.stop_peer(&name);
        let peer = Arc::new(Peer::new(settings));
        if let Channel::Grpc(link) = &transport {
            link.set_northbound(self.northbound.read().unwrap_or_else(|e| e.into_inner()).clone());
            let _ = peer.grpc.set(link.counters());
        }
        if let Some(old) = old {
            // The overload state outlives a change of the peer's settings (RFC 7683 section
            // 5.5.2: it is kept per peer until the report expires or is replaced) as long as
            // the peer is the same node: another SourceID is another C-PS.
            if old.settings.source_id() == peer.settings.source_id() {
                let carried = lock(&old.overload).clone();
                *lock(&peer.overload) = carried;
                lock(&peer.overload).reconnected();
            }
            let mut from = lock(&old.queue);
            let mut to = lock(&peer.queue);
            to.dropped = from.dropped;
            to.superseded = from.superseded;
            if peer.settings.role == session::Role::Primary {
                while let Some(ad) = from.peek_batch(1).pop() {
                    from.delivered(ad.seq);
                    to.push(ad);
                }
            }
        }
        self.registry.peers.write().unwrap_or_else(|e| e.into_inner()).insert(name.clone(), peer.clone());
        let (stop_tx, stop_rx) = watch::channel(false);
        let keys = self.keys();
        let session = Session {
            peer,
            registry: self.registry.clone(),
            transport,
            hooks: self.hooks.clone(),
            nonces: keys.nonces,
            signing: keys.signing,
        };
        let task = tokio::spawn(session.run(stop_rx));
        lock(&self.sessions).insert(name, (stop_tx, task));
        self.registry.changed.send_modify(|g| *g += 1);
        self.update_sci_detail();
    }

    /// Tells the update controller whether any peer takes per-SCI rows, when that changes.
    fn update_sci_detail(&self) {
        let want = self.registry.peers().iter().any(|p| p.settings.granularity.sci());
        let mut told = lock(&self.sci_detail);
        if *told != want {
            *told = want;
            (self.hooks.sci_detail)(want);
        }
    }

    /// Stops a peer's session and forgets it; returns it (with its buffer).
    pub fn stop_peer(&self, name: &str) -> Option<Arc<Peer>> {
        if let Some((stop, task)) = lock(&self.sessions).remove(name) {
            let _ = stop.send(true);
            task.abort();
        }
        let peer = self.registry.peers.write().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.registry.changed.send_modify(|g| *g += 1);
        if let Some(p) = &peer {
            // The controller forgets the hint of a peer that is gone (a restarted one
            // announces its own again). The session may still be running (the abort is not
            // immediate), but it passes a hint on only while the registry holds its peer,
            // so none arrives after this.
            if lock(&p.status).refresh_interval.take().is_some() {
                (self.hooks.refresh_hint)(name, None);
            }
            self.update_sci_detail();
        }
        peer
    }

    /// Where later gRPC sessions apply their C-PS's policy updates (the agent's core).
    pub fn set_northbound(&self, nb: Arc<dyn Northbound>) {
        *self.northbound.write().unwrap_or_else(|e| e.into_inner()) = Some(nb);
    }

    /// Sets what later sessions sign with (the agent does so before any peer starts).
    pub fn set_keys(&self, keys: NorthboundKeys) {
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
    }

    pub fn keys(&self) -> NorthboundKeys {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_identity(&self, identity: session::Identity) {
        *self.registry.identity.write().unwrap_or_else(|e| e.into_inner()) = identity;
    }

    pub fn peer(&self, name: &str) -> Option<Arc<Peer>> {
        self.registry.peers.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Stops every session and the dispatcher.
    pub fn shutdown(&self) {
        let names: Vec<String> = lock(&self.sessions).keys().cloned().collect();
        for n in names {
            self.stop_peer(&n);
        }
        self.dispatcher.abort();
    }
}

impl Drop for Adapters {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn dispatch(registry: Arc<Registry>, mut rx: broadcast::Receiver<Arc<Advertisement>>, hooks: Hooks) {
    loop {
        match rx.recv().await {
            Ok(ad) => {
                lock(&registry.current).fold(&ad);
                overload::dispatch_one(&registry, &ad);
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                // Missed deltas: every peer's view may be wrong; a full snapshot settles it.
                tracing::warn!(missed = n, "C-PS adapter fell behind the update controller; resyncing every peer");
                for peer in registry.peers() {
                    (hooks.resync)(&peer.settings.name);
                }
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

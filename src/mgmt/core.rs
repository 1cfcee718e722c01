//! The transport-neutral management core: the datastores, users, NACM, the sessions and
//! their identities, the event streams with replay, the YANG-Push subscription registry and
//! the agent's own RPCs. NETCONF, RESTCONF and the notification transports are front ends
//! that hold an `Arc<Core>`; none of them reaches into another.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::config::NetconfSettings;
use crate::datastore::{Datastores, SessionId};
use crate::mgmt::users::UserStore;

use super::{confirmed_commit, events};

/// The agent's own RPCs (the YANG `rpc` statements of its modules), served by the parts
/// of the agent that own them. `input` is the parsed and validated RPC (libyang checked
/// the input against the schema); the result is the output's child elements as XML (empty
/// for `<ok/>`).
pub trait AppRpc: Send + Sync {
    fn call(
        &self,
        module: &str,
        name: &str,
        input: &yang2::data::DataTree<'static>,
    ) -> Result<String, crate::error::RpcError>;
}

/// What the server knows about one live session (monitoring, kill-session).
pub struct SessionInfo {
    pub username: String,
    pub source: Option<SocketAddr>,
    pub login_time: chrono::DateTime<chrono::Utc>,
    pub in_rpcs: AtomicU64,
    pub in_bad_rpcs: AtomicU64,
    pub out_rpc_errors: AtomicU64,
    pub out_notifications: AtomicU64,
    /// Set to the killing session's id to make the session end (kill-session).
    pub kill: watch::Sender<Option<SessionId>>,
    /// The RFC 6022 transport identity (`netconf-ssh` unless the transport says otherwise).
    pub transport: Mutex<&'static str>,
}

/// Global counters (RFC 6022 statistics).
#[derive(Default)]
pub struct Statistics {
    pub in_bad_hellos: AtomicU64,
    pub in_sessions: AtomicU64,
    pub dropped_sessions: AtomicU64,
    pub in_rpcs: AtomicU64,
    pub in_bad_rpcs: AtomicU64,
    pub out_rpc_errors: AtomicU64,
    pub out_notifications: AtomicU64,
    /// Notifications a slow subscriber could not receive (logged too).
    pub dropped_notifications: AtomicU64,
}

/// State shared by every session of the server.
pub struct Core {
    pub datastores: Arc<Datastores>,
    pub users: UserStore,
    pub settings: NetconfSettings,
    pub sessions: Mutex<HashMap<SessionId, Arc<SessionInfo>>>,
    pub stats: Statistics,
    pub start_time: chrono::DateTime<chrono::Utc>,
    /// Flips to true when the server shuts down.
    pub shutdown: watch::Sender<bool>,
    pub confirmed_commit: confirmed_commit::ConfirmedCommit,
    pub nacm: Arc<crate::nacm::Nacm>,
    /// The NETCONF event stream (RFC 5277) with its replay log.
    pub events: events::EventBus,
    /// Handlers of the agent's own RPCs by YANG module, registered by the parts that own
    /// them as they start.
    app_rpcs: std::sync::RwLock<std::collections::HashMap<String, Arc<dyn AppRpc>>>,
    /// YANG-Push dynamic subscriptions (RFC 8639/8641).
    pub push: Arc<crate::push::Push>,
    /// Connection gates, the password-check pool and their counters (all listeners).
    pub limits: Arc<crate::mgmt::auth_limits::Limits>,
    /// The `/metrics` exposition: its sources and the RPC counts.
    pub metrics: crate::mgmt::metrics::Metrics,
}

impl Core {
    /// Serves the RPCs of YANG module `module` with `handler` from now on.
    pub fn register_app_rpc(&self, module: &str, handler: Arc<dyn AppRpc>) {
        self.app_rpcs.write().unwrap_or_else(|e| e.into_inner()).insert(module.to_owned(), handler);
    }

    /// The handler of `module`'s RPCs, once registered.
    pub fn app_rpc(&self, module: &str) -> Option<Arc<dyn AppRpc>> {
        self.app_rpcs.read().unwrap_or_else(|e| e.into_inner()).get(module).cloned()
    }

    pub fn new(
        datastores: Arc<Datastores>,
        users: UserStore,
        settings: NetconfSettings,
        nacm: Arc<crate::nacm::Nacm>,
        limits: Arc<crate::mgmt::auth_limits::Limits>,
    ) -> Arc<Core> {
        let server = Arc::new(Core {
            datastores,
            users,
            settings,
            sessions: Mutex::new(HashMap::new()),
            stats: Statistics::default(),
            start_time: chrono::Utc::now(),
            shutdown: watch::channel(false).0,
            confirmed_commit: Default::default(),
            nacm,
            events: Default::default(),
            app_rpcs: Default::default(),
            push: Default::default(),
            limits,
            metrics: Default::default(),
        });
        server.metrics.register(Arc::new(ManagementMetrics { server: Arc::downgrade(&server) }));
        server.datastores.register_consumer(Arc::new(events::ConfigChangeNotifier { server: Arc::downgrade(&server) }));
        server.datastores.register_consumer(server.push.running_feed());
        server
            .datastores
            .register_state_provider(Arc::new(crate::push::state::PushState { server: Arc::downgrade(&server) }));
        server
    }

    /// Registers a new session; `None` when max-sessions is reached.
    pub fn open_session(&self, username: &str, source: Option<SocketAddr>) -> Option<(SessionId, Arc<SessionInfo>)> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= self.settings.max_sessions {
            return None;
        }
        // NACM hands out the identity: never one still live, never a RESTCONF one.
        let id = self.nacm.open_identity(&crate::nacm::NETCONF_IDS, username)?;
        let info = Arc::new(SessionInfo {
            username: username.to_owned(),
            source,
            login_time: chrono::Utc::now(),
            in_rpcs: AtomicU64::new(0),
            in_bad_rpcs: AtomicU64::new(0),
            out_rpc_errors: AtomicU64::new(0),
            out_notifications: AtomicU64::new(0),
            kill: watch::channel(None).0,
            transport: Mutex::new("netconf-ssh"),
        });
        sessions.insert(id, info.clone());
        self.stats.in_sessions.fetch_add(1, Ordering::Relaxed);
        Some((id, info))
    }

    /// Forgets a session and releases what it held: its locks, candidate changes behind
    /// its lock, its NACM identity, and its pending confirmed commit (rolled back unless it
    /// was made with persist, RFC 6241 8.4.1). Called once per session; later calls (the
    /// session task ending after kill-session already closed it) do nothing.
    pub fn close_session(&self, id: SessionId) {
        let removed = self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        if removed.is_some() {
            self.nacm.session_closed(id);
            self.datastores.release_session(id);
            self.confirmed_commit.session_ended(self, id);
        }
    }

    pub fn session(&self, id: SessionId) -> Option<Arc<SessionInfo>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The management plane's own figures in `/metrics`: sessions, notifications, subscriptions.
struct ManagementMetrics {
    server: std::sync::Weak<Core>,
}

impl crate::mgmt::metrics::Source for ManagementMetrics {
    fn reads(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("ietf-netconf-monitoring", "/ietf-netconf-monitoring:netconf-state"),
            ("ietf-subscribed-notifications", "/ietf-subscribed-notifications:subscriptions"),
        ]
    }

    fn collect(&self, out: &mut crate::mgmt::metrics::Exposition) {
        let Some(s) = self.server.upgrade() else { return };
        let mut by_transport: std::collections::BTreeMap<&'static str, i64> = Default::default();
        for info in s.sessions.lock().unwrap_or_else(|e| e.into_inner()).values() {
            *by_transport.entry(*info.transport.lock().unwrap_or_else(|e| e.into_inner())).or_default() += 1;
        }
        let f = out.gauge("netconf_sessions", "NETCONF sessions open, by transport");
        for (t, n) in by_transport {
            f.set(&[("transport", t)], n);
        }
        let st = &s.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter("netconf_sessions_opened", "NETCONF sessions opened since start").count(&[], get(&st.in_sessions));
        out.counter("netconf_sessions_dropped", "NETCONF sessions ended without close-session or kill-session")
            .count(&[], get(&st.dropped_sessions));
        out.counter("notifications_sent", "Notifications sent to NETCONF subscribers")
            .count(&[], get(&st.out_notifications));
        out.counter("notifications_dropped", "Notifications a slow subscriber could not receive")
            .count(&[], get(&st.dropped_notifications));
        let subs = s.push.entries();
        let (mut sent, mut excluded, mut suspended) = (0u64, 0u64, 0i64);
        for e in &subs {
            sent += e.counters.sent.load(Ordering::Relaxed);
            excluded += e.counters.excluded.load(Ordering::Relaxed);
            suspended += i64::from(e.counters.suspended.load(Ordering::Relaxed));
        }
        out.gauge("subscriptions", "Dynamic subscriptions (RFC 8639), and how many are suspended")
            .set(&[("state", "active")], subs.len() as i64 - suspended)
            .set(&[("state", "suspended")], suspended);
        out.counter("subscription_notifications_sent", "Notifications the live dynamic subscriptions sent")
            .count(&[], sent);
        out.counter("subscription_notifications_excluded", "Events the live dynamic subscriptions' filters excluded")
            .count(&[], excluded);
    }
}

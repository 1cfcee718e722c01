//! NETCONF Call Home (RFC 8071): the agent opens the TCP connection to a NETCONF client
//! that listens, then is the SSH server ([`super::ssh::serve_stream`]) or the TLS server
//! ([`super::tls::serve_connection`]) on it, exactly as on an accepted connection: the
//! roles are reversed at the TCP level only (RFC 8071).
//!
//! One task per configured `netconf-client`. Its endpoints are tried in order; an
//! endpoint failing `max-attempts` times in a row passes the turn to the next (after the
//! last, the first again). Between two failed attempts the task waits with exponential
//! backoff (`initial-backoff`, doubling, at most `max-backoff`), reset once a NETCONF
//! session came up. A persistent client is called again as soon as its session ends; a
//! periodic one once per `period`, its session closed after `idle-timeout` without a
//! message from the client (the connection-type of ietf-netconf-server). What happened is
//! in the operational state under each client (`state`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use yang2::data::{Data, DataTree};

use crate::datastore::SessionId;
use crate::mgmt::Core;
use crate::tls::ServerTls;

/// IANA's netconf-ch-ssh and netconf-ch-tls ports (RFC 8071, IANA Considerations).
pub const DEFAULT_SSH_PORT: u16 = 4334;
pub const DEFAULT_TLS_PORT: u16 = 4335;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Ssh,
    Tls,
}

impl Transport {
    pub fn is_tls(self) -> bool {
        self == Transport::Tls
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub transport: Transport,
    pub host: String,
    pub port: u16,
}

/// A periodic connection (ietf-netconf-server connection-type periodic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Periodic {
    pub period: Duration,
    pub idle_timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strategy {
    pub max_attempts: u32,
    pub max_wait: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

/// One configured `netconf-client`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    pub name: String,
    pub endpoints: Vec<Endpoint>,
    /// `None`: persistent.
    pub periodic: Option<Periodic>,
    pub strategy: Strategy,
}

/// Reads `netconf-server/call-home` from a configuration tree.
pub fn clients(t: &DataTree<'static>) -> Result<Vec<Client>, String> {
    let base = format!("{}/call-home/netconf-client", super::tls::BASE);
    let mut out = Vec::new();
    let Ok(set) = t.find_xpath(&base) else { return Ok(out) };
    for c in set {
        let path = c.path();
        let leaf = |rel: &str| -> Option<String> {
            t.find_path(&format!("{path}/{rel}")).ok().and_then(|n| n.value_canonical())
        };
        let secs =
            |rel: &str, default: u64| Duration::from_secs(leaf(rel).and_then(|v| v.parse().ok()).unwrap_or(default));
        let name = leaf("name").unwrap_or_default();
        let mut endpoints = Vec::new();
        if let Ok(eps) = t.find_xpath(&format!("{path}/endpoint")) {
            for e in eps {
                let ep = e.path();
                let get = |l: &str| t.find_path(&format!("{ep}/{l}")).ok().and_then(|n| n.value_canonical());
                let transport = match get("transport").as_deref() {
                    Some("tls") => Transport::Tls,
                    _ => Transport::Ssh,
                };
                let default_port = if transport.is_tls() { DEFAULT_TLS_PORT } else { DEFAULT_SSH_PORT };
                endpoints.push(Endpoint {
                    name: get("name").unwrap_or_default(),
                    transport,
                    host: get("remote-address")
                        .ok_or_else(|| format!("call-home {name}: an endpoint lacks remote-address"))?,
                    port: get("remote-port").and_then(|p| p.parse().ok()).unwrap_or(default_port),
                });
            }
        }
        if endpoints.is_empty() {
            return Err(format!("call-home {name}: no endpoint"));
        }
        let periodic = t.find_path(&format!("{path}/periodic")).is_ok().then(|| Periodic {
            period: secs("periodic/period", 3600),
            idle_timeout: secs("periodic/idle-timeout", 180),
        });
        let strategy = Strategy {
            max_attempts: leaf("reconnect-strategy/max-attempts").and_then(|v| v.parse().ok()).unwrap_or(3),
            max_wait: secs("reconnect-strategy/max-wait", 5),
            initial_backoff: secs("reconnect-strategy/initial-backoff", 1),
            max_backoff: secs("reconnect-strategy/max-backoff", 60),
        };
        out.push(Client { name, endpoints, periodic, strategy });
    }
    Ok(out)
}

/// What a transport tells the caller of a connection: when its NETCONF session starts and
/// ends, and the idle timeout it runs with (a periodic Call Home's). Empty for the listeners.
#[derive(Clone, Default)]
pub struct Hooks {
    pub idle: Option<Duration>,
    pub on_session: Option<Arc<dyn Fn(SessionId, bool) + Send + Sync>>,
    /// Notified when a NETCONF session of the connection ends: a called-out SSH connection
    /// is then closed (its purpose is that one session), a listener's stays for the
    /// client to open another channel.
    pub session_ended: Option<Arc<tokio::sync::Notify>>,
}

impl Hooks {
    pub fn started(&self, id: SessionId) {
        if let Some(f) = &self.on_session {
            f(id, true);
        }
    }

    pub fn ended(&self, id: SessionId) {
        if let Some(f) = &self.on_session {
            f(id, false);
        }
        if let Some(n) = &self.session_ended {
            n.notify_one();
        }
    }

    /// Resolves when a session ended, if the caller asked to be told; never otherwise.
    pub async fn wait_session_ended(&self) {
        match &self.session_ended {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    }
}

/// One client's calls, for the operational state.
#[derive(Clone, Debug, Default)]
pub struct ClientState {
    pub session: Option<SessionId>,
    pub endpoint: Option<String>,
    pub attempts: u64,
    pub failed: u64,
    pub sessions: u64,
    pub last_connected: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub next_attempt: Option<DateTime<Utc>>,
}

struct Running {
    client: Client,
    state: Arc<Mutex<ClientState>>,
    stop: watch::Sender<bool>,
}

/// The Call Home clients and their tasks.
pub struct CallHome {
    server: Arc<Core>,
    ssh: Arc<russh::server::Config>,
    identity: watch::Receiver<Option<Arc<ServerTls>>>,
    clients: Mutex<HashMap<String, Running>>,
}

impl CallHome {
    pub fn new(
        server: Arc<Core>,
        ssh: Arc<russh::server::Config>,
        identity: watch::Receiver<Option<Arc<ServerTls>>>,
    ) -> Arc<CallHome> {
        Arc::new(CallHome { server, ssh, identity, clients: Mutex::new(HashMap::new()) })
    }

    /// Stops the tasks of clients gone or changed and starts those new or changed.
    pub fn reconcile(self: &Arc<Self>, wanted: Vec<Client>) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|name, r| {
            let keep = wanted.iter().any(|w| w == &r.client);
            if !keep {
                debug!(client = %name, "Call Home: client removed or changed");
                r.stop.send_replace(true);
            }
            keep
        });
        for c in wanted {
            if clients.contains_key(&c.name) {
                continue;
            }
            let state = Arc::new(Mutex::new(ClientState::default()));
            let (stop, stop_rx) = watch::channel(false);
            tokio::spawn(run(self.clone(), c.clone(), state.clone(), stop_rx));
            clients.insert(c.name.clone(), Running { client: c, state, stop });
        }
    }

    /// A client's state now.
    pub fn state(&self, name: &str) -> Option<ClientState> {
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.get(name).map(|r| r.state.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

fn update(state: &Mutex<ClientState>, f: impl FnOnce(&mut ClientState)) {
    f(&mut state.lock().unwrap_or_else(|e| e.into_inner()));
}

/// A persistent session shorter than this is followed by initial-backoff before the next call.
const SHORT_SESSION: Duration = Duration::from_secs(5);

/// Resolves when `stop` says so (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One client's calls until it is removed.
async fn run(ch: Arc<CallHome>, client: Client, state: Arc<Mutex<ClientState>>, mut stop: watch::Receiver<bool>) {
    let s = client.strategy;
    let mut backoff = s.initial_backoff;
    let (mut index, mut failures_here) = (0usize, 0u32);
    let mut next_period = Instant::now();
    loop {
        if let Some(p) = client.periodic {
            // The next period's start; those missed while connected are skipped.
            let now = Instant::now();
            while next_period + p.period <= now {
                next_period += p.period;
            }
            update(&state, |st| st.next_attempt = Some(Utc::now() + (next_period - now)));
            tokio::select! {
                _ = tokio::time::sleep_until(next_period) => {}
                _ = stopped(&mut stop) => return,
            }
            next_period += p.period;
        }
        // Attempts until a session came up (and ended), or, periodic, the next period is due.
        loop {
            let ep = &client.endpoints[index % client.endpoints.len()];
            update(&state, |st| {
                st.attempts += 1;
                st.endpoint = Some(ep.name.clone());
                st.next_attempt = None;
            });
            let started = Instant::now();
            let result = attempt(&ch, &client, ep, &state, &mut stop).await;
            if *stop.borrow() {
                return;
            }
            match result {
                Ok(()) => {
                    backoff = s.initial_backoff;
                    failures_here = 0;
                    // A persistent client whose sessions end at once (closed right after the
                    // hello) is called again after initial-backoff, not in a tight loop.
                    if client.periodic.is_none() && started.elapsed() < SHORT_SESSION {
                        update(&state, |st| {
                            st.next_attempt =
                                Some(Utc::now() + chrono::Duration::from_std(s.initial_backoff).unwrap_or_default())
                        });
                        tokio::select! {
                            _ = tokio::time::sleep(s.initial_backoff) => {}
                            _ = stopped(&mut stop) => return,
                        }
                    }
                    break;
                }
                Err(e) => {
                    debug!(client = %client.name, endpoint = %ep.name, "Call Home attempt failed: {e}");
                    update(&state, |st| {
                        st.failed += 1;
                        st.last_error = Some(e);
                    });
                    failures_here += 1;
                    if failures_here >= s.max_attempts {
                        index += 1;
                        failures_here = 0;
                    }
                }
            }
            if client.periodic.is_some() && Instant::now() + backoff >= next_period {
                // Periodic: the next period calls again; no retry beyond it.
                break;
            }
            update(&state, |st| st.next_attempt = Some(Utc::now() + backoff));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stopped(&mut stop) => return,
            }
            backoff = (backoff * 2).min(s.max_backoff);
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One call: TCP within `max-wait`, then the transport until the connection ends. `Ok`
/// when a NETCONF session came up (whatever ended it later).
async fn attempt(
    ch: &Arc<CallHome>,
    client: &Client,
    ep: &Endpoint,
    state: &Arc<Mutex<ClientState>>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let what = format!("{}:{}", ep.host, ep.port);
    let socket =
        match tokio::time::timeout(client.strategy.max_wait, TcpStream::connect((ep.host.as_str(), ep.port))).await {
            Err(_) => return Err(format!("{what}: not connected within {} s", client.strategy.max_wait.as_secs())),
            Ok(Err(e)) => return Err(format!("{what}: {e}")),
            Ok(Ok(s)) => s,
        };
    let peer = socket.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], ep.port)));
    let _ = socket.set_nodelay(true);
    let gate = if ep.transport.is_tls() { &ch.server.limits.netconf_tls } else { &ch.server.limits.ssh };
    let permit = gate.admit(peer).map_err(|r| format!("{what}: over a pre-authentication limit ({})", r.as_str()))?;
    info!(client = %client.name, endpoint = %ep.name, %peer, transport = ?ep.transport, "Call Home: connected");
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hooks = {
        let (state, up, name) = (state.clone(), up.clone(), client.name.clone());
        Hooks {
            idle: client.periodic.map(|p| p.idle_timeout),
            session_ended: Some(Arc::new(tokio::sync::Notify::new())),
            on_session: Some(Arc::new(move |sid, started| {
                update(&state, |st| {
                    if started {
                        st.session = Some(sid);
                        st.sessions += 1;
                        st.last_connected = Some(Utc::now());
                    } else if st.session == Some(sid) {
                        st.session = None;
                    }
                });
                if started {
                    up.store(true, std::sync::atomic::Ordering::Relaxed);
                    info!(client = %name, session = sid, "Call Home: NETCONF session up");
                }
            })),
        }
    };
    let server = ch.server.clone();
    let conn = async {
        match ep.transport {
            Transport::Ssh => {
                super::ssh::serve_stream(server.clone(), ch.ssh.clone(), socket, peer, permit, hooks).await;
                Ok(())
            }
            Transport::Tls => {
                let Some(tls) = ch.identity.borrow().clone() else {
                    return Err("no TLS identity in force (netconf-server/tls)".to_string());
                };
                super::tls::serve_connection(server.clone(), tls, ch.identity.clone(), socket, peer, permit, hooks)
                    .await
            }
        }
    };
    tokio::pin!(conn);
    let r = tokio::select! {
        r = &mut conn => r,
        _ = stopped(stop) => {
            // Removed or reconfigured: the session ends as killed by the agent, cleanly.
            let sid = state.lock().unwrap_or_else(|e| e.into_inner()).session;
            if let Some(info) = sid.and_then(|s| ch.server.session(s)) {
                info.kill.send_replace(Some(crate::datastore::SYSTEM_SESSION));
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), &mut conn).await;
            Ok(())
        }
    };
    // SSH: the connection can end before the session task has noticed.
    let sid = state.lock().unwrap_or_else(|e| e.into_inner()).session;
    if let Some(sid) = sid {
        let deadline = Instant::now() + Duration::from_secs(5);
        while ch.server.session(sid).is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        update(state, |st| st.session = None);
    }
    if up.load(std::sync::atomic::Ordering::Relaxed) {
        info!(client = %client.name, endpoint = %ep.name, "Call Home: session ended");
        return r.or(Ok(()));
    }
    let e = r.err().unwrap_or_else(|| format!("{what}: the connection ended before a NETCONF session came up"));
    warn!(client = %client.name, endpoint = %ep.name, "Call Home: {e}");
    Err(e)
}

impl crate::datastore::StateProvider for CallHome {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), crate::error::RpcError> {
        use crate::datastore::tree::{quote, set};
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let all: Vec<(String, ClientState)> = {
            let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients
                .iter()
                .map(|(n, r)| (n.clone(), r.state.lock().unwrap_or_else(|e| e.into_inner()).clone()))
                .collect()
        };
        let time = |d: DateTime<Utc>| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        for (name, st) in all {
            let base = format!("{}/call-home/netconf-client[name={}]/state", super::tls::BASE, quote(&name));
            set(tree, &format!("{base}/connected"), Some(if st.session.is_some() { "true" } else { "false" }))?;
            if let Some(e) = &st.endpoint {
                set(tree, &format!("{base}/endpoint"), Some(e))?;
            }
            if let Some(s) = st.session {
                set(tree, &format!("{base}/session-id"), Some(&s.to_string()))?;
            }
            set(tree, &format!("{base}/connection-attempts"), Some(&st.attempts.to_string()))?;
            set(tree, &format!("{base}/failed-attempts"), Some(&st.failed.to_string()))?;
            set(tree, &format!("{base}/sessions"), Some(&st.sessions.to_string()))?;
            if let Some(t) = st.last_connected {
                set(tree, &format!("{base}/last-connected"), Some(&time(t)))?;
            }
            if let Some(e) = &st.last_error {
                set(tree, &format!("{base}/last-error"), Some(e))?;
            }
            if let (None, Some(t)) = (st.session, st.next_attempt) {
                set(tree, &format!("{base}/next-attempt"), Some(&time(t)))?;
            }
        }
        Ok(())
    }
}
